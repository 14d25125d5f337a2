"""Failure injection into real rollouts (host sandboxes, the real agent loop and verifier, the real
backend for the sampler): a sandbox that fails to start, an exec that crashes, a verifier that times
out, a sampler 5xx, a context-overflow 400. Infra failures are retried in fresh sandboxes, the others
are not; a group with a rollout that never completed is dropped whole; the counts are exact
(docs/recipes.md "Failures"). Every rollout runs under a deadline: nothing hangs."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import tinker
from transformers import AutoTokenizer

import cookbook.rollout as rollout_mod
from cookbook.agent import Budgets
from cookbook.agent.agent import SampleOut, TinkerPolicy
from cookbook.agent.scripted import gold_turns
from cookbook.recipes import config_of
from cookbook.rl_loop import RLState, rl_step
from cookbook.rollout import AgentConfig, Failures, Rollouts
from helpers import REPO
from services.tasks.grading.verifier import VerifyResult
from services.tasks.preparation.hostsandbox import HostSandbox
from services.tasks.preparation.workspace import build_base
from services.tasks.task import load_dataset

DEADLINE_S = 120
CFG = AgentConfig(tools=["edit"], compact_schemas=True, budgets=Budgets(max_turns=1, max_output_tokens=56))


@pytest.fixture(scope="module")
def micro(tmp_path_factory, tiny_model):
    tasks = {t.name.split("/")[-1]: t for t in load_dataset(REPO / "datasets" / "micro").tasks}
    picked = [tasks["absolute"], tasks["clamp"]]
    bases = {}
    for t in picked:
        bases[t.name] = tmp_path_factory.mktemp("base") / "b"
        build_base(t, bases[t.name])
    return picked, bases, AutoTokenizer.from_pretrained(str(tiny_model[1]))


class GoldPolicy:
    """Always answers with the task's gold edit (stateless: a retry gets the same answer)."""

    def __init__(self, tok, task, fail_first: Exception | None = None):
        self.tok, self.fail = tok, fail_first
        self.text = gold_turns(json.loads((task.solution_dir / "edit.json").read_text()), read=False, submit=False)[0]
        self.calls = 0

    async def sample(self, prompt, max_tokens):
        self.calls += 1
        if self.fail is not None and self.calls == 1:
            raise self.fail
        eos = self.tok.convert_tokens_to_ids("<|im_end|>")
        toks = list(self.tok.encode(self.text, add_special_tokens=False)) + [eos]
        return SampleOut(toks, [0.0] * len(toks), "stop")


class Injector:
    """A sandbox factory over host sandboxes that fails the calls ``fail(n)`` says (n = 1, 2, ...), and
    can make the first sandbox's first write_file crash (an exec failing mid-rollout)."""

    def __init__(self, fail=lambda n: False, crash_first_exec: bool = False):
        self.fail, self.crash = fail, crash_first_exec
        self.calls = 0
        self.sandboxes: list[HostSandbox] = []

    async def __call__(self, base: Path):
        self.calls += 1
        if self.fail(self.calls):
            raise ConnectionError("injected: sandbox failed to start")
        sb = await HostSandbox.create(base_dir=base)
        self.sandboxes.append(sb)
        if self.crash and len(self.sandboxes) == 1:
            async def crash(*a, **kw):
                raise ConnectionResetError("injected: exec crashed")
            sb.write_file = crash
        return sb


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, DEADLINE_S))


# grading="in-place": the factory's call counts below are the agents' sandboxes (clean grading asks the
# factory for one more sandbox per scored rollout; tests/tasks/test_redteam.py covers that path)
def _one(micro, factory, policy_of, **kw):
    tasks, bases, tok = micro
    ro = Rollouts(factory, bases, tok, CFG, concurrency=4, max_retries=2, grading="in-place", **kw)
    f = Failures()
    traj = _run(ro.run_one(tasks[0], policy_of(tok, tasks[0]), f))
    return traj, f.to_dict()


def test_sandbox_start_failure_is_retried_in_a_fresh_sandbox(micro):
    inj = Injector(fail=lambda n: n == 1)
    traj, f = _one(micro, inj, GoldPolicy)
    assert traj is not None and traj.reward == 1.0
    assert f == {"infra": 0, "agent": 0, "verifier": 0, "retries": 1} and inj.calls == 2


def test_sandbox_that_never_starts_gives_no_trajectory(micro):
    inj = Injector(fail=lambda n: True)
    traj, f = _one(micro, inj, GoldPolicy)
    assert traj is None and inj.calls == 3  # 1 + max_retries attempts, then given up
    assert f == {"infra": 1, "agent": 0, "verifier": 0, "retries": 2}


def test_exec_crash_is_retried_in_a_fresh_sandbox(micro):
    inj = Injector(crash_first_exec=True)
    traj, f = _one(micro, inj, GoldPolicy)
    assert traj is not None and traj.reward == 1.0 and traj.stop_reason != "error"
    assert len(inj.sandboxes) == 2 and inj.sandboxes[0] is not inj.sandboxes[1]
    assert f == {"infra": 0, "agent": 0, "verifier": 0, "retries": 1}


def _status_error(cls, status: int):
    resp = httpx.Response(status, request=httpx.Request("POST", "http://127.0.0.1/api/v1/asample"))
    return cls(f"injected {status}", response=resp, body=None)


def test_sampler_5xx_is_retried(micro):
    traj, f = _one(micro, Injector(), lambda tok, t: GoldPolicy(tok, t, _status_error(tinker.InternalServerError, 500)))
    assert traj is not None and traj.reward == 1.0
    assert f == {"infra": 0, "agent": 0, "verifier": 0, "retries": 1}


def test_verifier_timeout_scores_zero_without_retry(micro):
    inj = Injector()
    traj, f = _one(micro, inj, GoldPolicy, verifier_timeout=0.001)
    assert traj is not None and traj.reward == 0.0 and traj.verifier["error"] == "VerifierTimeoutError"
    assert f == {"infra": 0, "agent": 0, "verifier": 1, "retries": 0} and inj.calls == 1


def test_verifier_infra_failure_is_retried_never_a_reward(micro, monkeypatch):
    """A verifier that could not reach what it needed through the mirror (VerifyResult.infra) is an
    infrastructure failure: retried in a fresh sandbox, the rollout dropped after the retries."""
    real, calls = rollout_mod.verify, []

    async def flaky(sb, task, timeout=None):
        calls.append(1)
        if len(calls) == 1:
            return VerifyResult(0.0, error="VerifierInfraError", infra=True, reason="injected: mirror miss")
        return await real(sb, task, timeout=timeout)
    monkeypatch.setattr(rollout_mod, "verify", flaky)
    traj, f = _one(micro, Injector(), GoldPolicy)
    assert traj is not None and traj.reward == 1.0 and len(calls) == 2
    assert f == {"infra": 0, "agent": 0, "verifier": 0, "retries": 1}

    async def always(sb, task, timeout=None):
        return VerifyResult(0.0, error="VerifierInfraError", infra=True, reason="injected: mirror miss")
    monkeypatch.setattr(rollout_mod, "verify", always)
    inj = Injector()
    traj, f = _one(micro, inj, GoldPolicy)
    assert traj is None and inj.calls == 3
    assert f == {"infra": 1, "agent": 0, "verifier": 0, "retries": 2}


def test_context_overflow_400_is_the_models_failure_not_infra(micro, backend):
    """The real backend answers 400 to a prompt + max_tokens over the model's context (the agent's
    budget here claims more context than the model has): no retry, counted as agent, masked."""
    tasks, bases, tok = micro
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    sampler = sc.create_sampling_client(base_model=backend.model)
    cfg = AgentConfig(tools=["edit"], compact_schemas=True, budgets=Budgets(max_turns=1, max_output_tokens=10**6,
                                                                             max_context=10**7))
    inj = Injector()
    ro = Rollouts(inj, bases, tok, cfg, max_retries=2, grading="in-place")
    f = Failures()
    traj = _run(ro.run_one(tasks[0], TinkerPolicy(sampler, [tok.convert_tokens_to_ids("<|im_end|>")], seed=1), f))
    assert traj is not None and traj.error_status == 400 and "context" in traj.error, traj.error
    assert traj.reward == 0.0 and traj.masked  # scored as it stands, kept out of training
    assert f.to_dict() == {"infra": 0, "agent": 1, "verifier": 0, "retries": 0} and inj.calls == 1


def test_group_with_a_lost_rollout_is_dropped_whole(micro, backend, tmp_path):
    """rl_step on the real backend: task 0's sandboxes never start (both rollouts lost: its group is
    dropped), every other sandbox start for task 1 fails once (retried; its group is kept)."""

    tasks, bases, tok = micro
    lost = str(bases[tasks[0].name])
    n = {"t1": 0}

    def fail_for(base: Path) -> bool:
        if str(base) == lost:
            return True
        n["t1"] += 1
        return n["t1"] % 2 == 1

    class PerTask(Injector):
        async def __call__(self, base):
            self.calls += 1
            if fail_for(base):
                raise ConnectionError("injected: sandbox failed to start")
            return await HostSandbox.create(base_dir=base)

    ro = Rollouts(PerTask(), bases, tok, CFG, concurrency=4, max_retries=2, grading="in-place")
    ctx = SimpleNamespace(tasks=tasks, rng=random.Random(0), rollouts=ro)
    cfg = config_of("grpo", {"groups_per_step": 2, "group_size": 2, "learning_rate": 1e-4, "num_steps": 1})
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    tc = sc.create_lora_training_client(base_model=backend.model, rank=4)
    rec = _run(rl_step(cfg, ctx, tc, 0, tmp_path, RLState(order=[0, 1]), tok.convert_tokens_to_ids("<|im_end|>")))
    assert rec["tasks"] == [tasks[0].name, tasks[1].name]
    assert rec["groups_dropped"] == 1 and len(rec["group_returns"]) == 1 and rec["n_rollouts"] == 2
    assert rec["failures"] == {"infra": 2, "agent": 0, "verifier": 0, "retries": 4 + 2}


class SlowGold(GoldPolicy):
    """The gold edit, answered after ``delay`` seconds (a model slower than the sandbox's lease)."""

    def __init__(self, tok, task, delay: float):
        super().__init__(tok, task)
        self.delay = delay

    async def sample(self, prompt, max_tokens):
        await asyncio.sleep(self.delay)
        return await super().sample(prompt, max_tokens)


def test_a_slow_model_keeps_its_sandbox_alive(micro, sandbox_admin):
    """A sandbox-manager sandbox whose lease (1.5 s) is shorter than the model's answer (5 s): the rollout renews
    the lease while it waits (Rollouts.keepalive_s), so the edit lands and the gold reward is 1. Planted: no
    renewal (keepalive far beyond the wait) -> the reaper takes the sandbox -> "expired" infra failure -> None."""
    tasks, bases, tok = micro
    task = tasks[0]

    async def main(keepalive_s: float):
        client = sandbox_admin.client()

        async def factory(base):
            return await client.create(base_dir=str(base), lease_s=1.5)

        ro = Rollouts(factory, bases, tok, CFG, concurrency=1, max_retries=0)
        ro.keepalive_s = keepalive_s
        f = Failures()
        return await asyncio.wait_for(ro.run_one(task, SlowGold(tok, task, 5.0), f), DEADLINE_S), f

    traj, f = asyncio.run(main(0.4))
    assert traj is not None and traj.reward == 1.0, (f.to_dict(), traj and traj.summary())
    lost, f = asyncio.run(main(1e6))
    assert lost is None and f.infra == 1, (f.to_dict(), lost and lost.summary())
