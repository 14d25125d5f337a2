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
git -c core.fileMode=false diff 302b504f998ef4541ff8b9233e0d47540c5b2e3b
source /opt/miniconda3/bin/activate
conda activate testbed
python -m pip install -e .
git checkout 302b504f998ef4541ff8b9233e0d47540c5b2e3b tests/test_config.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_config.py b/tests/test_config.py
index e5b1906e7..c78362f4b 100644
--- a/tests/test_config.py
+++ b/tests/test_config.py
@@ -107,6 +107,14 @@ def test_from_prefixed_env_nested(monkeypatch):
     assert app.config["NEW"] == {"K": "v"}
 
 
+def test_from_prefixed_env_nested_keeps_siblings(monkeypatch):
+    monkeypatch.setenv("FLASK_DB__HOST", "db.internal")
+    app = flask.Flask(__name__)
+    app.config["DB"] = {"HOST": "localhost", "PORT": 5432}
+    app.config.from_prefixed_env()
+    assert app.config["DB"] == {"HOST": "db.internal", "PORT": 5432}
+
+
 def test_config_from_mapping():
     app = flask.Flask(__name__)
     app.config.from_mapping({"SECRET_KEY": "config", "TEST_KEY": "foo"})

EOF_114329324912
: '>>>>> Start Test Output'
pytest -rA tests/test_config.py
: '>>>>> End Test Output'
git checkout 302b504f998ef4541ff8b9233e0d47540c5b2e3b tests/test_config.py
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
