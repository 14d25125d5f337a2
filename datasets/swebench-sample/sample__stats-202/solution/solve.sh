#!/bin/bash
set -euo pipefail
cd /testbed
cat > /testbed/solution_patch.diff <<'EOF_GOLD_PATCH'
diff --git a/stats/__init__.py b/stats/__init__.py
index 61a1e94..416c0b0 100644
--- a/stats/__init__.py
+++ b/stats/__init__.py
@@ -10,4 +10,6 @@ def median(values):
     """Middle value; the mean of the two middle values for an even count."""
     s = sorted(values)
     n = len(s)
+    if n % 2 == 0:
+        return (s[n // 2 - 1] + s[n // 2]) / 2
     return s[n // 2]
EOF_GOLD_PATCH
patch --fuzz=5 -p1 -i /testbed/solution_patch.diff
rm -f /testbed/solution_patch.diff
