"""Issue 14 item 3: black-box agents are a rollout kind. ``Rollouts(black_box=MiniSweAgent)`` runs the
unmodified mini-swe-agent in each sandbox; its model calls go through the in-process ModelService, which
samples with the rollout's policy: here a policy over the training client's CURRENT sampling client
(``save_weights_and_get_sampling_client`` after each optimizer step). The captured token-exact
trajectories are graded (clean grading), turned into GRPO datums and trained on; the weights move.

The tiny model cannot solve a task through mini-swe-agent's prompt, so a teacher-forced policy stands
in for the *model* (its replies are fixed texts, their logprobs those of the current sampling client);
the harness, sandbox, ModelService, grading and training are the real ones."""

from __future__ import annotations

import asyncio
import json
import shlex

import numpy as np
import pytest
import tinker
from tinker import types

from cookbook.agent.agent import SampleOut
from cookbook.agent.budgets import Budgets
from cookbook.data import group_advantages, rl_datum, rl_segments
from cookbook.modelservice.agent_runner import MiniSweAgent
from cookbook.rollout import AgentConfig, Failures, Rollouts
from services.sandbox.client import SandboxManagerClient
from services.tasks.task import load_dataset
from services.tasks.workspace import build_base

from helpers import REPO

pytestmark = pytest.mark.slow


class ForcedPolicy:
    """Replies with fixed texts (then the last one again), scored by ``sampler`` (teacher forcing)."""

    def __init__(self, sampler, tokenizer, texts: list[str]):
        self.sampler, self.tok, self.texts = sampler, tokenizer, texts
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.calls = 0

    async def sample(self, prompt: list[int], max_tokens: int) -> SampleOut:
        text = self.texts[min(self.calls, len(self.texts) - 1)]
        self.calls += 1
        toks = (list(self.tok.encode(text, add_special_tokens=False)) + [self.eos])[:max_tokens]
        lps = await self.sampler.compute_logprobs_async(types.ModelInput.from_ints(prompt + toks))
        return SampleOut(toks, [float(x) for x in lps[len(prompt):]], "stop")


def _call(cmd: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "bash", "arguments": {"command": cmd}}) + "\n</tool_call>"


SUBMIT = _call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")


def test_grpo_step_on_mini_swe_agent_trajectories(sandbox_admin, modelservice, backend, tokenizer, ms_root):
    task = next(t for t in load_dataset(REPO / "datasets" / "micro").tasks if t.path.name == "absolute")
    base = ms_root / "bases-bb" / task.slug
    if not base.exists():
        build_base(task, base)
    e = json.loads((task.solution_dir / "edit.json").read_text())
    fix = (f"import pathlib; p = pathlib.Path({e['path']!r}); "
           f"p.write_text(p.read_text().replace({e['old']!r}, {e['new']!r}, 1))")
    gold, idle = [_call(f"cat {e['path']}"), _call("python3 -c " + shlex.quote(fix)), SUBMIT], [SUBMIT]

    async def go():
        mgr = SandboxManagerClient(sandbox_admin.url, sandbox_admin.key)

        async def factory(b, binds=None):
            return await mgr.create(base_dir=str(b), binds=binds)

        budgets = Budgets(max_turns=5, max_output_tokens=256, command_timeout_s=60, trajectory_timeout_s=240)
        agent = MiniSweAgent.create(tokenizer, budgets, socket_dir=modelservice.socket.parent)
        ro = Rollouts(factory, {task.name: base}, tokenizer, AgentConfig(budgets=budgets), concurrency=2,
                      black_box=agent)
        sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
        tc = await sc.create_lora_training_client_async(base_model=backend.model, rank=4, seed=0)
        out = []
        try:
            for step in range(2):
                sampler = await tc.save_weights_and_get_sampling_client_async()   # per-step weight sync
                failures = Failures()
                group = await ro.run_many([(task, ForcedPolicy(sampler, tokenizer, gold)),
                                           (task, ForcedPolicy(sampler, tokenizer, idle))], failures)
                assert all(t is not None for t in group), failures.to_dict()
                rewards = [t.reward for t in group]
                segs = rl_segments(group, group_advantages(rewards))
                datums = [rl_datum(s, a) for s, a in segs]
                probe = datums[0].model_input
                before = await sampler.compute_logprobs_async(probe)
                fb = await (await tc.forward_backward_async(datums, "importance_sampling"))
                await (await tc.optim_step_async(types.AdamParams(learning_rate=1e-2)))
                after_sampler = await tc.save_weights_and_get_sampling_client_async()
                after = await after_sampler.compute_logprobs_async(probe)
                out.append({"group": group, "rewards": rewards, "n_datums": len(datums), "metrics": fb.metrics,
                            "moved": float(np.nanmax(np.abs(np.array(before[1:], float) - np.array(after[1:], float)))),
                            "sampler": sampler})
        finally:
            await ro.aclose()
        return out, agent

    steps, agent = asyncio.run(go())
    assert not agent.service.socket_path.exists(), "the in-process ModelService left its socket behind"
    for st in steps:
        gold_traj, idle_traj = st["group"]
        assert st["rewards"] == [1.0, 0.0], [t.verifier for t in st["group"]]
        assert gold_traj.stop_reason == "submitted" and gold_traj.episode_done and len(gold_traj.turns) == 3
        assert e["old"] in json.loads(gold_traj.turns[0].observations[0])["output"]   # ran in the sandbox
        assert st["n_datums"] == 2                                   # nonzero training transitions
        assert st["moved"] > 1e-4, st["moved"]                       # the weights changed
        for t in st["group"]:                                        # token-exact, one segment each
            assert len(t.segments) == 1 and t.segments[0].n_sampled == sum(len(x.sampled_tokens) for x in t.turns)
    # per-step weight sync: step 1's rollouts were scored by the weights after step 0's update
    lp0 = steps[0]["group"][0].turns[0].logprobs
    lp1 = steps[1]["group"][0].turns[0].logprobs
    assert len(lp0) == len(lp1) and max(abs(a - b) for a, b in zip(lp0, lp1)) > 1e-4
