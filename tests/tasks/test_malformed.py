"""Malformed tasks and verifier outputs: a clear error naming file/field, or reward 0 with a
reason — never a crash or a hang (acceptance 2)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from taskhelpers import copy_micro, run

from services.tasks.grading.verifier import verify
from services.tasks.preparation.hostsandbox import HostSandbox
from services.tasks.preparation.prepare import prepare_tasks
from services.tasks.preparation.workspace import build_base
from services.tasks.task import TaskError, load_dataset, load_task

# ---------------------------------------------------------------------------------- loading


def _break(task: Path, how: str) -> None:
    toml = task / "task.toml"
    if how == "no_instruction":
        (task / "instruction.md").unlink()
    elif how == "empty_instruction":
        (task / "instruction.md").write_text("  \n")
    elif how == "no_task_toml":
        toml.unlink()
    elif how == "bad_toml":
        toml.write_text('schema_version = "1.4"\n[verifier\ntimeout_sec = 3\n')
    elif how == "bad_type":
        toml.write_text(toml.read_text().replace("timeout_sec = 60.0", 'timeout_sec = "soon"'))
    elif how == "negative_timeout":
        toml.write_text(toml.read_text().replace("timeout_sec = 60.0", "timeout_sec = -5"))
    elif how == "bad_task_name":
        toml.write_text(toml.read_text().replace('name = "lts-micro/clamp"', 'name = "no-slash"'))
    elif how == "no_environment":
        shutil.rmtree(task / "environment")
    elif how == "no_test_sh":
        (task / "tests" / "test.sh").unlink()
    elif how == "no_solve_sh":
        (task / "solution" / "solve.sh").unlink()
    elif how == "config_not_json":
        (task / "tests" / "config.json").write_text("{not json")
    elif how == "config_no_f2p":
        cfg = json.loads((task / "tests" / "config.json").read_text())
        del cfg["FAIL_TO_PASS"]
        (task / "tests" / "config.json").write_text(json.dumps(cfg))
    elif how == "bad_repo_json":
        shutil.rmtree(task / "environment" / "repo")
        (task / "environment" / "repo.json").write_text('{"git": "/nonexistent"}')


CASES = [
    ("no_instruction", "instruction.md", "missing"),
    ("empty_instruction", "instruction.md", "empty"),
    ("no_task_toml", "task.toml", "missing"),
    ("bad_toml", "task.toml", "invalid TOML"),
    ("bad_type", "task.toml: verifier.timeout_sec", "number"),
    ("negative_timeout", "task.toml: verifier.timeout_sec", "> 0"),
    ("bad_task_name", "task.toml: task.name", "org/name"),
    ("no_environment", "environment/", "missing"),
    ("no_test_sh", "tests/test.sh", "missing"),
    ("no_solve_sh", "solution/solve.sh", "missing"),
    ("config_not_json", "tests/config.json", "not valid JSON"),
    ("config_no_f2p", "tests/config.json: FAIL_TO_PASS", "missing"),
    ("bad_repo_json", "environment/repo.json: commit", "missing"),
]


@pytest.mark.parametrize("how,where,what", CASES, ids=[c[0] for c in CASES])
def test_malformed_task_gives_clear_error(tmp_path, how, where, what):
    task = copy_micro(tmp_path)
    _break(task, how)
    with pytest.raises(TaskError) as ei:
        load_task(task)
    msg = str(ei.value)
    assert where in msg and what in msg, msg


def test_unknown_keys_are_warnings(tmp_path):
    task = copy_micro(tmp_path)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 60.0", "timeout_sec = 60.0\ntimeout_secs = 5"))
    t = load_task(task)
    assert any("verifier.timeout_secs" in w for w in t.warnings)


def test_dataset_keeps_good_tasks_and_reports_bad_ones(tmp_path):
    good = copy_micro(tmp_path, "clamp")
    bad = copy_micro(tmp_path, "fib")
    (bad / "task.toml").write_text("= nope")
    ds = load_dataset(tmp_path)
    assert [t.name for t in ds.tasks] == ["lts-micro/clamp"]
    assert len(ds.errors) == 1 and "fib/task.toml" in ds.errors[0][1]
    assert good.exists()


# ---------------------------------------------------------------------------------- verifier


def _verify_with_test_sh(tmp_path: Path, script: str, timeout: float | None = None, agent=None):
    """Run the verifier of a clamp copy whose tests/test.sh is ``script`` (or the real one)."""
    task = copy_micro(tmp_path)
    if script is not None:
        (task / "tests" / "test.sh").write_text(script)
    t = load_task(task)
    base = tmp_path / "base"
    build_base(t, base)

    async def go():
        sb = await HostSandbox.create(base)
        try:
            if agent:
                await agent(sb)
            return await verify(sb, t, timeout=timeout)
        finally:
            await sb.close()
    return run(go())


@pytest.mark.parametrize("script,error,reason", [
    ("#!/bin/bash\nexit 0\n", "RewardFileNotFoundError", "without writing"),
    ("#!/bin/bash\necho abc > /logs/verifier/reward.txt\n", "VerifierOutputParseError", "not a number"),
    ("#!/bin/bash\n: > /logs/verifier/reward.txt\n", "RewardFileEmptyError", "empty"),
    ("#!/bin/bash\necho nan > /logs/verifier/reward.txt\n", "VerifierOutputParseError", "finite"),
    ("#!/bin/bash\necho '{\"reward\": \"high\"}' > /logs/verifier/reward.json\n", "VerifierOutputParseError", "reward"),
    ("#!/bin/bash\necho '[1]' > /logs/verifier/reward.json\n", "VerifierOutputParseError", "flat object"),
    ("#!/bin/bash\necho '{bad' > /logs/verifier/reward.json\n", "VerifierOutputParseError", "JSON"),
    ("#!/bin/bash\nthis-command-does-not-exist\n", "VerifierInfraError", "exited 127"),   # infra (issue 43)
], ids=["no_reward", "garbage_txt", "empty_txt", "nan_txt", "json_string", "json_list", "json_garbage", "crash"])
def test_bad_verifier_output_is_reward_0_with_reason(tmp_path, script, error, reason):
    r = _verify_with_test_sh(tmp_path, script)
    assert r.reward == 0.0 and r.error == error and reason in r.reason, r


def test_exit_code_is_not_the_reward(tmp_path):
    r = _verify_with_test_sh(tmp_path, "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\nexit 3\n")
    assert r.reward == 1.0 and r.exit_code == 3
    r = _verify_with_test_sh(tmp_path / "b",
                             "#!/bin/bash\necho '{\"reward\": 0.25, \"style\": 1}' > /logs/verifier/reward.json\n")
    assert r.reward == 0.25 and r.rewards == {"reward": 0.25, "style": 1.0}


def test_hanging_test_sh_hits_the_verifier_timeout(tmp_path):
    t0 = time.monotonic()
    r = _verify_with_test_sh(tmp_path, "#!/bin/bash\nsleep 600\necho 1 > /logs/verifier/reward.txt\n", timeout=2)
    assert time.monotonic() - t0 < 30
    assert r.reward == 0.0 and r.timed_out and r.error == "VerifierTimeoutError" and "2s" in r.reason


def test_hanging_python_test_is_killed_by_the_grader(tmp_path):
    task = copy_micro(tmp_path)
    cfg_path = task / "tests" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["timeout_sec"] = 2
    cfg_path.write_text(json.dumps(cfg))
    hidden = task / "tests" / "files" / "test_clamp.py"
    hidden.write_text("import time\n" + hidden.read_text() + "\n\ndef test_hangs():\n    time.sleep(600)\n")
    t = load_task(task)
    build_base(t, tmp_path / "base")

    async def go():
        sb = await HostSandbox.create(tmp_path / "base")
        try:
            await sb.run("git apply /dev/stdin <<'EOF'\n" + (task / "solution" / "patch.diff").read_text() + "EOF\n")
            return await verify(sb, t)
        finally:
            await sb.close()
    t0 = time.monotonic()
    r = run(go())
    assert time.monotonic() - t0 < 30
    assert r.reward == 0.0 and "timed out" in r.reason and r.report["timed_out"] is True


def test_agent_cannot_plant_reward_or_tests(tmp_path):
    async def cheat(sb):
        await sb.run("mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && "
                     "printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh")
        # also "fix" the visible test instead of the code
        await sb.write_file("/workspace/test_clamp.py", "def test_clamp():\n    assert True\n")
    r = _verify_with_test_sh(tmp_path, None, agent=cheat)
    assert r.reward == 0.0
    assert "test_clamp.py::test_clamp" in r.failed_tests


def test_constant_return_hack_fails(tmp_path):
    async def hack(sb):
        await sb.write_file("/workspace/clamp.py", "def clamp(x, lo, hi):\n    return 3\n")
    r = _verify_with_test_sh(tmp_path, None, agent=hack)
    assert r.reward == 0.0 and r.failed_tests


def test_sandbox_error_is_reward_0(tmp_path):
    task = load_task(copy_micro(tmp_path))

    class Broken:
        sandbox_id = "broken"

        async def run(self, *a, **k):
            raise ConnectionError("sandbox went away")

    r = run(verify(Broken(), task))
    assert r.reward == 0.0 and r.error == "SandboxError" and "went away" in r.reason


def test_failing_validation_excludes_task_with_reason(tmp_path, capsys):
    bad_gold = copy_micro(tmp_path / "tasks", "clamp")
    (bad_gold / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")  # does not fix anything
    leaky = copy_micro(tmp_path / "tasks", "fib")
    (leaky / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")  # always 1
    ds = load_dataset(tmp_path / "tasks")
    m = run(prepare_tasks(ds.tasks, tmp_path / "prep", validate=True, progress=False, dataset="t"))
    e_gold, e_leak = m["tasks"]["lts-micro__clamp"], m["tasks"]["lts-micro__fib"]
    assert e_gold["excluded"] and "gold solution scored 0" in e_gold["reason"]
    assert e_leak["excluded"] and "untouched workspace scored 1" in e_leak["reason"]
    out = capsys.readouterr().out
    assert "EXCLUDED lts-micro/clamp" in out and "EXCLUDED lts-micro/fib" in out
