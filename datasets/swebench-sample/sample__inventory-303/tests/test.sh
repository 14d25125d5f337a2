#!/bin/bash
# SWE-bench evaluation script (the shape of Harbor's adapters/swebench test.sh).
set -uo pipefail
LOG_FILE=/logs/verifier/test-output.log
mkdir -p /logs/verifier
cd /testbed
git status --short
git checkout ca0682c4901cc8af60aafc6bc50c81ac1164ddbf -- tests/test_inventory.py
git apply --verbose - <<'EOF_TEST_PATCH'
diff --git a/tests/test_inventory.py b/tests/test_inventory.py
index 28ec6ca..0fdd1dc 100644
--- a/tests/test_inventory.py
+++ b/tests/test_inventory.py
@@ -10,3 +10,12 @@ def test_add_and_count():
 
 def test_grams():
     assert Inventory().add_weight("flour", "500g") == 500
+
+
+def test_kilograms():
+    assert Inventory().add_weight("sugar", "2kg") == 2000
+
+
+def test_units_module():
+    from inventory.units import grams
+    assert grams("1.5kg") == 1500
EOF_TEST_PATCH
python3 -m pytest -rA -p no:cacheprovider tests/test_inventory.py 2>&1 | tee "$LOG_FILE"
git checkout ca0682c4901cc8af60aafc6bc50c81ac1164ddbf -- tests/test_inventory.py
python3 /tests/grade.py "$LOG_FILE" /tests/config.json /logs/verifier/report.json
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
exit 0
