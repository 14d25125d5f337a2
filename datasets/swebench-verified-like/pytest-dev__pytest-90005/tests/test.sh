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
git -c core.fileMode=false diff fd15f8b4484bf498169c7a8b9487f2fd18a481f4
source /opt/miniconda3/bin/activate
conda activate testbed
python -m pip install -e .
git checkout fd15f8b4484bf498169c7a8b9487f2fd18a481f4 testing/test_pathlib.py
git apply -v - <<'EOF_114329324912'
diff --git a/testing/test_pathlib.py b/testing/test_pathlib.py
index a4bccb1b2..110c53df3 100644
--- a/testing/test_pathlib.py
+++ b/testing/test_pathlib.py
@@ -527,6 +527,12 @@ def test_commonpath() -> None:
     assert commonpath(path, path.parent.parent) == path.parent.parent
 
 
+def test_bestrelpath_to_sibling_trees() -> None:
+    curdir = Path("/srv/project/src/pkg")
+    assert bestrelpath(curdir, Path("/srv/project/tests")) == os.path.join("..", "..", "tests")
+    assert bestrelpath(curdir, Path("/srv/other")) == os.path.join("..", "..", "..", "other")
+
+
 def test_visit_ignores_errors(tmp_path: Path) -> None:
     symlink_or_skip("recursive", tmp_path / "recursive")
     tmp_path.joinpath("foo").write_bytes(b"")

EOF_114329324912
: '>>>>> Start Test Output'
pytest -rA testing/test_pathlib.py
: '>>>>> End Test Output'
git checkout fd15f8b4484bf498169c7a8b9487f2fd18a481f4 testing/test_pathlib.py
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
