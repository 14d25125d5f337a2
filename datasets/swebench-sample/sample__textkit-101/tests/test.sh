#!/bin/bash
# SWE-bench evaluation script (the shape of Harbor's adapters/swebench test.sh).
set -uo pipefail
LOG_FILE=/logs/verifier/test-output.log
mkdir -p /logs/verifier
cd /testbed
git status --short
git checkout fdb5f93f22aaffb96522e9379ebdb417a1d43889 -- tests/test_textkit.py
git apply --verbose - <<'EOF_TEST_PATCH'
diff --git a/tests/test_textkit.py b/tests/test_textkit.py
index 4cd6ca6..5db8e10 100644
--- a/tests/test_textkit.py
+++ b/tests/test_textkit.py
@@ -7,3 +7,11 @@ def test_simple():
 
 def test_title_case():
     assert title_case("a tale of two") == "A Tale Of Two"
+
+
+def test_punctuation_collapses():
+    assert slugify("Hello, World!") == "hello-world"
+
+
+def test_spaces_collapse():
+    assert slugify("a  b   c") == "a-b-c"
EOF_TEST_PATCH
python3 -m pytest -rA -p no:cacheprovider tests/test_textkit.py 2>&1 | tee "$LOG_FILE"
git checkout fdb5f93f22aaffb96522e9379ebdb417a1d43889 -- tests/test_textkit.py
python3 /tests/grade.py "$LOG_FILE" /tests/config.json /logs/verifier/report.json
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
exit 0
