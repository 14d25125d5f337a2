"""Issue 21 item 4: a black-box agent in a ROCK sandbox reaches our ModelService the way ROCK's own
ModelService does it. The unmodified mini-swe-agent (.venv-agent, bind-mounted by the local ROCK)
runs in a sandbox of a real ROCK admin (rl-rock 1.11.0 on the local Docker engine); its chat requests
go to ``rock model-service start --type local`` on the sandbox's loopback and are pulled by the rollout
process with ``rock model-service anti-call-llm`` through the sandbox API (cookbook/modelservice/
rock_pull.py): nothing on the host listens for the sandbox. The Recorder's trajectory is token-exact
(prompt ids, sampled ids and logprobs exactly as the policy saw and returned them; the logprobs equal
the backend's for those tokens) and the episode is graded by the verifier.

The first model call is a real sample of the tiny model (garbage: mini-swe-agent answers it with a
format error); the later ones are teacher-forced texts (the gold fix, then submit) scored by the same
sampling client, since the tiny model cannot solve a task through mini-swe-agent's prompt."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shlex

import pytest
import tinker
import yaml
from tinker import types
from transformers import AutoTokenizer

from cookbook import rl_loop
from cookbook.agent.agent import SampleOut
from cookbook.cli import parse
from cookbook.context import RunContext
from cookbook.modelservice.rock_pull import RockPullMiniSweAgent
from cookbook.rollout import AgentConfig, Failures, Rollouts
from helpers import ForcedPolicy, read_json, run_sh
from services.common.budgets import Budgets
from services.common.trajectory import Trajectory
from services.sandbox.client import SandboxManagerClient
from services.tasks.preparation.workspace import build_base
from services.tasks.task import load_dataset

from .conftest import BASE_IMAGE, REPO
from .test_real_rock import rock_containers

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _agent_venv():
    """mini-swe-agent's venv (the local ROCK bind-mounts it into its sandboxes)."""
    if not (REPO / ".venv-agent" / "bin" / "mini").exists():
        problem = "no .venv-agent (run: bash setup.sh agent)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: {problem}")
        pytest.skip(problem)


def _call(cmd: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "bash", "arguments": {"command": cmd}}) + "\n</tool_call>"


class RecordingPolicy:
    """Call 0: a real sample (8 tokens) from the sampling client; then ``texts`` teacher-forced and
    scored by it. Keeps (prompt, tokens, logprobs) of every call."""

    def __init__(self, sampler, tok, texts: list[str]):
        self.sampler, self.tok, self.texts = sampler, tok, texts
        self.calls: list[tuple[list[int], list[int], list[float]]] = []

    async def sample(self, prompt: list[int], max_tokens: int) -> SampleOut:
        if not self.calls:
            r = await self.sampler.sample_async(types.ModelInput.from_ints(prompt), 1,
                                                types.SamplingParams(max_tokens=8, temperature=1.0, seed=0))
            seq = r.sequences[0]
            out = SampleOut(list(seq.tokens), [float(x) for x in seq.logprobs], str(seq.stop_reason))
        else:
            text = self.texts[min(len(self.calls) - 1, len(self.texts) - 1)]
            toks = (list(self.tok.encode(text, add_special_tokens=False))
                    + [self.tok.convert_tokens_to_ids("<|im_end|>")])[:max_tokens]
            lps = await self.sampler.compute_logprobs_async(types.ModelInput.from_ints(prompt + toks))
            out = SampleOut(toks, [float(x) for x in lps[len(prompt):]], "stop")
        self.calls.append((list(prompt), list(out.tokens), list(out.logprobs)))
        return out


def test_mini_swe_agent_in_a_rock_sandbox_through_the_pull_pattern(rock_admin, backend, tiny_model, tmp_path):
    task = next(t for t in load_dataset(REPO / "datasets" / "micro").tasks if t.path.name == "absolute")
    base = tmp_path / "base"
    build_base(task, base)
    tok = AutoTokenizer.from_pretrained(str(tiny_model[1]))
    e = json.loads((task.solution_dir / "edit.json").read_text())
    fix = (f"import pathlib; p = pathlib.Path({e['path']!r}); "
           f"p.write_text(p.read_text().replace({e['old']!r}, {e['new']!r}, 1))")
    texts = [_call(f"cat {e['path']}"), _call("python3 -c " + shlex.quote(fix)),
             _call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]
    sampler = tinker.ServiceClient(base_url=backend.url, api_key=backend.key).create_sampling_client(
        base_model=backend.model)
    policy = RecordingPolicy(sampler, tok, texts)
    budgets = Budgets(max_turns=6, max_output_tokens=256, command_timeout_s=60, trajectory_timeout_s=300)
    agent = RockPullMiniSweAgent(tok, budgets)

    async def main():
        async with SandboxManagerClient(rock_admin, flavor="rock") as c:
            async def factory(b, binds=None):
                assert not binds   # nothing of the host goes into a ROCK sandbox
                return await c.create(b, image=BASE_IMAGE, limits={"memory_mb": 1024, "cpus": 1})
            ro = Rollouts(factory, {task.name: base}, tok, AgentConfig(budgets=budgets), concurrency=1,
                          max_retries=0, grading="in-place", black_box=agent)
            f = Failures()
            try:
                return await asyncio.wait_for(ro.run_one(task, policy, f), 400), f.to_dict()
            finally:
                await agent.aclose()
    traj, failures = asyncio.run(main())
    assert traj is not None, failures
    assert failures == {"infra": 0, "agent": 0, "verifier": 0, "retries": 0}
    assert traj.reward == 1.0 and traj.stop_reason == "submitted" and traj.episode_done, (traj.stop_reason, traj.error)
    # every model call went through ROCK's ModelService log, and each was answered by our Recorder
    assert agent.last_run["requests"] == len(policy.calls) == len(traj.turns) == agent.last_run["answered"] == 4
    assert e["old"] in json.loads(traj.turns[1].observations[0])["output"]   # mini-swe-agent ran `cat` in the sandbox
    # token-exact: the turns carry exactly what the policy saw and returned. mini-swe-agent rewrites its
    # history after the format error of the sampled garbage (a counted new segment, as in-process); from
    # then on each prompt extends the previous one (spliced, one segment)
    info = agent.last_run["turn_info"]
    assert [(i["prompt"], i["new_segment"]) for i in info] == [("template", False), ("template", True),
                                                               ("spliced", False), ("spliced", False)], info
    assert [t.segment for t in traj.turns] == [0, 1, 1, 1] and traj.segment_breaks == 1
    for turn, (prompt, toks, lps) in zip(traj.turns, policy.calls):
        seg = traj.segments[turn.segment]
        assert seg.tokens[:turn.prompt_len] == prompt
        assert turn.sampled_tokens == toks and turn.logprobs == lps
        assert seg.tokens[turn.prompt_len:turn.prompt_len + len(toks)] == toks
        assert seg.logprobs[turn.prompt_len:turn.prompt_len + len(toks)] == lps
    assert sum(seg.n_sampled for seg in traj.segments) == sum(len(c[1]) for c in policy.calls)
    # and the sampler's logprobs are the model's for those tokens (the first turn was really sampled)
    for seg in traj.segments:
        again = sampler.compute_logprobs(types.ModelInput.from_ints(seg.tokens)).result()
        for i, (sampled, lp) in enumerate(zip(seg.sampled, seg.logprobs)):
            if sampled:
                assert abs(again[i] - lp) < 1e-3, (i, again[i], lp)
    for _ in range(50):   # ROCK stops the container asynchronously
        if not rock_containers(rock_admin):
            break
        asyncio.run(asyncio.sleep(0.2))
    assert rock_containers(rock_admin) == []


def test_run_sh_rollout_with_mini_swe_agent_on_rock(rock_admin, backend, isolated_config):
    """`run.sh rollout --agent mini-swe-agent` with config/harbor.yaml pointing at a ROCK admin (what
    `configure.py --rock-base-url` writes, plus `sandbox.image`): no sandbox manager is started, each
    rollout's base is uploaded into a ROCK sandbox, mini-swe-agent's calls are pulled (rock_pull.py) and
    sampled by the tiny model, and the change is graded in a fresh ROCK sandbox (clean grading). The
    session's backend serves the model (--no-services)."""
    tmp, cfg = isolated_config
    rt = yaml.safe_load((cfg / "runtime.yaml").read_text())
    rt["backend"].update(port=backend.port, api_keys=[backend.key])
    (cfg / "runtime.yaml").write_text(yaml.safe_dump(rt))
    h = yaml.safe_load((cfg / "harbor.yaml").read_text())
    h["sandbox"].update(base_url=str(rock_admin), flavor="rock", image=BASE_IMAGE)
    (cfg / "harbor.yaml").write_text(yaml.safe_dump(h))
    env = dict(os.environ, LTS_CONFIG_DIR=str(cfg), LTS_RUNS_DIR=str(tmp / "runs"))
    for k in ("TINKER_API_KEY", "TINKER_BASE_URL"):
        env.pop(k, None)
    run = run_sh(env, "rollout", "--agent", "mini-swe-agent", "--preset", "quickstart", "--task-id", "absolute",
                 "--n", "2", "--no-services")
    res = read_json(run / "results" / "rollout" / "result.json")
    assert res["n_rollouts"] == 2 and res["failures"] == {"infra": 0, "agent": 0, "verifier": 0, "retries": 0}, res
    for d in sorted((run / "results" / "rollout").glob("*-00?")):
        t = Trajectory.from_json(read_json(d / "trajectory.json"))
        assert len(t.turns) == 1 and t.stop_reason == "max_turns", t.summary()   # quickstart: one call
        assert t.reward == 0.0 and not t.verifier.get("error"), t.verifier         # graded (garbage fixes nothing)
        seg = t.segments[0]
        assert seg.n_sampled == len(t.turns[0].sampled_tokens) > 0 and seg.tokens[t.turns[0].prompt_len:][
            :len(t.turns[0].sampled_tokens)] == t.turns[0].sampled_tokens
    assert len(list((run / "results" / "rollout").glob("*-00?"))) == 2
    for _ in range(50):
        if not rock_containers(rock_admin):
            break
        asyncio.run(asyncio.sleep(0.2))
    assert rock_containers(rock_admin) == []


def test_grpo_step_on_mini_swe_agent_trajectories_from_rock(rock_admin, backend, tiny_model, tmp_path, monkeypatch):
    """One step of the GRPO recipe (``rl_loop.rl_step``, config from ``grpo --agent mini-swe-agent``) whose
    group of 2 runs mini-swe-agent in ROCK sandboxes through the pull pattern, a teacher-forced stand-in for the
    model: the rollouts run, are captured token-exactly and graded 1 / 0, and the step refuses to train on them
    (RL trains only on sampled turns: rl_loop.refuse_unsampled); the weights do not move."""
    task = next(t for t in load_dataset(REPO / "datasets" / "micro").tasks if t.path.name == "absolute")
    base = tmp_path / "base"
    build_base(task, base)
    tok = AutoTokenizer.from_pretrained(str(tiny_model[1]))
    e = json.loads((task.solution_dir / "edit.json").read_text())
    fix = (f"import pathlib; p = pathlib.Path({e['path']!r}); "
           f"p.write_text(p.read_text().replace({e['old']!r}, {e['new']!r}, 1))")
    submit = _call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    monkeypatch.setattr(ForcedPolicy, "scripts", [[_call("python3 -c " + shlex.quote(fix)), submit], [submit]])
    monkeypatch.setattr(ForcedPolicy, "tok", tok)
    monkeypatch.setattr(rl_loop, "TinkerPolicy", ForcedPolicy)   # the stand-in for the model
    cfg = parse(["grpo", "--agent", "mini-swe-agent", "--task-id", "absolute", "--num-steps", "1",
                 "--group-size", "2", "--groups-per-step", "1", "--learning-rate", "1e-2"])
    budgets = Budgets(max_turns=4, max_output_tokens=256, command_timeout_s=60, trajectory_timeout_s=300)
    agent = RockPullMiniSweAgent(tok, budgets)

    async def go():
        async with SandboxManagerClient(rock_admin, flavor="rock") as c:
            async def factory(b, binds=None):
                return await c.create(b, image=BASE_IMAGE, limits={"memory_mb": 1024, "cpus": 1})
            ro = Rollouts(factory, {task.name: base}, tok, AgentConfig(budgets=budgets), concurrency=2,
                          grading="in-place", black_box=agent)
            ctx = RunContext(None, [task], {task.name: base}, tok, ro, ro.cfg, random.Random(0))
            sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
            tc = await sc.create_lora_training_client_async(base_model=backend.model, rank=4, seed=0)
            probe = types.ModelInput.from_ints(tok.encode(submit + " " + task.instruction)[:64])
            try:
                before = await (await tc.save_weights_and_get_sampling_client_async()).compute_logprobs_async(probe)
                with pytest.raises(RuntimeError, match="not drawn by the policy's sampler"):
                    await rl_loop.rl_step(cfg, ctx, tc, 0, tmp_path, rl_loop.RLState(),
                                          tok.convert_tokens_to_ids("<|im_end|>"))
                after = await (await tc.save_weights_and_get_sampling_client_async()).compute_logprobs_async(probe)
            finally:
                await ro.aclose()
            return before, after

    before, after = asyncio.run(go())
    assert max(abs(a - b) for a, b in zip(before[1:], after[1:])) == 0.0    # refused: no update
    rewards = [read_json(tmp_path / "step_000" / f"rollout_0{i}.json")["return"] for i in (0, 1)]
    assert rewards == [1.0, 0.0], rewards
    gold = Trajectory.from_json(read_json(tmp_path / "step_000" / "rollout_00.json")["trajectory"])
    assert gold.stop_reason == "submitted" and len(gold.turns) == 2 and len(gold.segments) == 1
    assert gold.segments[0].n_sampled == sum(len(t.sampled_tokens) for t in gold.turns)
    assert agent.last_run["requests"] in (1, 2)   # the last rollout to finish: gold 2 calls, submit 1
