"""The one RL loop: the RL recipes (cookbook/recipes/: grpo, ppo, ppo-kl) are configs of it (an ``RLConfig``) plus
an update, differing in the advantage estimator (``cfg.ADVANTAGES``, cookbook/data.py: group-relative or a
running-mean baseline) and the update (``single_update``: one forward_backward with the config's loss and one
optimizer step; ppo's: the server's clipped ppo loss over minibatch epochs, plus a k3 KL penalty for ppo-kl).

A step: sample ``groups_per_step`` tasks x ``group_size`` rollouts with the sampler of the current
weights, advantages, datums (one per token segment, the sampler's logprobs as the behaviour
logprobs), the update, then new sampler weights. With ``--max-steps-off-policy K`` > 0
(``OffPolicySampler``) the next steps' batches are sampled while the current one trains, each from
the newest published weights; a batch's staleness is the number of optimizer steps between the
weights it was sampled with and the step that trains on it, at most K (groups older are dropped and
counted); the importance ratio in the (clipped) loss corrects for the lag. K = 0 is the synchronous
loop (``rl_step``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import numpy as np
from tinker import types

from services.common.trajectory import Trajectory

from .agent.agent import SAMPLED, TinkerPolicy
from .config import RLConfig
from .data import baseline_advantages, group_advantages, rl_datum, rl_segments
from .mismatch import mismatch_stats
from .recorder import save_rollout, write_step_result
from .rollout import Failures

log = logging.getLogger("cookbook.rl")


def adam(lr: float) -> types.AdamParams:
    return types.AdamParams(learning_rate=lr, beta1=0.9, beta2=0.95, eps=1e-8, grad_clip_norm=1.0)


def lr_at(cfg, step: int) -> float:
    """--learning-rate under --lr-schedule: constant, or linear / cosine decay to 0 at --num-steps
    (as tinker-cookbook's schedules; a function of the step only, so --resume continues it)."""
    t = cfg.train
    frac = min(step / max(t.num_steps, 1), 1.0)
    factor = {"constant": 1.0, "linear": 1.0 - frac, "cosine": 0.5 * (1.0 + math.cos(math.pi * frac))}[t.lr_schedule]
    return t.learning_rate * factor


@dataclass
class RLState:
    """What an RL run carries from step to step (state.json ``shared``): the task order of the
    synchronous loop and ppo's running baseline."""

    order: list[int] = field(default_factory=list)
    baseline: float | None = None
    published: Any = None   # the sampler of the weights after the last update (not saved: the next step's sampler)
    # --max-steps-off-policy K: the saved sampler weights (tinker:// paths) of the versions that the batches after the
    # next checkpoint are sampled with (at most K + 1), so a --resume samples them as the uninterrupted run did
    sampler_paths: dict[int, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RLState":
        return cls(order=list(d.get("order", [])), baseline=d.get("baseline"),
                   sampler_paths={int(v): p for v, p in d.get("sampler_paths", {}).items()})

    def to_json(self) -> dict[str, Any]:
        return {"order": self.order, **({"baseline": self.baseline} if self.baseline is not None else {}),
                **({"sampler_paths": {str(v): p for v, p in self.sampler_paths.items()}} if self.sampler_paths else {})}


@dataclass
class Batch:
    """One step's sampled groups (None: a rollout lost to infrastructure) and how they were sampled."""

    step: int
    tasks: list[Any]
    groups: list[list[Trajectory | None]]
    failures: Failures
    version: int                 # optimizer steps behind the weights the batch was sampled with
    rollout_s: float
    weight_sync_s: float = 0.0


def _seed(cfg: RLConfig, step: int, g: int, k: int) -> int:  # one reproducible sampling stream per rollout
    return (cfg.common.seed * 1_000_003 + step * 10_007 + g * 101 + k) % (2**31)


async def sample_batch(cfg: RLConfig, ctx, step: int, pol: TinkerPolicy, tasks: list, version: int) -> Batch:
    failures = Failures()
    t0 = time.time()
    groups = await asyncio.gather(*(ctx.rollouts.run_many([(t, pol.fork(_seed(cfg, step, g, k)))
                                                           for k in range(cfg.group_size)], failures)
                                    for g, t in enumerate(tasks)))
    return Batch(step, tasks, list(groups), failures, version, time.time() - t0)


def shuffled_rewards(rewards: list[float], seed: int, step: int, group: int) -> list[float]:
    """--shuffle-rewards: the group's rewards permuted by a stream of (seed, step, group) alone."""
    out = list(rewards)
    random.Random((seed * 1_000_003 + step * 10_007 + group) % (2**31)).shuffle(out)
    return out


def _advantages(cfg: RLConfig, groups: list[list[Trajectory]], state: RLState, step: int = 0):
    """(trained trajectories, their advantages, every group's returns and logged advantages, groups
    skipped for zero variance) under the config's estimator."""
    trajs: list[Trajectory] = []
    advs: list[float] = []
    group_returns, group_advs, skipped = [], [], 0
    for gi, g in enumerate(groups):
        rewards = [float(t.reward or 0.0) for t in g]
        group_returns.append(rewards)
        if cfg.shuffle_rewards:   # the control: the same rewards, to the wrong rollouts
            rewards = shuffled_rewards(rewards, cfg.common.seed, step, gi)
        if cfg.ADVANTAGES == "group":
            a = group_advantages(rewards, cfg.normalize_std, cfg.leave_one_out)  # type: ignore[attr-defined]
            group_advs.append(a)
            if max(rewards) == min(rewards):
                skipped += 1
                continue
        else:   # the baseline estimator logs the returns per group and centres the whole batch below
            a = rewards
            group_advs.append(a)
        trajs += g
        advs += a
    if cfg.ADVANTAGES == "baseline" and trajs and getattr(cfg, "baseline", "running-mean") == "running-mean":
        advs, state.baseline = baseline_advantages(advs, state.baseline)   # advs: the (shuffled) returns here
    return trajs, advs, group_returns, group_advs, skipped


def refuse_unsampled(trajs: list[Trajectory]) -> None:
    """RL trains only on what the policy's sampler drew (every turn's SampleOut.source "sampler": TinkerPolicy, the
    ModelService's sampling): a scripted, replayed or teacher-forced turn (a test double standing in for the model,
    a gold replay) would make the run's learning figures the script's. Raises naming the first such turn."""
    for t in trajs:
        for turn in t.turns:
            if turn.sampled_by != SAMPLED:
                raise RuntimeError(f"rollout of {t.task_id}: turn {turn.index} was not drawn by the policy's sampler "
                                   f"({turn.sampled_by or 'no source'}): RL trains only on sampled turns, never on a "
                                   "scripted, replayed or forced policy's")


# A recipe's update of one batch: (cfg, training client, datums, sampled-token masks, the run's rng, learning rate,
# staleness) -> the step record's update fields: fwdbwd_metrics, optim_metrics, any of its own, and "mismatch" (the
# sampler/trainer figures of its first forward_backward, at the sampling weights; cookbook/mismatch.py).
Update = Callable[[RLConfig, Any, list, list, random.Random, float, int], Awaitable[dict]]


async def single_update(cfg: RLConfig, tc, datums, masks, rng: random.Random, lr: float, staleness: int) -> dict:
    """One forward_backward with the config's loss (its loss config) and one optimizer step (grpo's update)."""
    f = tc.forward_backward(datums, cfg.loss_name, cfg.loss_config())
    o = tc.optim_step(adam(lr))
    fb = await f
    log.info("forward_backward done: %s", json.dumps(fb.metrics))
    opt = await o
    log.info("optim_step done: %s", json.dumps(opt.metrics or {}))
    # the trainer's logprobs of this forward_backward (at the sampling weights when staleness is 0)
    return {"fwdbwd_metrics": fb.metrics, "optim_metrics": opt.metrics or {},
            "mismatch": mismatch_stats(datums, fb.loss_fn_outputs, masks, staleness)}


async def train_batch(cfg: RLConfig, ctx, tc, step: int, run_dir: Path, state: RLState, batch: Batch,
                      update: Update = single_update, extra: dict[str, Any] | None = None) -> dict:
    """Advantages, datums and the update of one sampled batch; writes the step's rollouts and step_result.json."""
    groups = [g for g in batch.groups if all(t is not None for t in g)]   # incomplete groups are dropped whole
    dropped = len(batch.groups) - len(groups)
    trajs, advs, group_returns, group_advs, skipped = _advantages(cfg, groups, state, step)  # type: ignore[arg-type]
    all_rewards = [r for g in group_returns for r in g]
    rec: dict[str, Any] = {"mean_reward": float(np.mean(all_rewards)) if all_rewards else 0.0,
                           "n_rollouts": sum(len(g) for g in group_returns), "groups_skipped_zero_variance": skipped,
                           "groups_dropped": dropped, "failures": batch.failures.to_dict(),
                           "group_returns": group_returns, "group_advantages": group_advs,
                           "tasks": [t.name for t in batch.tasks], **(extra or {})}
    sd = run_dir / f"step_{step:03d}"
    k = 0
    logged = group_advs if len(group_advs) == len(batch.groups) else [[0.0] * len(g) for g in batch.groups]
    for g, a in zip(batch.groups, logged):
        for tr, adv in zip(g, a):
            if tr is not None:
                save_rollout(tr, sd, f"rollout_{k:02d}", {"rollout_idx": k, "return": tr.reward, "advantage": adv})
            k += 1
    refuse_unsampled(trajs)
    rec["sampled_turns"] = sum(len(t.turns) for g in groups for t in g)
    segs = rl_segments(trajs, advs, keep_zero=cfg.trains_every_trajectory)
    if cfg.max_train_transitions and len(segs) > cfg.max_train_transitions:
        segs = ctx.rng.sample(segs, cfg.max_train_transitions)
    datums = [rl_datum(s, a, sequence_ratio_mask=cfg.loss_name == "gspo") for s, a in segs]
    rec["verifier_cache_hits"] = ctx.rollouts.cache_hits
    rec["train_transitions"] = len(datums)
    rec["train_tokens"] = int(sum(d.model_input.length for d in datums))
    rec["learning_rate"] = lr = lr_at(cfg, step)
    rec.update(seed_step_fields(batch, group_returns, len(datums)))
    t2 = time.time()
    mismatch: dict[str, float] = {}
    if datums:
        masks = [np.asarray(s.sampled[1:], dtype=np.float32) for s, _ in segs]   # the tokens the policy sampled
        staleness = step - batch.version   # 0 in the synchronous loop: the figures are then numerics alone
        rec.update(await update(cfg, tc, datums, masks, ctx.rng, lr, staleness))
        mismatch = rec.pop("mismatch")
        log.info("sampler/trainer mismatch: %s", json.dumps(mismatch))
    else:   # the seed's words: nothing to train on (every group dropped or without variance)
        log.info("skipping step %d: no training transitions (%d of %d rollouts succeeded, %d groups without "
                 "reward variance)", step, rec["rollouts_succeeded"], rec["rollouts_total"], skipped)
        rec.update(skipped=True, train_skipped=True, fwdbwd_metrics={}, optim_metrics={})
    rec.setdefault("ref_logprobs_elapsed", 0.0)
    rec["train_elapsed"] = time.time() - t2
    timings = {"weight_sync_s": batch.weight_sync_s, "rollout_s": batch.rollout_s, "train_s": time.time() - t2,
               "sandbox_s": sum(t.timings.get("sandbox_s", 0) for t in trajs),
               "sampling_s": sum(t.timings.get("sample_s", 0) for t in trajs),
               "verifier_s": sum(t.timings.get("verifier_s", 0) for t in trajs)}
    rec["timings"] = timings | rec.pop("timings", {})
    rec["metrics"] = {**{f"fwdbwd/{k}": v for k, v in rec.get("fwdbwd_metrics", {}).items()},
                      **{f"optim/{k}": v for k, v in rec.get("optim_metrics", {}).items()}, **mismatch}
    write_step_result(run_dir, step, rec)
    return rec


def seed_step_fields(batch: Batch, group_returns: list[list[float]], n_datums: int) -> dict[str, Any]:
    """step_result.json's fields under the seed's names (docs/seed-mapping.md), beside ours. One group per
    step (the seed's shape): task_name, group_mean and group_std are that group's; else lists per group."""
    ok = [t for g in batch.groups for t in g if t is not None]
    one = len(batch.tasks) == 1
    means = [float(np.mean(r)) if r else 0.0 for r in group_returns]
    stds = [float(np.std(r)) if r else 0.0 for r in group_returns]
    return {"task_name": batch.tasks[0].name if one else [t.name for t in batch.tasks],
            "rollouts_total": sum(len(g) for g in batch.groups), "rollouts_succeeded": len(ok),
            "rollouts_failed": sum(len(g) for g in batch.groups) - len(ok),
            "group_mean": (means[0] if means else 0.0) if one else means,
            "group_std": (stds[0] if stds else 0.0) if one else stds,
            "total_transitions": n_datums, "rollout_elapsed": batch.rollout_s}


def pick_tasks(cfg: RLConfig, ctx, state: RLState) -> list:
    """The synchronous loop's next tasks: a fresh shuffle (the run's rng) whenever the order runs short."""
    if len(state.order) < cfg.groups_per_step:
        idx = list(range(len(ctx.tasks)))
        ctx.rng.shuffle(idx)
        state.order.extend(idx)
    return [ctx.tasks[state.order.pop(0)] for _ in range(cfg.groups_per_step)]


async def rl_step(cfg: RLConfig, ctx, tc, step: int, run_dir: Path, state: RLState, eos: int,
                  update: Update = single_update) -> dict:
    """One synchronous step (--max-steps-off-policy 0): sample with the current weights (those the last step
    published, else saved now), train, then publish the new weights to the sampler (the next step's)."""
    t0 = time.time()
    sampler = state.published or await tc.save_weights_and_get_sampling_client()
    sync_s = time.time() - t0
    pol = TinkerPolicy(sampler, [eos], temperature=cfg.common.temperature)
    batch = await sample_batch(cfg, ctx, step, pol, pick_tasks(cfg, ctx, state), step)
    batch.weight_sync_s = sync_s
    rec = await train_batch(cfg, ctx, tc, step, run_dir, state, batch, update)
    if rec.get("skipped"):   # no update: the weights (and the sampler of the next step) stay as they were
        state.published = sampler
        rec["published_sampling_client"] = sampler_id(sampler)
        write_step_result(run_dir, step, rec)
        return rec
    t1 = time.time()
    state.published = await tc.save_weights_and_get_sampling_client()
    rec["timings"]["weight_sync_s"] += time.time() - t1
    rec["published_sampling_client"] = sampler_id(state.published)
    log.info("Weights published to sampler: %s", rec["published_sampling_client"])
    write_step_result(run_dir, step, rec)
    return rec


def sampler_id(sampler) -> str | None:
    """A sampling client's id: its checkpoint path, else its sampling session."""
    return getattr(sampler, "model_path", None) or getattr(sampler, "_sampling_session_id", None)


def tasks_for_step(cfg: RLConfig, n_tasks: int, step: int) -> list[int]:
    """The async loop's tasks of a step: a function of the seed and the step alone (the sampler runs
    ahead of the trainer, so no rng shared with it may decide them): one seeded shuffle per epoch."""
    out = []
    for g in range(cfg.groups_per_step):
        pos = step * cfg.groups_per_step + g
        perm = list(range(n_tasks))
        random.Random(cfg.common.seed * 7919 + pos // n_tasks).shuffle(perm)
        out.append(perm[pos % n_tasks])
    return out


def sampler_version(cfg: RLConfig, step: int) -> int:
    """The weights (optimizer steps done) that the off-policy loop samples step ``step``'s batch with: K behind."""
    return max(0, step - cfg.max_steps_off_policy)


def keeps_sampler(cfg: RLConfig, version: int) -> bool:
    """Whether a --resume from a later checkpoint samples a batch with the weights of ``version``: the checkpoint
    after s steps (s a multiple of --save-every, before the last step) resumes with the batches s .. s + K - 1
    sampled with versions s - K .. s - 1, which only a saved copy still has."""
    every, K = cfg.train.save_every, cfg.max_steps_off_policy
    return any((version + d) % every == 0 and version + d < cfg.train.num_steps for d in range(1, K + 1))


async def publish_weights(cfg: RLConfig, tc, run_dir: Path, state: RLState, version: int):
    """The sampling client of the training client's weights, ``version`` optimizer steps in: saved under a name
    (tinker://, into state.json at the next checkpoint) when a resume will need them (``keeps_sampler``), else a
    snapshot. Both serve the same weights; the run samples with the same kind of client whether it resumed or not."""
    if not keeps_sampler(cfg, version):
        return await tc.save_weights_and_get_sampling_client()
    path = (await tc.save_weights_for_sampler(f"{cfg.MODE}-{run_dir.name}-sampler{version:04d}")).path
    state.sampler_paths = {v: p for v, p in state.sampler_paths.items() if v >= version - cfg.max_steps_off_policy}
    state.sampler_paths[version] = path
    return await tc.create_sampling_client(path)


class OffPolicySampler:
    """--max-steps-off-policy K: starts sampling the batch of step j as soon as the weights K optimizer steps
    behind j are published, with those weights, so up to K + 1 batches are sampled at once (their rollouts share
    the --rollout-concurrency sandboxes) while the trainer works. Publishing new weights only adds the sampler
    that later batches start with: rollouts in flight keep theirs. ``older``: on --resume, the samplers of the
    versions before ``start`` that the first K batches use (state.json's saved sampler weights), so a resumed run
    samples what the uninterrupted one did."""

    def __init__(self, cfg: RLConfig, ctx, eos: int, start: int, sampler, version: int,
                 older: dict[int, Any] | None = None):
        self.cfg, self.ctx, self.eos = cfg, ctx, eos
        self.newest = (sampler, version)
        self.published: dict[int, Any] = {**(older or {}), version: sampler}
        self.changed = asyncio.Event()      # new weights were published
        self.launched = asyncio.Event()     # a batch started sampling
        self.batches: dict[int, asyncio.Task[Batch]] = {}
        self.inflight = 0                   # batches being sampled now
        self.idle_s = 0.0                   # time with no batch sampling, not yet reported
        self.idle_since: float | None = None
        self.task = asyncio.create_task(self._run(start))

    def publish(self, sampler, version: int) -> None:
        self.newest = (sampler, version)
        self.published[version] = sampler
        self.changed.set()

    async def _run(self, start: int) -> None:
        for j in range(start, self.cfg.train.num_steps):
            want = sampler_version(self.cfg, j)
            while self.newest[1] < want:
                self.changed.clear()
                await self.changed.wait()
            version = want if want in self.published else self.newest[1]
            if version != want:   # a resume from a state.json without that version's saved weights
                log.warning("step %d: the sampler weights of version %d were not saved; sampling with version %d "
                            "(this resumed run differs from the uninterrupted one)", j, want, version)
            for v in [v for v in self.published if v < version]:
                del self.published[v]
            self.batches[j] = asyncio.create_task(self._sample(j, self.published[version], version))
            self.launched.set()

    async def _sample(self, j: int, sampler, version: int) -> Batch:
        if self.inflight == 0 and self.idle_since is not None:
            self.idle_s += time.time() - self.idle_since
        self.inflight += 1
        try:
            pol = TinkerPolicy(sampler, [self.eos], temperature=self.cfg.common.temperature)
            tasks = [self.ctx.tasks[i] for i in tasks_for_step(self.cfg, len(self.ctx.tasks), j)]
            return await sample_batch(self.cfg, self.ctx, j, pol, tasks, version)
        finally:
            self.inflight -= 1
            if self.inflight == 0:
                self.idle_since = time.time()

    def take_idle(self) -> float:
        """Seconds without any batch sampling since the last call (the rollout side's idle time)."""
        now = time.time()
        if self.inflight == 0 and self.idle_since is not None:
            self.idle_s += now - self.idle_since
            self.idle_since = now
        idle, self.idle_s = self.idle_s, 0.0
        return idle

    async def next(self, step: int) -> Batch:
        """The batch of ``step`` once sampled (the sampler's exception if it failed)."""
        while step not in self.batches:
            if self.task.done():
                self.task.result()   # raises the sampler's exception
                raise RuntimeError(f"the off-policy sampler stopped before step {step}")
            self.launched.clear()
            waiter = asyncio.ensure_future(self.launched.wait())
            await asyncio.wait({waiter, self.task}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        return await self.batches.pop(step)

    async def aclose(self) -> None:
        for t in [self.task, *self.batches.values()]:
            t.cancel()
        for t in [self.task, *self.batches.values()]:
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing: nothing is waiting for them
                pass


async def off_policy_step(cfg: RLConfig, ctx, tc, step: int, run_dir: Path, state: RLState,
                          sampler: OffPolicySampler, update: Update = single_update) -> dict:
    """One async step: the next sampled batch (waiting for it is the trainer's idle time), groups more
    than K steps stale dropped, the update, then the new weights published to the sampler."""
    t0 = time.time()
    batch = await sampler.next(step)
    trainer_wait_s = time.time() - t0
    staleness = step - batch.version
    stale = staleness > cfg.max_steps_off_policy
    if stale:   # cannot happen while the sampler keeps its bound; counted, never trained on
        log.warning("step %d: batch sampled %d steps back (> K=%d): dropped", step, staleness,
                    cfg.max_steps_off_policy)
    groups_stale = len(batch.groups) if stale else 0
    used = Batch(batch.step, batch.tasks, [] if stale else batch.groups, batch.failures, batch.version,
                 batch.rollout_s)
    extra = {"sampler_version": batch.version, "groups_stale_dropped": groups_stale,
             "group_staleness": [staleness] * len(used.groups),
             "timings": {"trainer_wait_s": trainer_wait_s}}
    rec = await train_batch(cfg, ctx, tc, step, run_dir, state, used, update, extra)
    t1 = time.time()
    sampler.publish(await publish_weights(cfg, tc, run_dir, state, step + 1), step + 1)
    rec["timings"]["weight_sync_s"] = time.time() - t1
    rec["published_sampling_client"] = sampler_id(sampler.newest[0])
    log.info("Weights published to sampler: %s", rec["published_sampling_client"])
    rec["timings"]["rollout_idle_s"] = sampler.take_idle()
    write_step_result(run_dir, step, rec)
    return rec
