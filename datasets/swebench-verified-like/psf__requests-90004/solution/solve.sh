#!/bin/bash
set -euo pipefail
cd /testbed
cat > /testbed/solution_patch.diff <<'__SOLUTION__'
diff --git a/requests/structures.py b/requests/structures.py
index cfa1c8908..188e13e48 100644
--- a/requests/structures.py
+++ b/requests/structures.py
@@ -70,7 +70,7 @@ class CaseInsensitiveDict(MutableMapping):
         else:
             return NotImplemented
         # Compare insensitively
-        return dict(self.items()) == dict(other.items())
+        return dict(self.lower_items()) == dict(other.lower_items())
 
     # Copy is required
     def copy(self):
__SOLUTION__
patch --fuzz=5 -p1 -i /testbed/solution_patch.diff
