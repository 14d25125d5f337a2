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
git -c core.fileMode=false diff 7a858a693cf5721b06db9419a191abc05aec2e06
source /opt/miniconda3/bin/activate
conda activate testbed
python -m pip install -e .
git checkout 7a858a693cf5721b06db9419a191abc05aec2e06 tests/test_config.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_config.py b/tests/test_config.py
index e5b1906e7..401bc995d 100644
--- a/tests/test_config.py
+++ b/tests/test_config.py
@@ -240,6 +240,15 @@ def test_get_namespace():
     assert "bar stuff 2" == bar_options["BAR_STUFF_2"]
 
 
+def test_get_namespace_trim_and_lowercase():
+    app = flask.Flask(__name__)
+    app.config["MAIL_SERVER"] = "smtp.example.org"
+    app.config["MAIL_PORT"] = 25
+    app.config["OTHER"] = 1
+    assert app.config.get_namespace("MAIL_") == {"server": "smtp.example.org", "port": 25}
+    assert app.config.get_namespace("MAIL_", lowercase=False) == {"SERVER": "smtp.example.org", "PORT": 25}
+
+
 @pytest.mark.parametrize("encoding", ["utf-8", "iso-8859-15", "latin-1"])
 def test_from_pyfile_weird_encoding(tmp_path, encoding):
     f = tmp_path / "my_config.py"

EOF_114329324912
: '>>>>> Start Test Output'
pytest -rA tests/test_config.py
: '>>>>> End Test Output'
git checkout 7a858a693cf5721b06db9419a191abc05aec2e06 tests/test_config.py
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
