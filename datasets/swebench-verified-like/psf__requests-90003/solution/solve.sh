#!/bin/bash
set -euo pipefail
cd /testbed
cat > /testbed/solution_patch.diff <<'__SOLUTION__'
diff --git a/requests/utils.py b/requests/utils.py
index 6d689acf2..a367417f8 100644
--- a/requests/utils.py
+++ b/requests/utils.py
@@ -1022,7 +1022,7 @@ def get_auth_from_url(url):
     parsed = urlparse(url)
 
     try:
-        auth = (parsed.username or "", parsed.password or "")
+        auth = (unquote(parsed.username), unquote(parsed.password))
     except (AttributeError, TypeError):
         auth = ("", "")
 
__SOLUTION__
patch --fuzz=5 -p1 -i /testbed/solution_patch.diff
