#!/bin/bash
# SWE-bench evaluation (Harbor SWE-bench adapter layout). The block below is swebench 4.1.0's own
# make_test_spec(record).eval_script for this instance; its output is the log parser.py grades.
mkdir -p /logs/verifier
LOG_FILE=/logs/verifier/test-output.log
(
set -uxo pipefail
source /opt/miniconda3/bin/activate
conda activate testbed
cd /testbed
git config --global --add safe.directory /testbed
cd /testbed
git status
git show
git -c core.fileMode=false diff 79d3c31369eaac2c1631080b3234d8cc726dbd66
source /opt/miniconda3/bin/activate
conda activate testbed
python -m pip install .
git checkout 79d3c31369eaac2c1631080b3234d8cc726dbd66 tests/test_utils.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_utils.py b/tests/test_utils.py
index 112bbd1ea..b25a64262 100644
--- a/tests/test_utils.py
+++ b/tests/test_utils.py
@@ -440,6 +440,11 @@ def test_get_auth_from_url(url, auth):
     assert get_auth_from_url(url) == auth
 
 
+def test_get_auth_from_url_percent_encoded():
+    url = "http://us%40er:p%3Ass%20word@example.com/path"
+    assert get_auth_from_url(url) == ("us@er", "p:ss word")
+
+
 @pytest.mark.parametrize(
     "uri, expected",
     (

EOF_114329324912
: '>>>>> Start Test Output'
pytest -rA tests/test_utils.py
: '>>>>> End Test Output'
git checkout 79d3c31369eaac2c1631080b3234d8cc726dbd66 tests/test_utils.py
) 2>&1 | tee "$LOG_FILE"

export PATH="$HOME/.local/bin:$PATH"
cd /tests
uv run parser.py "$LOG_FILE" | tee -a /logs/verifier/parser-output.txt
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
elif [ "$rc" -eq 1 ]; then
  echo 0 > /logs/verifier/reward.txt
else
  echo "parser.py could not grade (exit $rc): no reward written (an infrastructure error, not a 0)" >&2
fi
exit 0
