#!/bin/bash
# SWE-bench evaluation script (the shape of Harbor's adapters/swebench test.sh).
set -uo pipefail
LOG_FILE=/logs/verifier/test-output.log
mkdir -p /logs/verifier
cd /testbed
git status --short
git checkout 652f67731f4464acf92234bcef29cc62e7ce8a93 -- tests/test_stats.py
git apply --verbose - <<'EOF_TEST_PATCH'
diff --git a/tests/test_stats.py b/tests/test_stats.py
index 1a84d67..5267c09 100644
--- a/tests/test_stats.py
+++ b/tests/test_stats.py
@@ -7,3 +7,7 @@ def test_mean():
 
 def test_median_odd():
     assert median([3, 1, 2]) == 2
+
+
+def test_median_even():
+    assert median([4, 1, 3, 2]) == 2.5
EOF_TEST_PATCH
python3 -m pytest -rA -p no:cacheprovider tests/test_stats.py 2>&1 | tee "$LOG_FILE"
git checkout 652f67731f4464acf92234bcef29cc62e7ce8a93 -- tests/test_stats.py
python3 /tests/grade.py "$LOG_FILE" /tests/config.json /logs/verifier/report.json
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
exit 0
