"""Training on the official tinker SDK: the driver every recipe shares, and the sft recipe.

The driver (``run``) builds the run (tasks, sandboxes, the training client: resume > --init-from >
the latest sft of this configuration > fresh), then calls the recipe once per step and records every
step through ``RunRecorder`` (cookbook/recorder.py: step_result.json, metrics.jsonl, result.json,
state.json, the reward curve and viewer). Recipes: ``SftRecipe`` below, ``RLRecipe`` (grpo, ppo, ppo-kl:
cookbook/rl_loop.py). A recipe has ``setup()``, ``step(step) -> record``, ``state() -> dict`` (its
part of state.json, ``shared``) and ``finish(result)``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tinker
from tqdm import tqdm

from services.common.paths import RUNS_DIR
from services.common.renderers.qwen3 import eos_id

from .agent.agent import TinkerPolicy
from .agent.scripted import ScriptedPolicy
from .config import AnyTrain, PpoConfig, PpoKlConfig, RLConfig, SftConfig, flat
from .context import context_of
from .data import reweighted, sft_datums
from .evaluation import EvalResult, evaluate_sampler, record, score
from .gold import gold_turns_for, shell_gold_turns
from .recorder import RunRecorder
from .rl_loop import OffPolicySampler, RLState, adam, lr_at, off_policy_step, rl_step
from .rollout import save_rollout
from .runs import endpoints
from .tasks import write_task_manifest

log = logging.getLogger("cookbook.train")


def config_key(model: str, cfg: AnyTrain) -> str:
    """Identifies 'the same configuration' for sft -> grpo warm starts: model, dataset, preset, LoRA rank and the agent
    (a black-box harness's SFT learns another format: `grpo --preset quickstart` must not start from
    `sft --preset quickstart --agent mini-swe-agent`). The built-in agent keeps the key it always had."""
    c = cfg.common
    parts: list = [model, c.dataset, c.preset, cfg.train.lora_rank]
    agent = getattr(cfg, "agent", "builtin")
    if agent != "builtin":
        parts.append(agent)
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]


def latest_sft_path(key: str) -> Path:
    return RUNS_DIR / f".latest-sft-{key}.json"


# ------------------------------------------------------------------------------ entry
def run(cfg: AnyTrain, run_dir: Path) -> int:
    return asyncio.run(_run(cfg, run_dir))


async def _run(cfg: AnyTrain, run_dir: Path) -> int:
    c, t = cfg.common, cfg.train
    ep = endpoints(need_sandbox=c.sandbox == "manager")
    ctx = await context_of(ep, c, training=True, reward_cache=t.reward_cache, agent=getattr(cfg, "agent", "builtin"),
                           heldout_split=cfg.eval_split if isinstance(cfg, RLConfig) and cfg.eval_every else None)
    tasks = ctx.tasks
    sc = tinker.ServiceClient(base_url=ep.backend_url, api_key=ep.api_key)
    name = c.name or cfg.MODE
    rec = RunRecorder(run_dir, name, cfg.MODE, ep.model, flat(cfg))
    write_task_manifest(rec.res_dir, tasks, c.dataset, c.split, c.task_id, c.seed)
    state = rec.state
    key = config_key(ep.model, cfg)
    if state.get("checkpoint"):
        log.info("resuming from %s (step %d)", state["checkpoint"], state["step"])
        tc = await sc.create_training_client_from_state_with_optimizer(state["checkpoint"])
        init = state.get("init", "none")
    else:  # a fresh run, or one killed before its first checkpoint: (again) from the same initial weights
        init = state.get("init") if rec.resuming else t.init_from
        if init is None and cfg.MODE != "sft" and c.preset and latest_sft_path(key).exists():
            # only the presets chain sft -> RL implicitly (run.sh quickstart); said on the console too
            init = json.loads(latest_sft_path(key).read_text())["path"]
            log.info("warm start from the latest sft checkpoint of this configuration: %s", init)
            print(f"{cfg.MODE}: warm start from the latest sft of --preset {c.preset} (same dataset, model and LoRA "
                  f"rank): {init}; --init-from none starts from the base model", flush=True)
        if init and init != "none":
            tc = await sc.create_training_client_from_state_with_optimizer(init)
        else:
            init = "none"
            tc = await sc.create_lora_training_client(base_model=ep.model, rank=t.lora_rank, seed=c.seed)
        rec.state = state = {"step": 0, "rng": None, "checkpoint": None, "init": init,
                             **{k: state[k] for k in ("kl_reference",) if k in state}}
    if init != "none":
        rec.result["init_from"] = init
    if state.get("rng") is not None:
        ctx.rng.setstate(_rng_from_json(state["rng"]))
    eos = eos_id(ctx.tokenizer)
    recipe: SftRecipe | RLRecipe
    if isinstance(cfg, SftConfig):
        recipe = SftRecipe(cfg, ctx, tc, eos, run_dir, state.get("shared", {}))
    else:
        recipe = RLRecipe(cfg, ctx, tc, eos, run_dir, state.get("shared", {}))
    await recipe.setup(sc, ep.model, init, rec)
    if not rec.resuming:
        rec.save_state()  # the initial weights and the reference, for a run killed before its first checkpoint
    bar = tqdm(total=t.num_steps, initial=state["step"], desc=cfg.MODE, unit="step")
    rec.open_loggers(t.log_to)
    try:
        for step in range(state["step"], t.num_steps):
            t0 = time.time()
            r = await recipe.step(step)
            r["step"] = step
            r["step_idx"] = step   # the seed's name
            r["time_s"] = time.time() - t0
            rec.log_step(r)
            log.info("step %d: %s", step, json.dumps({k: v for k, v in r.items() if isinstance(v, (int, float))}))
            bar.update(1)
            bar.set_postfix_str(", ".join(f"{k}={r[k]:.3f}" for k in ("mean_reward", "loss_per_token", "pass_rate")
                                          if isinstance(r.get(k), float)))
            stop = r.get("gate_reached", False)
            saved = (step + 1) % t.save_every == 0 or step + 1 == t.num_steps or stop
            if saved:
                path = (await tc.save_state(f"{cfg.MODE}-{run_dir.name}-step{step + 1:04d}")).path
                rec.checkpoint(step + 1, path, rng=_rng_to_json(ctx.rng.getstate()), shared=recipe.state())
            rec.commit(saved)
            if stop:
                assert isinstance(cfg, SftConfig)
                log.info("sft gate reached (pass rate %.2f >= %.2f, tasks solved %.2f >= %.2f, lowest gold chance "
                         "%.2f >= %.2f) at step %d", r["pass_rate"], cfg.gate, r["task_coverage"], cfg.gate_coverage,
                         r["gold_p_min"], cfg.gate_min_gold_p, step)
                break
    finally:
        bar.close()
        rec.close()
        await recipe.aclose()
        await ctx.rollouts.aclose()
    final = state.get("checkpoint")
    if t.save_state:
        final = (await tc.save_state(t.save_state, overwrite=True)).path
        (run_dir / "checkpoint.json").write_text(json.dumps({"name": t.save_state, "path": final}, indent=1))
    await recipe.finish(rec.result)
    if isinstance(cfg, SftConfig) and final:
        latest_sft_path(key).write_text(json.dumps({"path": final, "run_dir": str(run_dir)}))
    rec.result["final_checkpoint"] = final
    if isinstance(cfg, RLConfig):
        rec.result.update(seed_result_fields(cfg, rec.result, run_dir))
    rec.write_result()
    print(f"{cfg.MODE}: {len(rec.result['steps'])} steps; final checkpoint {final}; results in {rec.res_dir}")
    return 0


def seed_result_fields(cfg: RLConfig, result: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """result.json's fields under the seed's names (docs/seed-mapping.md), beside ours: the run's shape for
    every RL mode; ppo / ppo-kl also the last step's episode and update (and its trajectory.txt)."""
    out: dict[str, Any] = {"num_steps": cfg.train.num_steps, "group_size": cfg.group_size,
                           "rollout_concurrency": cfg.common.rollout_concurrency,
                           "temperature": cfg.common.temperature,
                           "kl_beta": cfg.kl_beta if isinstance(cfg, PpoKlConfig) else 0.0}
    steps = result.get("steps") or []
    if not isinstance(cfg, PpoConfig) or not steps:
        return out
    last = steps[-1]
    sd = run_dir / f"step_{last['step']:03d}"
    first = sd / "rollout_00.json"
    summ = json.loads(first.read_text()) if first.exists() else {}
    if (sd / "rollout_00.txt").exists():
        (run_dir / "results" / (cfg.common.name or cfg.MODE) / "trajectory.txt").write_text(
            (sd / "rollout_00.txt").read_text())
    out.update({"task_name": last.get("task_name"), "reward": summ.get("reward"), "turns_used": summ.get("turns_used"),
                "rollout_elapsed": last.get("rollout_elapsed"), "train_elapsed": last.get("train_elapsed"),
                "train_transitions": last.get("train_transitions"), "train_tokens": last.get("train_tokens"),
                "train_total_transitions": sum(s.get("train_transitions", 0) for s in steps),
                "train_total_tokens": sum(s.get("train_tokens", 0) for s in steps),
                "fwdbwd_metrics": last.get("fwdbwd_metrics", {}), "optim_metrics": last.get("optim_metrics", {}),
                "published_sampling_client": last.get("published_sampling_client"),
                "train_skipped": bool(last.get("train_skipped", False))})
    if isinstance(cfg, PpoKlConfig):
        out["ref_logprobs_elapsed"] = last.get("ref_logprobs_elapsed", 0.0)
    return out


def _rng_to_json(st):
    return [st[0], list(st[1]), st[2]]


def _rng_from_json(j):
    return (j[0], tuple(j[1]), j[2])


# ------------------------------------------------------------------------------ grpo / ppo / ppo-kl
class RLRecipe:
    """grpo / ppo / ppo-kl: the RL loop of cookbook/rl_loop.py, synchronous or (K > 0) off-policy."""

    def __init__(self, cfg: RLConfig, ctx, tc, eos: int, run_dir: Path, shared: dict[str, Any]):
        self.cfg, self.ctx, self.tc, self.eos, self.run_dir = cfg, ctx, tc, eos, run_dir
        self.rl = RLState.from_json(shared)
        self.reference = None
        self.sampler: OffPolicySampler | None = None
        self.heldout: list = []
        self.result: dict[str, Any] = {}

    async def setup(self, sc, base_model: str, init: str, rec: RunRecorder) -> None:
        self.result = rec.result
        if self.cfg.eval_every:
            self.heldout = self.ctx.heldout   # loaded and prepared with the run's context
            if rec.state["step"] == 0:
                await self.evaluate(0, await self.tc.save_weights_and_get_sampling_client())
        if isinstance(self.cfg, PpoKlConfig):
            if "kl_reference" not in rec.state:
                rec.state["kl_reference"] = await kl_reference(self.cfg, sc, self.tc, base_model, init, self.run_dir)
            rec.result["kl_reference"] = rec.state["kl_reference"]
            log.info("ppo-kl: KL penalty against %s", rec.state["kl_reference"])
            self.reference = await sc.create_sampling_client(**rec.state["kl_reference"])
        if self.cfg.max_steps_off_policy > 0:
            start = rec.state["step"]
            self.sampler = OffPolicySampler(self.cfg, self.ctx, self.eos, start,
                                            await self.tc.save_weights_and_get_sampling_client(), start)

    async def step(self, step: int) -> dict:
        if self.sampler is None:
            rec = await rl_step(self.cfg, self.ctx, self.tc, step, self.run_dir, self.rl, self.eos, self.reference)
        else:
            rec = await off_policy_step(self.cfg, self.ctx, self.tc, step, self.run_dir, self.rl, self.sampler,
                                        self.reference)
        every = self.cfg.eval_every
        if every and ((step + 1) % every == 0 or step + 1 == self.cfg.train.num_steps):
            t0 = time.time()
            sampler = (self.sampler.newest[0] if self.sampler is not None
                       else await self.tc.save_weights_and_get_sampling_client())
            rec["heldout_pass_rate"] = (await self.evaluate(step + 1, sampler)).pass_rate
            rec["eval_s"] = time.time() - t0
        return rec

    async def evaluate(self, step: int, sampler) -> EvalResult:
        """--eval-every: the weights after ``step`` updates on --eval-split, into result.json 'heldout'."""
        res = await evaluate_sampler(self.ctx.rollouts, self.heldout, sampler, [self.eos],
                                     temperature=self.cfg.common.temperature,
                                     samples_per_task=self.cfg.eval_samples, seed=self.cfg.common.seed)
        record(self.result, step, res, self.cfg.eval_split)
        log.info("%s after %d steps: pass rate %.3f (%d attempts)", self.cfg.eval_split, step, res.pass_rate, res.n)
        return res

    def state(self) -> dict[str, Any]:
        return self.rl.to_json()

    async def finish(self, result: dict[str, Any]) -> None:
        pass

    async def aclose(self) -> None:
        if self.sampler is not None:
            await self.sampler.aclose()


async def kl_reference(cfg: PpoKlConfig, sc, tc, base_model: str, init: str, run_dir: Path) -> dict[str, str]:
    """create_sampling_client arguments for --kl-reference: init = the run's starting policy (the warm
    start's checkpoint, or the fresh adapter saved before the first update), base, or a tinker:// path."""
    if cfg.kl_reference == "base":
        return {"base_model": base_model}
    if cfg.kl_reference.startswith("tinker://"):
        return {"model_path": cfg.kl_reference}
    if cfg.kl_reference != "init":
        raise SystemExit(f"--kl-reference must be init, base or a tinker:// path, not {cfg.kl_reference!r}")
    if init != "none":
        return {"model_path": init}
    return {"model_path": (await tc.save_weights_for_sampler(f"{cfg.MODE}-{run_dir.name}-start")).path}


# ------------------------------------------------------------------------------ sft
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
            d = self.run_dir / f"step_{step:03d}"
            for i, tr in enumerate(trajs[:4]):
                save_rollout(tr, d, f"rollout_{i:02d}", {"rollout_idx": i, "return": tr.reward})
        return rec

    async def finish(self, result: dict[str, Any]) -> None:
        if result["steps"]:  # the last check already measured these weights, if it was the last step
            result["gold_p_final"] = result["steps"][-1].get("gold_p_by_task") or await self.gold_probabilities()

    async def aclose(self) -> None:
        pass
