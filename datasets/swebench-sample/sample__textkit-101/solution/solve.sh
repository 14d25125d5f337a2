#!/bin/bash
set -euo pipefail
cd /testbed
cat > /testbed/solution_patch.diff <<'EOF_GOLD_PATCH'
diff --git a/textkit/__init__.py b/textkit/__init__.py
index 7c96d74..b96b1c2 100644
--- a/textkit/__init__.py
+++ b/textkit/__init__.py
@@ -4,7 +4,7 @@ import re
 
 def slugify(text):
     """Lower-case words joined by single dashes: 'Hello, World!' -> 'hello-world'."""
-    text = re.sub(r"[^a-z0-9]", "-", text.lower())
+    text = re.sub(r"[^a-z0-9]+", "-", text.lower())
     return text.strip("-")
 
 
EOF_GOLD_PATCH
patch --fuzz=5 -p1 -i /testbed/solution_patch.diff
rm -f /testbed/solution_patch.diff
