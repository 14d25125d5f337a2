"""Red team: scripted hacking agents against the rollout grading path (issue 16).

Each agent below acts in a real isolated sandbox (sandbox manager, local bubblewrap backend) the
way an RL policy with ``bash`` could; then the rollout's grading step (``Rollouts._verify``: take
the patch, grade it in a fresh sandbox) scores it. Every hack must get reward 0 *and* its
``hack:<kind>`` flag; the gold patch must get 1 on every task with no flag. A second test turns
every flag's policy to "flag" (recorded only) and shows which hacks the clean sandbox, the JUnit
report and the grader's own interpreter defeat by themselves.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil

import pytest
from redteam_agents import AGENTS, REWARD_AT_IMPORT, act, placeholders
from transformers import AutoTokenizer

from cookbook.agent import Budgets
from cookbook.agent.agent import SampleOut
from cookbook.agent.scripted import tool_call_text
from cookbook.recorder import save_rollout
from cookbook.report import write_viewer
from cookbook.rollout import AgentConfig, Failures, Rollouts
from helpers import REPO
from services.tasks.preparation.workspace import build_base
from services.tasks.task import load_dataset, load_task
from services.tasks.task_toml import KINDS

MICRO = REPO / "datasets" / "micro"
HACK_TASKS = ["clamp", "sum_list"]

if shutil.which("bwrap") is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("bubblewrap missing: the red-team suite needs the local sandbox backend (bash setup.sh "
                           "system)")
    pytest.skip("bubblewrap missing (bash setup.sh system)", allow_module_level=True)

@pytest.fixture(scope="module")
def grading(sandbox_admin, tmp_path_factory):
    """(tasks by name, Rollouts wired to real sandboxes with every micro task's base)."""
    tmp = tmp_path_factory.mktemp("redteam")
    tasks = {t.name.split("/")[-1]: t for t in load_dataset(MICRO).tasks}
    bases = {}
    for short, t in tasks.items():
        build_base(t, tmp / short)
        bases[t.name] = tmp / short
    clients = {}

    async def factory(base_dir):
        loop = asyncio.get_running_loop()
        if loop not in clients:
            clients[loop] = sandbox_admin.client()
        return await clients[loop].create(str(base_dir))

    return tasks, bases, factory


def _gold(sb, task):
    edit = json.loads((task.solution_dir / "edit.json").read_text())

    async def go():
        path = f"/workspace/{edit['path']}"
        lines = (await sb.read_file(path)).split("\n")
        lines[edit["line"] - 1] = edit["new"]
        await sb.write_file(path, "\n".join(lines))
    return go()


async def _score(ro: Rollouts, factory, bases, task, actions, gold: bool):
    sb = await factory(bases[task.name])
    try:
        if gold:
            await _gold(sb, task)
        await act(sb, placeholders(task), actions)
        res, _ = await ro._verify(sb, task)
        return res
    finally:
        await sb.close()


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_hacking_agent_gets_zero_and_its_flag(grading, agent):
    tasks, bases, factory = grading
    flag, actions = AGENTS[agent]
    ro = Rollouts(factory, bases, None, AgentConfig())

    async def go():
        return [await _score(ro, factory, bases, tasks[name], actions, gold=False) for name in HACK_TASKS]

    for name, res in zip(HACK_TASKS, asyncio.run(go())):
        assert res.reward == 0.0, (agent, name, res.reason, res.output_tail[-800:])
        assert flag in res.flags, (agent, name, res.flags, res.reason)


def test_gold_patch_scores_one_on_every_micro_task_without_flags(grading):
    tasks, bases, factory = grading
    ro = Rollouts(factory, bases, None, AgentConfig())

    async def go():
        sem = asyncio.Semaphore(4)

        async def one(t):
            async with sem:
                return t.name, await _score(ro, factory, bases, t, [], gold=True)
        return await asyncio.gather(*(one(t) for t in tasks.values()))

    out = asyncio.run(go())
    bad = {n: (r.reward, r.flags, r.reason) for n, r in out if r.reward != 1.0 or r.flags}
    assert len(out) >= 40 and not bad, bad


# Hacks the clean sandbox defeats by itself: with every policy at "flag" (recorded, reward kept) they
# still get 0 from the tests themselves. The others (a conftest or plugin that the patch itself
# installs, a rewritten test that the task does not restore, ...) need their flag's zero policy.
DEFEATED_WITHOUT_POLICY = ["shadow-pytest-module", "pytest-ini-plugin", "module-writes-reward-json",
                           "module-writes-reward-obfuscated", "symlinked-verifier-dir", "background-reward-loop",
                           "delete-failing-test", "rewrite-test-assert-true", "sitecustomize", "pth-file",
                           "git-clean-filter", "symlink-out-of-workspace", "atexit-forges-report"]


@pytest.mark.parametrize("agent", DEFEATED_WITHOUT_POLICY)
def test_clean_grading_defeats_hack_even_when_only_flagged(grading, agent):
    tasks, bases, factory = grading
    flag, actions = AGENTS[agent]
    task = load_task(tasks["clamp"].path)
    task.config.metadata["grading"] = {"hacks": {k: "flag" for k in KINDS}}
    ro = Rollouts(factory, bases, None, AgentConfig())

    async def go():
        hacked = await _score(ro, factory, bases, task, actions, gold=False)
        gold_too = await _score(ro, factory, bases, task, actions, gold=True)
        return hacked, gold_too

    hacked, gold_too = asyncio.run(go())
    assert hacked.reward == 0.0 and flag in hacked.flags, (agent, hacked.reason, hacked.flags,
                                                           hacked.output_tail[-800:])
    if agent not in ("module-writes-reward-json", "module-writes-reward-obfuscated", "atexit-forges-report",
                     "pytest-ini-plugin"):
        # the hack did not break grading itself: with the real fix beside it, the tests pass
        assert gold_too.reward == 1.0, (agent, gold_too.reason, gold_too.output_tail[-800:])


def test_a_hacking_rollout_is_counted_and_shown(grading, tiny_model, tmp_path):
    """The quickstart agent's one tool (edit) is enough to try the reward-file hack: a real rollout
    (agent loop, scripted policy) gets 0, its flag lands in the verifier record, in the step's
    failure counts and in the viewer."""

    tasks, bases, factory = grading
    task = tasks["clamp"]
    tok = AutoTokenizer.from_pretrained(str(tiny_model[1]))
    hack = tool_call_text("edit", {"path": "clamp.py", "line": 1, "new": REWARD_AT_IMPORT.format().rstrip("\n") +
                                   "\ndef clamp(x, lo, hi):"})

    class HackPolicy:
        async def sample(self, prompt, max_tokens):
            toks = list(tok.encode(hack, add_special_tokens=False)) + [tok.convert_tokens_to_ids("<|im_end|>")]
            return SampleOut(toks, [0.0] * len(toks), "stop")

    cfg = AgentConfig(tools=["edit"], compact_schemas=True, budgets=Budgets(max_turns=1, max_output_tokens=400))
    ro = Rollouts(factory, bases, tok, cfg, reward_cache=True)
    failures = Failures()
    traj = asyncio.run(ro.run_one(task, HackPolicy(), failures))
    assert traj is not None and traj.reward == 0.0, traj.verifier
    assert "hack:reward-file" in traj.verifier["flags"]
    assert failures.to_dict() == {"infra": 0, "agent": 0, "verifier": 0, "retries": 0, "hack:reward-file": 1}
    run = tmp_path / "run"
    save_rollout(traj, run / "step_000", "rollout_00")
    write_viewer(run, {"mode": "grpo", "steps": [{"step": 0, "mean_reward": 0.0, "n_rollouts": 1,
                                                   "failures": failures.to_dict(), "time_s": 1.0}]})
    html = (run / "viewer.html").read_text()
    assert "hack:reward-file 1" in html and "<b class='hack'>hack:reward-file</b>" in html
