#!/bin/bash
set -euo pipefail
cd /testbed
cat > /testbed/solution_patch.diff <<'__SOLUTION__'
diff --git a/src/flask/config.py b/src/flask/config.py
index 7e37359f8..7e3ba1790 100644
--- a/src/flask/config.py
+++ b/src/flask/config.py
@@ -362,7 +362,7 @@ class Config(dict):  # type: ignore[type-arg]
             else:
                 key = k
             if lowercase:
-                key = k.lower()
+                key = key.lower()
             rv[key] = v
         return rv
 
__SOLUTION__
patch --fuzz=5 -p1 -i /testbed/solution_patch.diff
