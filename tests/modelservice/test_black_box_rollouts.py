"""Issue 14 item 3 / issue 32 item 4: black-box agents are a rollout kind, and RL never trains on a policy that
stands in for the model. One step of the GRPO recipe's step (``rl_loop.rl_step``, the config parsed from
``grpo --agent mini-swe-agent``) with ``Rollouts(black_box=MiniSweAgent)``: the unmodified mini-swe-agent runs in
each sandbox, its model calls go through the in-process ModelService, the trajectories are captured token-exactly
and graded (clean grading) -- with a teacher-forced policy in place of the model (fixed replies, their logprobs
those of the current sampling client; even forks replay the gold fix, odd ones submit at once). The step must
refuse to train on them (``rl_loop.refuse_unsampled``: every trained turn must come from the policy's sampler), and
the weights must not move. Training on the model's own samples through mini-swe-agent, from a warm start in its
format: tests/rollout/test_recipes.py::test_grpo_with_mini_swe_agent_learns_from_its_own_samples."""

from __future__ import annotations

import asyncio
import json
import random
import shlex

import pytest
import tinker
from tinker import types

from cookbook import rl_loop
from cookbook.cli import parse
from cookbook.context import RunContext
from cookbook.modelservice.agent_runner import MiniSweAgent
from cookbook.rollout import AgentConfig, Rollouts
from helpers import REPO, ForcedPolicy
from services.common.budgets import Budgets
from services.common.trajectory import Trajectory
from services.sandbox.client import SandboxManagerClient
from services.tasks.preparation.workspace import build_base
from services.tasks.task import load_dataset

pytestmark = pytest.mark.slow


def _call(cmd: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "bash", "arguments": {"command": cmd}}) + "\n</tool_call>"


SUBMIT = _call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")


def test_rl_refuses_a_forced_policy_behind_mini_swe_agent(sandbox_admin, modelservice, backend, tokenizer, ms_root,
                                                           tmp_path, monkeypatch):
    task = next(t for t in load_dataset(REPO / "datasets" / "micro").tasks if t.path.name == "absolute")
    base = ms_root / "bases-bb" / task.slug
    if not base.exists():
        build_base(task, base)
    e = json.loads((task.solution_dir / "edit.json").read_text())
    fix = (f"import pathlib; p = pathlib.Path({e['path']!r}); "
           f"p.write_text(p.read_text().replace({e['old']!r}, {e['new']!r}, 1))")
    monkeypatch.setattr(ForcedPolicy, "scripts", [[_call(f"cat {e['path']}"), _call("python3 -c " + shlex.quote(fix)),
                                                   SUBMIT], [SUBMIT]])
    monkeypatch.setattr(ForcedPolicy, "tok", tokenizer)
    monkeypatch.setattr(rl_loop, "TinkerPolicy", ForcedPolicy)   # the stand-in for the model
    cfg = parse(["grpo", "--agent", "mini-swe-agent", "--task-id", "absolute", "--num-steps", "1",
                 "--group-size", "2", "--groups-per-step", "1", "--learning-rate", "1e-2"])

    async def go():
        mgr = SandboxManagerClient(sandbox_admin.url, sandbox_admin.key)

        async def factory(b, binds=None):
            return await mgr.create(base_dir=str(b), binds=binds)

        budgets = Budgets(max_turns=5, max_output_tokens=256, command_timeout_s=60, trajectory_timeout_s=240)
        agent = MiniSweAgent.create(tokenizer, budgets, socket_dir=modelservice.socket.parent)
        ro = Rollouts(factory, {task.name: base}, tokenizer, AgentConfig(budgets=budgets), concurrency=2,
                      black_box=agent)
        ctx = RunContext(None, [task], {task.name: base}, tokenizer, ro, ro.cfg, random.Random(0))
        sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
        tc = await sc.create_lora_training_client_async(base_model=backend.model, rank=4, seed=0)
        eos, state = tokenizer.convert_tokens_to_ids("<|im_end|>"), rl_loop.RLState()
        probe = types.ModelInput.from_ints(tokenizer.encode(SUBMIT + " " + task.instruction)[:64])
        try:
            before = await (await tc.save_weights_and_get_sampling_client_async()).compute_logprobs_async(probe)
            with pytest.raises(RuntimeError, match="not drawn by the policy's sampler") as err:
                await rl_loop.rl_step(cfg, ctx, tc, 0, tmp_path, state, eos)
            after = await (await tc.save_weights_and_get_sampling_client_async()).compute_logprobs_async(probe)
        finally:
            await ro.aclose()
        return before, after, agent, str(err.value)

    before, after, agent, err = asyncio.run(go())
    assert not agent.service.socket_path.exists(), "the in-process ModelService left its socket behind"
    assert max(abs(a - b) for a, b in zip(before[1:], after[1:])) == 0.0   # no update happened
    # the rollouts themselves ran for real: the gold fork's trajectory was captured and graded 1
    rollout = json.loads((tmp_path / "step_000" / "rollout_00.json").read_text())
    gold = Trajectory.from_json(rollout["trajectory"])
    assert gold.reward == 1.0 and gold.stop_reason == "submitted" and len(gold.turns) == 3, err
    assert e["old"] in json.loads(gold.turns[0].observations[0])["output"]   # ran in the sandbox
    assert len(gold.segments) == 1 and gold.segments[0].n_sampled == sum(len(t.sampled_tokens) for t in gold.turns)
    assert {t.sampled_by for t in gold.turns} == {""}, "the forced policy's turns claim a source"
