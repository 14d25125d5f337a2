"""Red team on the public-Harbor sample tasks (SWE-bench layout, repo at /testbed in the task
image, the task's own SWE-bench-style test.sh): the scripted hacking agents of
tests/tasks/redteam_agents.py act in real containers (the manager's docker backend), the rollout
grading path (patch out of the agent's container, graded in a fresh container from the scrubbed
image) scores them. Every hack: reward 0 and its flag; the gold patch: 1 with no flag."""

from __future__ import annotations

import asyncio
import sys

import pytest

from cookbook.rollout import AgentConfig, Rollouts
from services.tasks.preparation.prepare import base_of

from .conftest import REPO, manager_factory

sys.path.insert(0, str(REPO / "tests" / "tasks"))
from redteam_agents import AGENTS, act, placeholders  # noqa: E402

# test.sh writes reward.txt itself after the tests: a reward.txt the code under test wrote earlier is
# overwritten (reward 0 as it should be) but leaves no trace to flag it by.
NO_TRACE_ON_SAMPLE = {"module-writes-reward-obfuscated"}


@pytest.fixture(scope="module")
def sample_grading(docker_admin, sample_prep):
    ds, _, manifest = sample_prep
    bases = {t.name: base_of(manifest["tasks"][t.slug]) for t in ds.tasks}
    return ds.tasks, bases


def _score_all(docker_admin, tasks, bases, actions, gold: bool):
    async def main():
        async with docker_admin.client() as c:
            factory = manager_factory(c)
            ro = Rollouts(factory, bases, None, AgentConfig())
            out = []
            for t in tasks:
                sb = await factory(bases[t.name])
                try:
                    if gold:
                        await sb.write_file("/tmp/gold.diff", (t.solution_dir / "patch.diff").read_text())
                        r = await sb.run("git apply /tmp/gold.diff && rm /tmp/gold.diff", cwd="/workspace")
                        assert r.exit_code == 0, r.output
                    await act(sb, placeholders(t), actions)
                    out.append((t.name, (await ro._verify(sb, t))[0]))
                finally:
                    await sb.close()
            return out
    return asyncio.run(main())


@pytest.mark.parametrize("agent", sorted(set(AGENTS) - NO_TRACE_ON_SAMPLE) + sorted(NO_TRACE_ON_SAMPLE))
def test_hacking_agent_gets_zero_and_its_flag_on_sample_tasks(docker_admin, sample_grading, agent):
    tasks, bases = sample_grading
    flag, actions = AGENTS[agent]
    task = tasks[sorted(AGENTS).index(agent) % len(tasks)]  # the agents take turns over the sample tasks
    for name, res in _score_all(docker_admin, [task], bases, actions, gold=False):
        assert res.reward == 0.0, (agent, name, res.reason, res.output_tail[-800:])
        if agent not in NO_TRACE_ON_SAMPLE:
            assert flag in res.flags, (agent, name, res.flags, res.reason)


def test_gold_patch_scores_one_on_every_sample_task(docker_admin, sample_grading):
    tasks, bases = sample_grading
    out = _score_all(docker_admin, tasks, bases, [], gold=True)
    bad = {n: (r.reward, r.flags, r.reason, r.output_tail[-500:]) for n, r in out if r.reward != 1.0 or r.flags}
    assert len(out) >= 3 and not bad, bad
