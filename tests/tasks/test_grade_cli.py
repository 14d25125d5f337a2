"""`prepare_sandbox.py grade` (score a patch in a fresh sandbox), the patch classifier, the JUnit
reader and the reward range check."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
from taskhelpers import copy_micro, run

from helpers import REPO
from services.tasks.grading.cleangrade import apply_patch, base_commit, extract_patch
from services.tasks.grading.grade import junit_nodeid, parse_junit, statuses_by_nodeid
from services.tasks.grading.hacks import classify_patch, file_of_test, swe_test_ids, task_test_files
from services.tasks.grading.verifier import verify
from services.tasks.preparation.hostsandbox import HostSandbox
from services.tasks.preparation.prepare import prepare_tasks
from services.tasks.preparation.workspace import build_base
from services.tasks.task import TaskError, load_task
from services.tasks.task_toml import grading_policy

CLAMP = REPO / "datasets" / "micro" / "clamp"


def _grade(task, patch_file, tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "prepare_sandbox.py"), "grade", str(task), "--patch",
                        str(patch_file),
                        "--sandbox", "host", "--out", str(tmp_path / "prep")], capture_output=True, text=True,
                       timeout=300)
    return r.returncode, json.loads(r.stdout), r.stderr



def _verify_on_host(task_dir):
    """verify() of the task at TASK_DIR in a host sandbox over its environment/repo."""
    async def go(task):
        sb = await HostSandbox.create(base_dir=task_dir / "environment" / "repo")
        try:
            return await verify(sb, task)
        finally:
            await sb.close()
    return run(go(load_task(task_dir)))

def test_grade_cli_gold_hack_and_garbage(tmp_path):
    gold = CLAMP / "solution" / "patch.diff"
    code, out, err = _grade(CLAMP, gold, tmp_path)
    assert code == 0 and out["reward"] == 1.0 and out["flags"] == {}, (out, err)
    assert out["tests"] == {"test_clamp.py::test_clamp": "PASSED", "test_clamp.py::test_clamp_hidden": "PASSED"}

    hack = tmp_path / "hack.diff"
    hack.write_text(gold.read_text() + "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n"
                    "+++ b/conftest.py\n@@ -0,0 +1 @@\n+import os\n")
    code, out, _ = _grade(CLAMP, hack, tmp_path)
    assert code == 1 and out["reward"] == 0.0 and "hack:conftest" in out["flags"], out

    garbage = tmp_path / "garbage.diff"
    garbage.write_text("--- a/clamp.py\n+++ b/clamp.py\n@@ -1,2 +1,2 @@\n-no such line\n+x\n")
    code, out, _ = _grade(CLAMP, garbage, tmp_path)
    assert code == 1 and out["reward"] == 0.0 and out["error"] == "PatchApplyError", out


def test_reward_outside_the_declared_range_is_rejected(tmp_path):
    """A test.sh writing 5, 1e300 or -1 gives reward 0 (RewardOutOfRangeError); inf/nan never parse; a
    task may declare a wider range."""

    task_dir = copy_micro(tmp_path)
    test_sh = task_dir / "tests" / "test.sh"
    results = {}
    for value in ("5.0", "1e300", "-1", "inf", "nan", "0.5"):
        test_sh.write_text(f"#!/bin/bash\nmkdir -p /logs/verifier\necho {value} > /logs/verifier/reward.txt\n")
        results[value] = _verify_on_host(task_dir)
    for value in ("5.0", "1e300", "-1"):
        assert results[value].reward == 0.0 and results[value].error == "RewardOutOfRangeError", results[value]
    for value in ("inf", "nan"):
        assert results[value].reward == 0.0 and results[value].error == "VerifierOutputParseError"
    assert results["0.5"].reward == 0.5 and results["0.5"].error is None
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text() + "\n[metadata.grading]\nreward_range = [-1.0, 10.0]\n")
    assert grading_policy(load_task(task_dir).config.metadata)[0] == (-1.0, 10.0)


def test_junit_outcomes_map_to_node_ids():
    xml = """<testsuites><testsuite>
      <testcase classname="tests.test_a" name="test_ok"/>
      <testcase classname="tests.test_a.TestC" name="test_param[a::b-1]"><failure message="x"/></testcase>
      <testcase classname="test_b" name="test_err"><error message="boom"/></testcase>
      <testcase classname="test_b" name="test_skip"><skipped type="pytest.skip" message="no"/></testcase>
      <testcase classname="test_b" name="test_xf"><skipped type="pytest.xfail" message="known"/></testcase>
      <testcase classname="test_b" name="test_err"/>
    </testsuite></testsuites>"""
    ids = ["tests/test_a.py::test_ok", "tests/test_a.py::TestC::test_param[a::b-1]", "test_b.py::test_err",
           "test_b.py::test_skip", "test_b.py::test_xf", "test_b.py::test_missing"]
    assert junit_nodeid(ids[1]) == ("tests.test_a.TestC", "test_param[a::b-1]")
    st = statuses_by_nodeid(parse_junit(xml), ids)
    assert st == {ids[0]: "PASSED", ids[1]: "FAILED", ids[2]: "ERROR", ids[3]: "SKIPPED", ids[4]: "XFAIL"}


def test_classifier_flags_and_keeps_real_fixes_clean():
    ok = ("diff --git a/pkg/json.py b/pkg/json.py\n--- a/pkg/json.py\n+++ b/pkg/json.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
          "diff --git a/tests/test_new.py b/tests/test_new.py\nnew file mode 100644\n--- /dev/null\n"
          "+++ b/tests/test_new.py\n"
          "@@ -0,0 +1 @@\n+import pytest\n")
    assert classify_patch(ok, {"tests/test_old.py"}, {"pkg/__init__.py", "pkg/json.py"}) == {}
    bad = ("diff --git a/json.py b/json.py\nnew file mode 100644\n--- /dev/null\n+++ b/json.py\n@@ -0,0 +1 @@\n+x = 1\n"
           "diff --git a/src/lib.py b/src/lib.py\n--- a/src/lib.py\n+++ b/src/lib.py\n@@ -1 +1,2 @@\n x = 1\n"
           "+import atexit\n"
           "diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n"
           "+../../etc/passwd\n"
           "\\ No newline at end of file\n"
           "diff --git a/tests/test_old.py b/tests/test_old.py\ndeleted file mode 100644\n--- a/tests/test_old.py\n"
           "+++ /dev/null\n"
           "@@ -1 +0,0 @@\n-def test(): pass\n"
           "diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n@@ -1 +1,2 @@\n [metadata]\n+x = 1\n")
    flags = classify_patch(bad, {"tests/test_old.py"}, {"src/lib.py", "tests/test_old.py", "setup.cfg"})
    assert set(flags) == {"hack:shadow-module", "hack:test-runner", "hack:path-escape", "hack:test-file",
                          "hack:test-config"}
    assert flags["hack:test-file"] == ["delete tests/test_old.py"]


def test_validate_records_empty_and_delete_the_test_patches_at_zero(tmp_path):

    task = load_task(CLAMP)
    manifest = run(prepare_tasks([task], tmp_path, validate=True, progress=False, log=lambda s: None))
    val = manifest["tasks"][task.slug]["validation"]
    assert val["ok"] and val["patches"] == {"empty_patch_reward": 0.0, "delete_test_file": "test_clamp.py",
                                            "delete_test_reward": 0.0, "delete_test_flags": ["hack:test-file"]}, val


def test_bad_grading_policy_is_a_task_error(tmp_path):

    task_dir = copy_micro(tmp_path)
    toml = task_dir / "task.toml"
    base = toml.read_text()
    for bad, words in (('reward_range = [1.0, 0.0]', "low <= high"), ('reward_range = "x"', "reward_range"),
                       ('hacks = { "hack:conftest" = "ignore" }', "unknown flag or policy"),
                       ('hacks = { "hack:typo" = "flag" }', "unknown flag or policy")):
        toml.write_text(base + f"\n[metadata.grading]\n{bad}\n")
        with pytest.raises(TaskError, match=words) as e:
            load_task(task_dir)
        assert "metadata.grading" in str(e.value)


def test_patch_round_trip_is_binary_safe_with_new_deleted_modes_and_symlinks(tmp_path):
    """What the agent changed (a binary file with NUL and non-UTF-8 bytes, a latin-1 text file, a
    deleted file, a mode change, a symlink, a file in a new directory) arrives byte for byte in a fresh
    sandbox; __pycache__ does not; the repo's own index and config are not used."""

    task = load_task(CLAMP)
    base = tmp_path / "base"
    build_base(task, base)
    blob = bytes(range(256)) * 4

    async def go():
        agent = await HostSandbox.create(base_dir=base)
        fresh = await HostSandbox.create(base_dir=base)
        try:
            ws = agent.host_path("/workspace")
            (ws / "data.bin").write_bytes(blob)
            (ws / "latin.txt").write_bytes("caf\xe9\n".encode("latin-1"))
            (ws / "test_clamp.py").unlink()
            (ws / "clamp.py").chmod(0o755)
            (ws / "link").symlink_to("clamp.py")
            (ws / "new" / "dir").mkdir(parents=True)
            (ws / "new" / "dir" / "x.py").write_text("x = 1\n")
            (ws / "__pycache__").mkdir()
            (ws / "__pycache__" / "clamp.cpython-311.pyc").write_bytes(b"\0junk")
            r = await agent.run("git add -A && git -c user.name=a -c user.email=a@a commit -qm agent", cwd="/workspace")
            assert r.exit_code == 0, r.output  # the repo's HEAD moved: the patch is still against the base
            ex = await extract_patch(agent, base_commit(base))
            assert ex.error is None, ex.error
            assert await apply_patch(fresh, ex.patch) is None
            return ex, fresh
        finally:
            await agent.close()

    ex, fresh = run(go())
    fw = fresh.host_path("/workspace")
    try:
        assert hashlib.sha256((fw / "data.bin").read_bytes()).digest() == hashlib.sha256(blob).digest()
        assert (fw / "latin.txt").read_bytes() == "caf\xe9\n".encode("latin-1")
        assert not (fw / "test_clamp.py").exists() and (fw / "clamp.py").stat().st_mode & 0o111
        assert (fw / "link").is_symlink() and str((fw / "link").readlink()) == "clamp.py"
        assert (fw / "new" / "dir" / "x.py").read_text() == "x = 1\n"
        assert not (fw / "__pycache__").exists() and b"__pycache__" not in ex.patch
    finally:
        run(fresh.close())


def test_a_verifier_that_cannot_run_its_own_tool_is_an_infra_failure(tmp_path):
    """Exit 127 of the grading toolchain (`uv run parser.py` without uv), a missing interpreter, a parser
    that never wrote the report its test.sh promises: infrastructure failures (retried, never a 0), even
    when test.sh then writes reward 0 (the published SWE-bench test.sh does). Issue 43 item 1."""

    task_dir = copy_micro(tmp_path)
    tests = task_dir / "tests"
    (tests / "parser.py").write_text("import lts_no_such_module  # writes /logs/verifier/report.json\n")
    scripts = {
        "no-tool": "set -o pipefail\nlts-no-such-uv run parser.py | tee /dev/null\nrc=$?\n"
                   "[ $rc -eq 0 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
                   "exit $rc\n",
        "no-interpreter": "/no/such/python3 /tests/grade.py --out /logs/verifier\n",
        "no-report": "python3 /tests/parser.py\nrc=$?\n"
                     "[ $rc -eq 0 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
                     "exit $rc\n",
        "real-zero": "echo '{\"resolved\": false}' > /logs/verifier/report.json\necho 0 > /logs/verifier/reward.txt\n"
                     "exit 1\n",
    }
    results = {}
    for name, body in scripts.items():
        (tests / "test.sh").write_text("#!/bin/bash\nmkdir -p /logs/verifier\ncd /tests\n" + body)
        results[name] = _verify_on_host(task_dir)
    for name in ("no-tool", "no-interpreter", "no-report"):
        r = results[name]
        assert r.infra and r.error == "VerifierInfraError" and r.reward == 0.0, (name, r)
    assert "127" in results["no-tool"].reason and "lts-no-such-uv" in results["no-tool"].reason
    assert "/no/such/python3" in results["no-interpreter"].reason
    assert "report.json" in results["no-report"].reason
    assert not results["real-zero"].infra and results["real-zero"].reward == 0.0, results["real-zero"]


def test_delete_the_test_probe_runs_on_swebench_records(tmp_path):
    """SWE-bench records hold FAIL_TO_PASS / PASS_TO_PASS as JSON strings and name tests without a path
    (sympy's `test_kernS`): the probe parses them, maps the name to its file through the test patch, and
    the delete-the-test patch scores 0 with its flag (issue 43 item 5)."""

    task_dir = copy_micro(tmp_path)
    cfg_path = task_dir / "tests" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("test_files")
    cfg.update(FAIL_TO_PASS=json.dumps(["test_clamp_hidden"]), PASS_TO_PASS="[]",
               test_patch="diff --git a/test_clamp.py b/test_clamp.py\n--- a/test_clamp.py\n+++ b/test_clamp.py\n"
                          "@@ -1 +1,3 @@\n+def test_clamp_hidden():\n")
    cfg_path.write_text(json.dumps(cfg))
    (task_dir / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\ncd /workspace\ncp /tests/files/test_clamp.py test_clamp.py\n"
        "if \"${LTS_PYTHON:-python3}\" -m pytest -q -p no:cacheprovider test_clamp.py; then echo 1 > "
        "/logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")
    task = load_task(task_dir)
    manifest = run(prepare_tasks([task], tmp_path / "out", validate=True, progress=False, log=lambda s: None))
    val = manifest["tasks"][task.slug]["validation"]
    assert val["ok"] and val["patches"] == {"empty_patch_reward": 0.0, "delete_test_file": "test_clamp.py",
                                            "delete_test_reward": 0.0, "delete_test_flags": ["hack:test-file"]}, val


def test_test_ids_map_to_their_files():
    patch = ("diff --git a/sympy/core/tests/test_basic.py b/sympy/core/tests/test_basic.py\n--- a/x\n+++ b/x\n"
             "@@ -1 +1 @@\n+def test_other():\n"
             "diff --git a/sympy/core/tests/test_sympify.py b/sympy/core/tests/test_sympify.py\n--- a/y\n+++ b/y\n"
             "@@ -1 +1 @@\n def test_kernS():\n+    assert 1\n")
    cfg = {"FAIL_TO_PASS": '["test_kernS", "test_x (admin_views.tests.Case)"]', "test_patch": patch,
           "PASS_TO_PASS": '["tests/test_a.py::test_b"]'}
    assert swe_test_ids(cfg, "FAIL_TO_PASS") == ["test_kernS", "test_x (admin_views.tests.Case)"]
    assert file_of_test("test_kernS", cfg) == "sympy/core/tests/test_sympify.py"
    assert file_of_test("tests/test_a.py::test_b[x::y]", cfg) == "tests/test_a.py"
    assert file_of_test("test_x (admin_views.tests.Case)", cfg) is None   # two files, neither names it
    assert task_test_files(cfg) == {"sympy/core/tests/test_sympify.py", "tests/test_a.py"}
