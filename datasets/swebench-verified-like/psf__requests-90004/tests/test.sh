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
git -c core.fileMode=false diff e1eac8f7c8a397c2d60800de20b6b1d9b4d09b4a
source /opt/miniconda3/bin/activate
conda activate testbed
python -m pip install .
git checkout e1eac8f7c8a397c2d60800de20b6b1d9b4d09b4a tests/test_structures.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_structures.py b/tests/test_structures.py
index e2fd5baaf..3dc432df4 100644
--- a/tests/test_structures.py
+++ b/tests/test_structures.py
@@ -39,6 +39,12 @@ class TestCaseInsensitiveDict:
         assert copy is not self.case_insensitive_dict
         assert copy == self.case_insensitive_dict
 
+    def test_equality_ignores_case(self):
+        cid = CaseInsensitiveDict({"Content-Type": "text/html"})
+        assert cid == {"content-type": "text/html"}
+        assert cid == CaseInsensitiveDict({"CONTENT-TYPE": "text/html"})
+        assert cid != {"content-type": "text/plain"}
+
     @pytest.mark.parametrize(
         "other, result",
         (

EOF_114329324912
: '>>>>> Start Test Output'
pytest -rA tests/test_structures.py
: '>>>>> End Test Output'
git checkout e1eac8f7c8a397c2d60800de20b6b1d9b4d09b4a tests/test_structures.py
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
