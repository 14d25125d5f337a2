#!/bin/bash
set -euo pipefail
cd /testbed
cat > /testbed/solution_patch.diff <<'__SOLUTION__'
diff --git a/src/flask/config.py b/src/flask/config.py
index 1259868ae..7e3ba1790 100644
--- a/src/flask/config.py
+++ b/src/flask/config.py
@@ -178,7 +178,8 @@ class Config(dict):  # type: ignore[type-arg]
 
             for part in parts:
                 # If an intermediate dict does not exist, create it.
-                current[part] = {}
+                if part not in current:
+                    current[part] = {}
 
                 current = current[part]
 
__SOLUTION__
patch --fuzz=5 -p1 -i /testbed/solution_patch.diff
