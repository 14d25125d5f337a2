#!/bin/bash
set -euo pipefail
cd /testbed
cat > /testbed/solution_patch.diff <<'__SOLUTION__'
diff --git a/src/_pytest/pathlib.py b/src/_pytest/pathlib.py
index a4199b06b..e39f47723 100644
--- a/src/_pytest/pathlib.py
+++ b/src/_pytest/pathlib.py
@@ -884,7 +884,7 @@ def bestrelpath(directory: Path, dest: Path) -> str:
     reldest = dest.relative_to(base)
     return os.path.join(
         # Back from directory to base.
-        *([os.pardir] * max(len(reldirectory.parts) - 1, 0)),
+        *([os.pardir] * len(reldirectory.parts)),
         # Forward from base to dest.
         *reldest.parts,
     )
__SOLUTION__
patch --fuzz=5 -p1 -i /testbed/solution_patch.diff
