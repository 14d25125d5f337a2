"""SWE-bench and R2E-Gym adapters over a git repo the test creates (acceptance 4), and the
workspace an agent gets holds no future commit (acceptance 3)."""

from __future__ import annotations

import shutil

import pytest
from taskhelpers import commit_all, git, run, write

from services.tasks.preparation.hostsandbox import HostSandbox, host_sandbox_factory
from services.tasks.preparation.prepare import validate_task
from services.tasks.preparation.workspace import build_base, check_history
from services.tasks.sources.adapters import r2egym_to_task, swebench_to_task
from services.tasks.task import load_task

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
FIXED = BUGGY.replace("a - b", "a + b")
OLD_TESTS = "from calc import add, mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
NEW_TESTS = OLD_TESTS + "\n\ndef test_add():\n    assert add(2, 3) == 5\n    assert add(-1, 1) == 0\n"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """base (bug) -> fix (code + new test) -> future commit; HEAD at the future, plus a branch and a tag."""
    repo = tmp_path_factory.mktemp("proj")
    git(repo, "init", "-q", "-b", "main")
    write(repo, {"calc.py": BUGGY, "tests/test_calc.py": OLD_TESTS, "README.md": "calc\n"})
    base = commit_all(repo, "base")
    write(repo, {"calc.py": FIXED, "tests/test_calc.py": NEW_TESTS})
    fix = commit_all(repo, "fix add")
    write(repo, {"calc.py": FIXED + "\n\nFUTURE_MARKER = 1\n"})
    future = commit_all(repo, "future work")
    git(repo, "tag", "v-future")
    git(repo, "branch", "other", fix)
    return {"repo": repo, "base": base, "fix": fix, "future": future,
            "patch": git(repo, "diff", base, fix, "--", "calc.py") + "\n",
            "test_patch": git(repo, "diff", base, fix, "--", "tests") + "\n",
            "fixed_blob": git(repo, "rev-parse", f"{fix}:calc.py")}


def swe_instance(p) -> dict:
    return {"instance_id": "calc__calc-1", "repo": "example/calc", "base_commit": p["base"],
            "problem_statement": "add(2, 3) returns -1 instead of 5.", "patch": p["patch"],
            "test_patch": p["test_patch"], "version": "0.1",
            "FAIL_TO_PASS": '["tests/test_calc.py::test_add"]',   # JSON-encoded, as in the HF dataset
            "PASS_TO_PASS": ["tests/test_calc.py::test_mul"]}


@pytest.mark.parametrize("inline", [False, True], ids=["repo_json", "inline"])
def test_swebench_adapter_gold_1_empty_0(project, tmp_path, inline):
    dest = swebench_to_task(swe_instance(project), project["repo"], tmp_path / "task",
                            test_env={"PYTHONPATH": "."}, inline=inline, verifier_timeout=120)
    task = load_task(dest)
    assert task.name == "swebench/calc__calc-1"
    assert task.swe["FAIL_TO_PASS"] == ["tests/test_calc.py::test_add"]
    assert "a + b" not in (dest / "instruction.md").read_text()
    assert (dest / "tests" / "files" / "tests" / "test_calc.py").read_text() == NEW_TESTS
    base = tmp_path / "base"
    build_base(task, base)
    assert (base / "calc.py").read_text() == BUGGY
    assert (base / "tests" / "test_calc.py").read_text() == OLD_TESTS  # hidden test not in the workspace
    v = run(validate_task(task, base, host_sandbox_factory))
    assert v.ok, v.reasons
    assert v.gold_reward == 1.0 and v.empty_reward == 0.0 and v.history_problems == []
    assert list(v.empty["failed_tests"]) == ["tests/test_calc.py::test_add"]


def test_r2egym_adapter_gold_1_empty_0(project, tmp_path):
    r2e_tests = ("from calc import add, mul\n\n\ndef test_add():\n    assert add(1, 1) == 2\n"
                 "    assert add(4, 5) == 9\n\n\ndef test_mul():\n    assert mul(3, 3) == 9\n")
    instance = {"repo_name": "example/calc", "commit_hash": project["fix"],
                "problem_statement": "add() subtracts.",
                "test_file_names": ["test_r2e_calc.py"], "test_file_codes": [r2e_tests],
                "expected_output_json": {"test_add": "PASSED", "test_mul": "PASSED"}}
    dest = r2egym_to_task(instance, project["repo"], tmp_path / "task", test_env={"PYTHONPATH": "."},
                          verifier_timeout=120)
    task = load_task(dest)
    assert task.swe["FAIL_TO_PASS"] == ["r2e_tests/test_r2e_calc.py::test_add", "r2e_tests/test_r2e_calc.py::test_mul"]
    gold = (dest / "solution" / "patch.diff").read_text()
    assert "calc.py" in gold and "tests/test_calc.py" not in gold  # gold = the commit's non-test diff
    base = tmp_path / "base"
    build_base(task, base)
    v = run(validate_task(task, base, host_sandbox_factory))
    assert v.ok, v.reasons
    assert v.gold_reward == 1.0 and v.empty_reward == 0.0


def test_adapter_rejects_bad_instances(project, tmp_path):
    bad = swe_instance(project) | {"base_commit": "0" * 40}
    with pytest.raises(ValueError, match="unknown revision"):
        swebench_to_task(bad, project["repo"], tmp_path / "t1")
    bad = swe_instance(project) | {"patch": "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n"
                                            "@@ -1 +1 @@\n-x\n+y\n"}
    with pytest.raises(ValueError, match="gold patch does not apply"):
        swebench_to_task(bad, project["repo"], tmp_path / "t2")
    with pytest.raises(ValueError, match="no tests"):
        r2egym_to_task({"commit_hash": project["fix"]}, project["repo"], tmp_path / "t3")


# --------------------------------------------------------------------- no future commits (3)

AGENT_SNOOPING = r"""
echo "log=$(git log --all --oneline | wc -l)"
echo "reflog=$(git reflog | wc -l)"
git show {fix} >/dev/null 2>&1 && echo "show_fix=yes"
git show {future} >/dev/null 2>&1 && echo "show_future=yes"
git cat-file -e {fixed_blob} 2>/dev/null && echo "fixed_blob=yes"
git cat-file --batch-all-objects --batch | grep -c -e 'a + b' -e FUTURE_MARKER -e 'def test_add' \
  | sed 's/^/grep_objects=/'
grep -r -l -e FUTURE_MARKER -e 'a + b' -e 'def test_add' . | sed 's/^/grep_files=/'
echo "tags=$(git tag | wc -l) branches=$(git branch -a | wc -l)"
"""


def test_agent_finds_no_future_commits(project, tmp_path):
    task = load_task(swebench_to_task(swe_instance(project), project["repo"], tmp_path / "task",
                                      test_env={"PYTHONPATH": "."}))
    base = tmp_path / "base"
    build_base(task, base)

    async def go():
        sb = await HostSandbox.create(base)
        try:
            out = (await sb.run(AGENT_SNOOPING.format(**project))).output
            problems = await check_history(sb, [project["fixed_blob"]])
            return out, problems
        finally:
            await sb.close()
    out, problems = run(go())
    assert "log=1" in out and "reflog=0" in out, out
    assert "show_fix" not in out and "show_future" not in out and "fixed_blob" not in out, out
    assert "grep_objects=0" in out and "grep_files" not in out, out
    assert "tags=0 branches=1" in out, out
    assert problems == []


def test_history_check_catches_an_unscrubbed_checkout(project, tmp_path):
    """Negative control: a plain clone at the base commit leaks the fix and the future."""
    leaky = tmp_path / "leaky"
    shutil.copytree(project["repo"], leaky)
    git(leaky, "checkout", "-q", project["base"])

    async def go():
        sb = await HostSandbox.create(leaky)
        try:
            return await check_history(sb, [project["fixed_blob"]])
        finally:
            await sb.close()
    problems = run(go())
    text = "\n".join(problems)
    assert "3 commits reachable" in text and "unexpected refs" in text and "present in .git" in text, text
