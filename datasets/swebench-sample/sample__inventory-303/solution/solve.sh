#!/bin/bash
set -euo pipefail
cd /testbed
cat > /testbed/solution_patch.diff <<'EOF_GOLD_PATCH'
diff --git a/inventory/__init__.py b/inventory/__init__.py
index 8d171e3..c3d2090 100644
--- a/inventory/__init__.py
+++ b/inventory/__init__.py
@@ -1,4 +1,5 @@
 """A tiny inventory."""
+from inventory.units import grams
 
 
 class Inventory:
@@ -14,5 +15,5 @@ class Inventory:
     def add_weight(self, name, weight):
         """Record a weight such as '2kg' or '500g' (stored in grams)."""
         self.weights = getattr(self, "weights", {})
-        self.weights[name] = int(weight.rstrip("g"))
+        self.weights[name] = grams(weight)
         return self.weights[name]
diff --git a/inventory/units.py b/inventory/units.py
new file mode 100644
index 0000000..5faefbe
--- /dev/null
+++ b/inventory/units.py
@@ -0,0 +1,11 @@
+"""Weight units."""
+
+FACTORS = {"kg": 1000, "g": 1}
+
+
+def grams(text):
+    """'2kg' -> 2000, '500g' -> 500."""
+    for unit in ("kg", "g"):
+        if text.endswith(unit):
+            return int(float(text[: -len(unit)]) * FACTORS[unit])
+    raise ValueError(f"unknown unit in {text!r}")
EOF_GOLD_PATCH
patch --fuzz=5 -p1 -i /testbed/solution_patch.diff
rm -f /testbed/solution_patch.diff
