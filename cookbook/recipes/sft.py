"""sft: supervised warm start: cross-entropy on the tasks' gold trajectories (run through the real agent, tools,
sandbox and verifier; only reward 1 kept), stopped by the pass-rate gate. Its final checkpoint is the latest sft of
its configuration, where the RL recipes with the same --preset start (``WARM_START``)."""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..agent.agent import TinkerPolicy
from ..agent.scripted import ScriptedPolicy
from ..config import AGENT_HELP, Common, Training, flag
from ..data import reweighted, sft_datums
from ..evaluation import score
from ..gold import gold_turns_for, shell_gold_turns
from ..recorder import RunRecorder, save_rollout
from ..rl_loop import adam, lr_at
from .base import training

log = logging.getLogger("cookbook.train")


@dataclass
class SftConfig:
    """sft: cross-entropy on gold trajectories, stopped by the pass-rate gate."""

    MODE: ClassVar[str] = "sft"
    common: Common = field(default_factory=Common)
    train: Training = field(default_factory=Training)
    agent: str = flag(AGENT_HELP + "; with mini-swe-agent the gold trajectories are its own turns (one bash call "
                      "that applies the fix and submits), captured token-exactly", "builtin",
                      choices=["builtin", "mini-swe-agent"])
    batch_size: int = flag("datums per step (default 32; 16 with --preset quickstart)", 32)
    gate: float = flag("stop once the sampled pass rate reaches this", 0.3)
    gate_coverage: float = flag("and once this fraction of the evaluated tasks was solved at least once (RL gets no "
                                "gradient from a task it never solves; default 0)", 0.0)
    gate_min_gold_p: float = flag("and once every task's gold trajectory has at least this chance to be sampled at "
                                  "T=1 (exp(-its NLL), one forward pass; default 0.15 with --preset quickstart, "
                                  "else 0)", 0.0, metavar="P")
    balance_tasks: float = flag("weight each gold datum's loss by (its NLL / the batch mean) ** POWER, so hard tasks "
                                "catch up with easy ones (0 = plain SFT; default 1 with --preset quickstart, else 0)",
                                0.0, metavar="POWER")
    eval_every: int = flag("check the pass rate every N steps (default 10; 2 with --preset quickstart)", 10)
    eval_from: int = flag("first step to check the pass rate at (default 10; 40 with --preset quickstart)", 10)
    eval_n: int = flag("rollouts per pass-rate check (default 16; 32 with --preset quickstart)", 16)


async def gold_datums(ctx) -> tuple[list, list[str]]:
    """Gold trajectories through the real agent, tools, sandbox and verifier (only reward 1 kept):
    their datums, and the task of each datum."""
    if ctx.rollouts.black_box is not None:   # the harness's own format: its shell call that fixes and submits
        items = [(t, ScriptedPolicy(ctx.tokenizer, shell_gold_turns(t))) for t in ctx.tasks]
    else:
        items = [(t, ScriptedPolicy(ctx.tokenizer, gold_turns_for(t, ctx.agent_cfg.tools,
                                                                  ctx.agent_cfg.budgets.max_turns)))
                 for t in ctx.tasks]
    trajs = await ctx.rollouts.run_many(items)
    good = [t for t in trajs if t is not None and t.reward == 1.0]
    log.info("gold trajectories: %d of %d tasks reach reward 1", len(good), len(items))
    if not good:
        raise SystemExit("no gold trajectory reached reward 1: check the tasks (prepare_sandbox.py --validate)")
    return sft_datums(good), [t.task_id for t in good for s in t.segments if s.n_sampled]


def sequence_logprob(datum, output) -> float:
    """Sum of the target logprobs on the datum's trained tokens (its 0/1 ``weights``), from a forward
    or forward_backward output: minus the gold trajectory's sequence NLL."""
    return float((output["logprobs"].to_numpy() * datum.loss_fn_inputs["weights"].to_numpy()).sum())


def balance_weights(nll: dict[str, float], idx: list[int], power: float) -> list[float]:
    """--balance-tasks: scale each gold datum's loss by (its sequence NLL at its last step / the batch's
    mean) ** power, clipped to [1/4, 4]; datums not measured yet get 1. The chance to sample a gold
    trajectory is exp(-its NLL): plain SFT lifts the short, easy ones first, so at the gate some tasks
    are never solved and RL gets no gradient from them. Weighting by NLL moves them together."""
    known = [nll[str(i)] for i in idx if str(i) in nll]
    if power == 0 or not known:
        return [1.0] * len(idx)
    mean = max(sum(known) / len(known), 1e-6)
    return [min(4.0, max(0.25, (nll[str(i)] / mean) ** power)) if str(i) in nll else 1.0 for i in idx]


@dataclass
class SftState:
    """What sft carries from step to step (state.json ``shared``): each gold datum's NLL at its last step."""

    nll: dict[str, float] = field(default_factory=dict)


class SftRecipe:
    """Cross-entropy on the gold trajectories; every --eval-every steps the gate: each task's gold chance
    (one forward pass) and then the sampled pass rate and task coverage."""

    WARM_START: ClassVar[str] = "publish"

    @classmethod
    def heldout_split(cls, cfg: SftConfig) -> str | None:
        return None

    def __init__(self, cfg: SftConfig, ctx, tc, eos: int, run_dir: Path, shared: dict[str, Any]):
        self.cfg, self.ctx, self.tc, self.eos, self.run_dir = cfg, ctx, tc, eos, run_dir
        self.st = SftState(nll=dict(shared.get("nll", {})))
        self.gold: list = []
        self.gold_tasks: list[str] = []

    async def setup(self, sc, base_model: str, init: str, rec: RunRecorder) -> None:
        self.gold, self.gold_tasks = await gold_datums(self.ctx)

    def state(self) -> dict[str, Any]:
        return {"nll": self.st.nll}

    async def gold_probabilities(self) -> dict[str, float]:
        """Per task, the chance that the current weights sample its gold trajectory at T=1 (exp(-sequence
        NLL), one forward pass; the lowest over a task's datums). A task near 0 gives RL only zero-variance
        groups."""
        fwd = await self.tc.forward(self.gold, "cross_entropy")
        out: dict[str, float] = {}
        for task, d, o in zip(self.gold_tasks, self.gold, fwd.loss_fn_outputs):
            p = math.exp(sequence_logprob(d, o))
            out[task] = round(min(out.get(task, 1.0), p), 4)
        return out

    async def pass_rate(self, n: int, temperature: float) -> tuple[float, list]:
        ctx = self.ctx
        sampler = await self.tc.save_weights_and_get_sampling_client()
        pol = TinkerPolicy(sampler, [self.eos], temperature=temperature)
        tasks = [ctx.tasks[i % len(ctx.tasks)] for i in ctx.rng.sample(range(max(n, len(ctx.tasks))), n)]
        # one seeded sampling stream per rollout (from the run's rng): the gate decision is reproducible
        trajs = await ctx.rollouts.run_many([(t, pol.fork(ctx.rng.randrange(2**31))) for t in tasks])
        res = score(tasks, trajs)  # the gate's figure: the mean reward of the scored attempts
        return res.mean_reward, res.trajectories

    async def step(self, step: int) -> dict:
        cfg, data, nll = self.cfg, self.gold, self.st.nll
        idx = self.ctx.rng.sample(range(len(data)), min(cfg.batch_size, len(data)))
        weights = balance_weights(nll, idx, cfg.balance_tasks)
        batch = [reweighted(data[i], w) for i, w in zip(idx, weights)]
        t0 = time.time()
        f = self.tc.forward_backward(batch, "cross_entropy")
        o = self.tc.optim_step(adam(lr_at(cfg, step)))
        fb = await f
        log.info("forward_backward done: %s", json.dumps(fb.metrics))
        opt = await o
        log.info("optim_step done: %s", json.dumps(opt.metrics or {}))
        for i, out in zip(idx, fb.loss_fn_outputs):
            nll[str(i)] = -sequence_logprob(data[i], out)  # the unweighted gold datum: its real NLL
        ntok = sum(float(data[i].loss_fn_inputs["weights"].to_numpy().sum()) for i in idx)
        names = self.gold_tasks
        rec: dict[str, Any] = {"loss_per_token": sum(nll[str(i)] for i in idx) / max(ntok, 1), "n_datums": len(batch),
                               "train_s": time.time() - t0, "metrics": {**fb.metrics, **(opt.metrics or {})},
                               "gold_nll_by_task": {names[i]: round(nll[str(i)], 4) for i in sorted(idx)},
                               "loss_weight_min": min(weights), "loss_weight_max": max(weights)}
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 >= cfg.eval_from:
            te = time.time()
            gold_p = await self.gold_probabilities()  # one forward pass: the cheap half of the gate first
            rec.update(gold_p_by_task=gold_p, gold_p_min=min(gold_p.values()), gate_reached=False)
            if rec["gold_p_min"] < cfg.gate_min_gold_p:
                rec["eval_s"] = time.time() - te
                return rec
            rate, trajs = await self.pass_rate(cfg.eval_n, 1.0)
            solved: dict[str, bool] = {}
            for tr in trajs:
                solved[tr.task_id] = solved.get(tr.task_id, False) or (tr.reward or 0.0) > 0
            coverage = sum(solved.values()) / max(len(solved), 1)
            rec.update(pass_rate=rate, eval_s=time.time() - te, mean_reward=rate, task_coverage=coverage,
                       gate_reached=rate >= cfg.gate and coverage >= cfg.gate_coverage)
            if rec["gate_reached"]:
                log.info("sft gate reached (pass rate %.2f >= %.2f, tasks solved %.2f >= %.2f, lowest gold chance "
                         "%.2f >= %.2f) at step %d", rate, cfg.gate, coverage, cfg.gate_coverage, rec["gold_p_min"],
                         cfg.gate_min_gold_p, step)
            d = self.run_dir / f"step_{step:03d}"
            for i, tr in enumerate(trajs[:4]):
                save_rollout(tr, d, f"rollout_{i:02d}", {"rollout_idx": i, "return": tr.reward})
        return rec

    async def finish(self, result: dict[str, Any]) -> None:
        if result["steps"]:  # the last check already measured these weights, if it was the last step
            result["gold_p_final"] = result["steps"][-1].get("gold_p_by_task") or await self.gold_probabilities()

    async def aclose(self) -> None:
        pass


SPEC = training(SftConfig, SftRecipe, "supervised warm start on gold trajectories")
