"""Training recipes on the official tinker SDK: sft (gold trajectories), grpo, ppo, ppo-kl.

Every step writes ``step_XXX/step_result.json`` and ``step_XXX/rollout_YY.{json,txt}``, appends to
``metrics.jsonl``, rewrites ``results/<name>/result.json``, the reward curve PNG and the HTML
trajectory viewer, and records a resumable ``state.json`` (``--resume RUN_DIR``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from services.common.paths import RUNS_DIR

from .agent.chat_format import eos_id
from .cli_args import agent_argument
from .data import group_advantages, rl_datum, rl_segments, sft_datums
from .report import write_reports
from .runs import endpoints

log = logging.getLogger("cookbook.train")


def add_arguments(sub, common) -> None:
    for mode, help_ in [("sft", "supervised warm start on gold trajectories"), ("grpo", "group-relative policy optimisation"),
                        ("ppo", "clipped PPO with a baseline, several minibatch epochs"),
                        ("ppo-kl", "PPO plus a k3 KL penalty against the frozen reference")]:
        p = sub.add_parser(mode, help=help_)
        common(p)
        if mode != "sft":   # sft replays the builtin agent's gold trajectories
            agent_argument(p)
        p.add_argument("--learning-rate", type=float, default=None, help="Adam learning rate")
        p.add_argument("--lr-schedule", default=None, choices=["constant", "linear", "cosine"],
                       help="learning-rate schedule over --num-steps (default constant; linear for RL with --preset quickstart)")
        p.add_argument("--lora-rank", type=int, default=16, help="LoRA rank; 0 = full fine-tuning (default 16)")
        p.add_argument("--num-steps", type=int, default=None, help="optimizer steps")
        p.add_argument("--batch-size", type=int, default=None, help="sft: datums per step (default 32; 16 with --preset quickstart)")
        p.add_argument("--group-size", type=int, default=None, help="rollouts per task and step (default 10; 8 with --preset quickstart)")
        p.add_argument("--groups-per-step", type=int, default=None, help="tasks per step (default 4; 8 with --preset quickstart)")
        p.add_argument("--max-train-transitions", type=int, default=None, help="cap on training datums per step")
        p.add_argument("--loss", default=None, choices=["importance_sampling", "ppo", "cispo"], help="grpo loss (default importance_sampling)")
        p.add_argument("--normalize-std", default=None, action=argparse.BooleanOptionalAction,
                       help="grpo: divide advantages by the group std (default: on with --preset quickstart)")
        p.add_argument("--leave-one-out", action="store_true", help="grpo: leave-one-out baseline")
        p.add_argument("--ppo-epochs", type=int, default=2, help="ppo: epochs over each batch")
        p.add_argument("--minibatches", type=int, default=2, help="ppo: minibatches per epoch")
        p.add_argument("--kl-beta", type=float, default=None, help="ppo-kl: KL penalty coefficient (default 0.05)")
        p.add_argument("--kl-reference", default="init", metavar="init|base|tinker://...",
                       help="ppo-kl: the frozen policy the KL penalty pulls towards: init = the run's starting policy "
                            "(its warm start; default), base = the untrained base model, or a tinker:// checkpoint")
        p.add_argument("--gate", type=float, default=0.3, help="sft: stop once the sampled pass rate reaches this")
        p.add_argument("--gate-coverage", type=float, default=0.0,
                       help="sft: and once this fraction of the evaluated tasks was solved at least once (RL gets no "
                            "gradient from a task it never solves; default 0)")
        p.add_argument("--gate-min-gold-p", type=float, default=None, metavar="P",
                       help="sft: and once every task's gold trajectory has at least this chance to be sampled at T=1 "
                            "(exp(-its NLL), one forward pass; default 0.15 with --preset quickstart, else 0)")
        p.add_argument("--balance-tasks", type=float, default=None, metavar="POWER",
                       help="sft: weight each gold datum's loss by (its NLL / the batch mean) ** POWER, so hard tasks "
                            "catch up with easy ones (0 = plain SFT; default 1 with --preset quickstart, else 0)")
        p.add_argument("--eval-every", type=int, default=None, help="sft: check the pass rate every N steps (default 10; 2 with --preset quickstart)")
        p.add_argument("--eval-from", type=int, default=None, help="sft: first step to check the pass rate at (default 10; 40 with --preset quickstart)")
        p.add_argument("--eval-n", type=int, default=None, help="sft: rollouts per pass-rate check (default 16; 32 with --preset quickstart)")
        p.add_argument("--save-state", default=None, help="save the final training state under this name (checkpoint.json)")
        p.add_argument("--save-every", type=int, default=5,
                       help="save a resumable checkpoint every N steps (--resume continues from the last one)")
        p.add_argument("--init-from", default=None, help="tinker:// checkpoint to start from, 'none', or default: the latest sft of this config")
        p.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue a killed run from its last checkpoint")
        p.add_argument("--reward-cache", default=None, action=argparse.BooleanOptionalAction,
                       help="reuse the verifier's result for an identical final workspace (default: on with --preset quickstart, "
                            "whose agent has no bash tool)")
        p.add_argument("--log-to", action="append", default=[], choices=["tensorboard", "wandb"],
                       help="also log the metrics.jsonl keys to TensorBoard (RUN_DIR/tensorboard) or an offline W&B run "
                            "(RUN_DIR/wandb); repeatable")


# ------------------------------------------------------------------------------ helpers
def config_key(ep, args) -> str:
    """Identifies 'the same configuration' for sft -> grpo warm starts."""
    h = hashlib.sha256(json.dumps([ep.model, args.dataset, args.preset, args.lora_rank]).encode()).hexdigest()[:12]
    return h


def latest_sft_path(key: str) -> Path:
    return RUNS_DIR / f".latest-sft-{key}.json"


def _defaults(args) -> None:
    quick = args.preset == "quickstart"
    if args.learning_rate is None:
        args.learning_rate = {"sft": 5e-3}.get(args.mode, 1e-3) if quick else {"sft": 1e-4}.get(args.mode, 1e-5)
    if args.lr_schedule is None:  # quickstart RL: a high start, then decay (a steadier end; docs/recipes.md)
        args.lr_schedule = "linear" if quick and args.mode != "sft" else "constant"
    if args.num_steps is None:
        args.num_steps = {"sft": 200}.get(args.mode, 60) if quick else {"sft": 100}.get(args.mode, 20)
    if args.batch_size is None:
        args.batch_size = 16 if quick else 32
    if args.group_size is None:
        args.group_size = 8 if quick else 10
    if args.groups_per_step is None:
        args.groups_per_step = 8 if quick else 4
    if args.normalize_std is None:
        args.normalize_std = quick
    if args.gate_min_gold_p is None:
        args.gate_min_gold_p = 0.15 if quick else 0.0
    if args.balance_tasks is None:
        args.balance_tasks = 1.0 if quick else 0.0
    if args.eval_every is None:
        args.eval_every = 2 if quick else 10
    if args.eval_from is None:
        args.eval_from = 40 if quick else 10
    if args.eval_n is None:
        args.eval_n = 32 if quick else 16
    if args.kl_beta is None:
        args.kl_beta = 0.05 if args.mode == "ppo-kl" else 0.0
    if args.split is None:
        args.split = "train"


def lr_at(args, step: int) -> float:
    """--learning-rate under --lr-schedule: constant, or linear / cosine decay to 0 at --num-steps
    (as tinker-cookbook's schedules; a function of the step only, so --resume continues it)."""
    frac = min(step / max(args.num_steps, 1), 1.0)
    factor = {"constant": 1.0, "linear": 1.0 - frac, "cosine": 0.5 * (1.0 + math.cos(math.pi * frac))}[args.lr_schedule]
    return args.learning_rate * factor


def _adam(lr: float):
    from tinker import types

    return types.AdamParams(learning_rate=lr, beta1=0.9, beta2=0.95, eps=1e-8, grad_clip_norm=1.0)


class RunState:
    """state.json: what --resume needs, written only together with a checkpoint, so that everything in it
    describes that checkpoint: its step, the run's rng and order/baseline/nll state after that step, the
    run's initial weights (a run killed before its first checkpoint starts over from them) and the
    ppo-kl reference."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / "state.json"
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data))
        tmp.replace(self.path)


# ------------------------------------------------------------------------------ entry
def run(args, run_dir: Path) -> int:
    _defaults(args)
    return asyncio.run(_run(args, run_dir))


async def _run(args, run_dir: Path) -> int:
    import tinker

    from .setup import load_tasks, make_context

    ep = endpoints(need_sandbox=args.sandbox == "manager")
    tasks = load_tasks(args.dataset, args.split, args.task_id)
    if args.preset == "quickstart" and not args.task_id:
        from .setup import QUICKSTART

        tasks = tasks[: QUICKSTART["max_tasks"]]
    reward_cache = args.reward_cache if args.reward_cache is not None else args.preset == "quickstart"
    ctx = await make_context(ep, tasks, args.sandbox, args.preset, args.rollout_concurrency, args.seed, reward_cache,
                             agent=getattr(args, "agent", "builtin"))
    sc = tinker.ServiceClient(base_url=ep.backend_url, api_key=ep.api_key)
    state = RunState(run_dir)
    resuming = bool(state.data)
    name = args.name or args.mode
    res_dir = run_dir / "results" / name
    res_dir.mkdir(parents=True, exist_ok=True)
    result = json.loads((res_dir / "result.json").read_text()) if (res_dir / "result.json").exists() and resuming else {
        "mode": args.mode, "model": ep.model, "config": {k: v for k, v in vars(args).items() if k != "func"},
        "steps": [], "checkpoints": []}

    if resuming:  # forget what was logged after the last checkpoint: those steps run again
        done = state.data["step"]
        result["steps"] = [x for x in result["steps"] if x["step"] < done]
        result["checkpoints"] = [c for c in result["checkpoints"] if c["step"] <= done]
        with open(run_dir / "metrics.jsonl", "w") as f:
            for x in result["steps"]:
                f.write(json.dumps(_metrics_line(x)) + "\n")
    # ---- the training client: resume > init-from > latest sft > fresh
    key = config_key(ep, args)
    if state.data.get("checkpoint"):
        log.info("resuming from %s (step %d)", state.data["checkpoint"], state.data["step"])
        tc = await sc.create_training_client_from_state_with_optimizer(state.data["checkpoint"])
        init = state.data.get("init", "none")
    else:  # a fresh run, or one killed before its first checkpoint: (again) from the same initial weights
        init = state.data.get("init") if resuming else args.init_from
        if init is None and args.mode != "sft" and latest_sft_path(key).exists():
            init = json.loads(latest_sft_path(key).read_text())["path"]
            log.info("warm start from the latest sft checkpoint of this configuration: %s", init)
        if init and init != "none":
            tc = await sc.create_training_client_from_state_with_optimizer(init)
        else:
            init = "none"
            tc = await sc.create_lora_training_client(base_model=ep.model, rank=args.lora_rank, seed=args.seed)
        state.data = {"step": 0, "rng": None, "checkpoint": None, "init": init,
                      **{k: state.data[k] for k in ("kl_reference",) if k in state.data}}
    if init != "none":
        result["init_from"] = init
    if state.data.get("rng") is not None:
        ctx.rng.setstate(_rng_from_json(state.data["rng"]))
    eos = eos_id(ctx.tokenizer)
    recipe = {"sft": sft_step, "grpo": rl_step, "ppo": rl_step, "ppo-kl": rl_step}[args.mode]
    shared: dict[str, Any] = {"eos": eos, **state.data.get("shared", {})}
    if args.mode == "sft":
        shared["gold"], shared["gold_tasks"] = await gold_datums(ctx)
    if args.mode == "ppo-kl":
        if "kl_reference" not in state.data:
            state.data["kl_reference"] = await kl_reference(args, sc, tc, ep.model, init, run_dir)
        result["kl_reference"] = state.data["kl_reference"]
        log.info("ppo-kl: KL penalty against %s", state.data["kl_reference"])
        shared["reference"] = await sc.create_sampling_client(**state.data["kl_reference"])
    if not resuming:
        state.save()  # the initial weights and the reference, for a run killed before its first checkpoint
    from tqdm import tqdm

    from .metric_loggers import MetricLoggers

    bar = tqdm(total=args.num_steps, initial=state.data["step"], desc=args.mode, unit="step")
    loggers = MetricLoggers(run_dir, args.log_to, result["config"])
    try:
        for step in range(state.data["step"], args.num_steps):
            t0 = time.time()
            rec = await recipe(args, ctx, tc, step, run_dir, shared)
            rec["step"] = step
            rec["time_s"] = time.time() - t0
            result["steps"].append(rec)
            with open(run_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(_metrics_line(rec)) + "\n")
            loggers.log(_metrics_line(rec), step)
            log.info("step %d: %s", step, json.dumps({k: v for k, v in rec.items() if isinstance(v, (int, float))}))
            bar.update(1)
            bar.set_postfix_str(", ".join(f"{k}={rec[k]:.3f}" for k in ("mean_reward", "loss_per_token", "pass_rate") if isinstance(rec.get(k), float)))
            stop = rec.get("gate_reached", False)
            saved = (step + 1) % args.save_every == 0 or step + 1 == args.num_steps or stop
            if saved:
                path = (await tc.save_state(f"{args.mode}-{run_dir.name}-step{step + 1:04d}")).path
                result["checkpoints"].append({"step": step + 1, "path": path})
                state.data.update(step=step + 1, checkpoint=path, rng=_rng_to_json(ctx.rng.getstate()),
                                  shared={k: shared[k] for k in ("order", "baseline", "nll") if k in shared})
            (res_dir / "result.json").write_text(json.dumps(result, indent=1))  # before state: see resume above
            if saved:
                state.save()
            write_reports(run_dir, result, name)
            if stop:
                log.info("sft gate reached (pass rate %.2f >= %.2f, tasks solved %.2f >= %.2f, lowest gold chance %.2f >= %.2f) "
                         "at step %d", rec["pass_rate"], args.gate, rec["task_coverage"], args.gate_coverage, rec["gold_p_min"],
                         args.gate_min_gold_p, step)
                break
    finally:
        bar.close()
        loggers.close()
        await ctx.rollouts.aclose()
    final = state.data.get("checkpoint")
    if args.save_state:
        final = (await tc.save_state(args.save_state, overwrite=True)).path
        (run_dir / "checkpoint.json").write_text(json.dumps({"name": args.save_state, "path": final}, indent=1))
    if args.mode == "sft" and result["steps"]:  # the last check already measured these weights, if it was the last step
        result["gold_p_final"] = result["steps"][-1].get("gold_p_by_task") or await gold_probabilities(tc, shared)
    if args.mode == "sft" and final:
        latest_sft_path(key).write_text(json.dumps({"path": final, "run_dir": str(run_dir)}))
    result["final_checkpoint"] = final
    (res_dir / "result.json").write_text(json.dumps(result, indent=1))
    write_reports(run_dir, result, name)
    print(f"{args.mode}: {len(result['steps'])} steps; final checkpoint {final}; results in {res_dir}")
    return 0


def _metrics_line(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if not isinstance(v, (list, dict))} | rec.get("metrics", {})


def _rng_to_json(st):
    return [st[0], list(st[1]), st[2]]


def _rng_from_json(j):
    return (j[0], tuple(j[1]), j[2])


async def kl_reference(args, sc, tc, base_model: str, init: str, run_dir: Path) -> dict[str, str]:
    """create_sampling_client arguments for --kl-reference: init = the run's starting policy (the warm
    start's checkpoint, or the fresh adapter saved before the first update), base, or a tinker:// path."""
    if args.kl_reference == "base":
        return {"base_model": base_model}
    if args.kl_reference.startswith("tinker://"):
        return {"model_path": args.kl_reference}
    if args.kl_reference != "init":
        raise SystemExit(f"--kl-reference must be init, base or a tinker:// path, not {args.kl_reference!r}")
    if init != "none":
        return {"model_path": init}
    return {"model_path": (await tc.save_weights_for_sampler(f"{args.mode}-{run_dir.name}-start")).path}


# ------------------------------------------------------------------------------ sft
async def gold_datums(ctx) -> tuple[list, list[str]]:
    """Gold trajectories through the real agent, tools, sandbox and verifier (only reward 1 kept):
    their datums, and the task of each datum."""
    from .agent.scripted import ScriptedPolicy
    from .setup import gold_turns_for

    items = [(t, ScriptedPolicy(ctx.tokenizer, gold_turns_for(t, ctx.agent_cfg.tools, ctx.agent_cfg.budgets.max_turns))) for t in ctx.tasks]
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


async def gold_probabilities(tc, shared) -> dict[str, float]:
    """Per task, the chance that the current weights sample its gold trajectory at T=1 (exp(-sequence NLL),
    one forward pass; the lowest over a task's datums). A task near 0 gives RL only zero-variance groups."""
    fwd = await tc.forward(shared["gold"], "cross_entropy")
    out: dict[str, float] = {}
    for task, d, o in zip(shared["gold_tasks"], shared["gold"], fwd.loss_fn_outputs):
        p = math.exp(sequence_logprob(d, o))
        out[task] = round(min(out.get(task, 1.0), p), 4)
    return out


async def _pass_rate(ctx, tc, n: int, temperature: float, eos: int) -> tuple[float, list]:
    from .agent.agent import TinkerPolicy

    sampler = await tc.save_weights_and_get_sampling_client()
    pol = TinkerPolicy(sampler, [eos], temperature=temperature)
    tasks = [ctx.tasks[i % len(ctx.tasks)] for i in ctx.rng.sample(range(max(n, len(ctx.tasks))), n)]
    # one seeded sampling stream per rollout (from the run's rng): the gate decision is reproducible
    trajs = await ctx.rollouts.run_many([(t, pol.fork(ctx.rng.randrange(2**31))) for t in tasks])
    done = [t for t in trajs if t is not None]
    return (sum(t.reward or 0.0 for t in done) / len(done) if done else 0.0), done


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


def _reweighted(d, w: float):
    if w == 1.0:
        return d
    from tinker import types

    return types.Datum(model_input=d.model_input, loss_fn_inputs={
        **d.loss_fn_inputs, "weights": types.TensorData.from_numpy(d.loss_fn_inputs["weights"].to_numpy() * np.float32(w))})


async def sft_step(args, ctx, tc, step, run_dir, shared) -> dict:
    data = shared["gold"]
    idx = ctx.rng.sample(range(len(data)), min(args.batch_size, len(data)))
    nll = shared.setdefault("nll", {})
    weights = balance_weights(nll, idx, args.balance_tasks)
    batch = [_reweighted(data[i], w) for i, w in zip(idx, weights)]
    t0 = time.time()
    f = tc.forward_backward(batch, "cross_entropy")
    o = tc.optim_step(_adam(lr_at(args, step)))
    fb, opt = await f, await o
    for i, out in zip(idx, fb.loss_fn_outputs):
        nll[str(i)] = -sequence_logprob(data[i], out)  # the unweighted gold datum: its real NLL
    ntok = sum(float(data[i].loss_fn_inputs["weights"].to_numpy().sum()) for i in idx)
    names = shared["gold_tasks"]
    rec: dict[str, Any] = {"loss_per_token": sum(nll[str(i)] for i in idx) / max(ntok, 1), "n_datums": len(batch),
                           "train_s": time.time() - t0, "metrics": {**fb.metrics, **(opt.metrics or {})},
                           "gold_nll_by_task": {names[i]: round(nll[str(i)], 4) for i in sorted(idx)},
                           "loss_weight_min": min(weights), "loss_weight_max": max(weights)}
    if args.eval_every and (step + 1) % args.eval_every == 0 and step + 1 >= args.eval_from:
        te = time.time()
        gold_p = await gold_probabilities(tc, shared)  # one forward pass: the cheap half of the gate first
        rec.update(gold_p_by_task=gold_p, gold_p_min=min(gold_p.values()), gate_reached=False)
        if rec["gold_p_min"] < args.gate_min_gold_p:
            rec["eval_s"] = time.time() - te
            return rec
        rate, trajs = await _pass_rate(ctx, tc, args.eval_n, 1.0, shared["eos"])
        solved: dict[str, bool] = {}
        for tr in trajs:
            solved[tr.task_id] = solved.get(tr.task_id, False) or (tr.reward or 0.0) > 0
        coverage = sum(solved.values()) / max(len(solved), 1)
        rec.update(pass_rate=rate, eval_s=time.time() - te, mean_reward=rate, task_coverage=coverage,
                   gate_reached=rate >= args.gate and coverage >= args.gate_coverage)
        d = run_dir / f"step_{step:03d}"
        from .rollout import save_rollout

        for i, tr in enumerate(trajs[:4]):
            save_rollout(tr, d, f"rollout_{i:02d}", {"rollout_idx": i, "return": tr.reward})
    return rec


# ------------------------------------------------------------------------------ grpo / ppo / ppo-kl
async def rl_step(args, ctx, tc, step, run_dir, shared) -> dict:
    from .agent.agent import TinkerPolicy
    from .rollout import Failures, save_rollout

    timings: dict[str, float] = {}
    t0 = time.time()
    sampler = await tc.save_weights_and_get_sampling_client()
    timings["weight_sync_s"] = time.time() - t0
    pol = TinkerPolicy(sampler, [shared["eos"]], temperature=args.temperature)
    order = shared.setdefault("order", [])
    if len(order) < args.groups_per_step:
        idx = list(range(len(ctx.tasks)))
        ctx.rng.shuffle(idx)
        order.extend(idx)
    picked = [ctx.tasks[order.pop(0)] for _ in range(args.groups_per_step)]
    failures = Failures()
    t1 = time.time()
    def seed(g: int, k: int) -> int:  # one reproducible sampling stream per rollout
        return (args.seed * 1_000_003 + step * 10_007 + g * 101 + k) % (2**31)

    groups = await asyncio.gather(*(ctx.rollouts.run_many([(t, pol.fork(seed(g, k))) for k in range(args.group_size)], failures)
                                    for g, t in enumerate(picked)))
    timings["rollout_s"] = time.time() - t1
    trajs, advs, group_returns, group_advs, skipped, dropped = [], [], [], [], 0, 0
    for g in groups:
        if any(t is None for t in g):  # a group that cannot be completed is dropped whole
            dropped += 1
            continue
        rewards = [float(t.reward or 0.0) for t in g]
        group_returns.append(rewards)
        if args.mode == "grpo":
            a = group_advantages(rewards, args.normalize_std, args.leave_one_out)
        else:  # ppo: baseline = running mean reward of the batch so far (reward 0 still gets gradient)
            a = rewards
        group_advs.append(a)
        if args.mode == "grpo" and max(rewards) == min(rewards):
            skipped += 1
            continue
        trajs += g
        advs += a
    if args.mode != "grpo" and trajs:
        flat = [float(t.reward or 0.0) for t in trajs]
        base = shared.setdefault("baseline", None)
        batch_mean = float(np.mean(flat))
        baseline = batch_mean if base is None else 0.9 * base + 0.1 * batch_mean
        shared["baseline"] = baseline
        advs = [r - baseline for r in flat]
    all_rewards = [r for g in group_returns for r in g]
    rec: dict[str, Any] = {"mean_reward": float(np.mean(all_rewards)) if all_rewards else 0.0,
                           "n_rollouts": sum(len(g) for g in group_returns), "groups_skipped_zero_variance": skipped,
                           "groups_dropped": dropped, "failures": failures.to_dict(), "group_returns": group_returns,
                           "group_advantages": group_advs, "tasks": [t.name for t in picked]}
    sd = run_dir / f"step_{step:03d}"
    k = 0
    for t, g, a in zip(picked, groups, group_advs if len(group_advs) == len(groups) else [[0.0] * len(g) for g in groups]):
        for tr, adv in zip(g, a):
            if tr is not None:
                save_rollout(tr, sd, f"rollout_{k:02d}", {"rollout_idx": k, "return": tr.reward, "advantage": adv})
            k += 1
    # ppo-kl trains every trajectory (zero advantage too): its KL penalty covers every sampled token
    segs = rl_segments(trajs, advs, keep_zero=args.mode == "ppo-kl")
    if args.max_train_transitions and len(segs) > args.max_train_transitions:
        segs = ctx.rng.sample(segs, args.max_train_transitions)
    datums = [rl_datum(s, a) for s, a in segs]
    rec["verifier_cache_hits"] = ctx.rollouts.cache_hits
    rec["train_transitions"] = len(datums)
    rec["train_tokens"] = int(sum(d.model_input.length for d in datums))
    rec["learning_rate"] = lr = lr_at(args, step)
    t2 = time.time()
    if datums:
        if args.mode == "grpo":
            loss = args.loss or "importance_sampling"
            f = tc.forward_backward(datums, loss)
            o = tc.optim_step(_adam(lr))
            fb, opt = await f, await o
            rec["fwdbwd_metrics"] = fb.metrics
            rec["optim_metrics"] = opt.metrics or {}
        else:
            masks = [np.asarray(s.sampled[1:], dtype=np.float32) for s, _ in segs]
            rec.update(await _ppo_update(args, tc, datums, masks, shared, ctx.rng, lr))
    timings["train_s"] = time.time() - t2
    timings["sandbox_s"] = sum(t.timings.get("sandbox_s", 0) for t in trajs)
    timings["sampling_s"] = sum(t.timings.get("sample_s", 0) for t in trajs)
    timings["verifier_s"] = sum(t.timings.get("verifier_s", 0) for t in trajs)
    rec["timings"] = timings
    rec["metrics"] = {**{f"fwdbwd/{k}": v for k, v in rec.get("fwdbwd_metrics", {}).items()},
                      **{f"optim/{k}": v for k, v in rec.get("optim_metrics", {}).items()}}
    sd.mkdir(parents=True, exist_ok=True)
    (sd / "step_result.json").write_text(json.dumps(rec, indent=1))
    return rec


async def _ppo_update(args, tc, datums, masks, shared, rng: random.Random, lr: float) -> dict:
    """Clipped PPO over several minibatch epochs, via forward_backward_custom; ppo-kl adds --kl-beta times
    a k3 KL estimate against the frozen reference (--kl-reference; its logprobs from compute_logprobs)
    on every sampled token (``masks``), and reports that KL (per token, also at beta 0)."""
    import torch

    beta = args.kl_beta
    ref_lps: list[torch.Tensor | None] = [None] * len(datums)
    if "reference" in shared:
        ref = shared["reference"]
        from tinker import types

        async def ref_of(d):
            toks = d.model_input.to_ints() + [int(d.loss_fn_inputs["target_tokens"].to_numpy()[-1])]
            lps = await ref.compute_logprobs(types.ModelInput.from_ints(toks))
            return torch.tensor([0.0 if x is None else x for x in lps[1:]], dtype=torch.float32)

        ref_lps = list(await asyncio.gather(*(ref_of(d) for d in datums)))
    idx = list(range(len(datums)))
    fb_metrics: dict[str, float] = {}
    kls: list[float] = []
    clipfracs: list[float] = []
    for epoch in range(args.ppo_epochs):
        rng.shuffle(idx)
        for mb in np.array_split(np.array(idx), max(1, min(args.minibatches, len(idx)))):
            batch = [datums[i] for i in mb]
            refs = [ref_lps[i] for i in mb]
            mb_masks = [torch.tensor(masks[i]) for i in mb]

            def loss_fn(data, logprobs_list):
                total = torch.zeros(())
                ntok = 0
                kl_sum = 0.0
                clip_n = 0.0
                for d, lp, rl, mask in zip(data, logprobs_list, refs, mb_masks):
                    q = torch.tensor(d.loss_fn_inputs["logprobs"].to_numpy())
                    a = torch.tensor(d.loss_fn_inputs["advantages"].to_numpy())
                    r = torch.exp(lp - q)
                    obj = torch.minimum(r * a, torch.clamp(r, 0.8, 1.2) * a)
                    el = -obj
                    if rl is not None:
                        diff = rl - lp
                        k3 = torch.exp(diff) - 1 - diff
                        el = el + beta * k3
                        kl_sum += float((k3 * mask).sum())
                    clip_n += float((((r < 0.8) | (r > 1.2)).float() * mask).sum())
                    total = total + (el * mask).sum()
                    ntok += int(mask.sum())
                kls.append(kl_sum / max(ntok, 1))
                clipfracs.append(clip_n / max(ntok, 1))
                return total / max(ntok, 1), {"ppo_tokens:sum": float(ntok)}

            f = tc.forward_backward_custom(batch, loss_fn)
            o = tc.optim_step(_adam(lr))
            fb, _ = await f, await o
            fb_metrics = fb.metrics
    return {"fwdbwd_metrics": fb_metrics, "optim_metrics": {}, "kl_per_token": float(np.mean(kls)) if kls else 0.0,
            "kl_beta": beta, "clipfrac": float(np.mean(clipfracs)) if clipfracs else 0.0, "ppo_epochs": args.ppo_epochs}
