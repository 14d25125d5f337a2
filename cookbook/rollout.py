"""Rollouts: one agent attempt per fresh sandbox, scored by the task's verifier.

``Rollouts.run_many`` runs many attempts concurrently (at most ``concurrency`` sandboxes at once).
A trajectory that fails for infrastructure reasons (the sandbox fails to start or to run a command,
the sampler answers 5xx or not at all) is retried in a fresh sandbox up to ``max_retries`` times;
each step's ``Failures`` counts them (docs/recipes.md "Failures"):
retries (attempts thrown away), infra (no result after the retries: the rollout is None and its
group is dropped), agent (scored, but the loop ended in timeout or with a model-caused error, e.g.
a 400 for a prompt over the context length: not retried, masked from training like a context
overflow), verifier (the verifier errored or timed out: scored 0 with a reason, not retried).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from services.common.config import load_config
from services.common.sandbox_api import Sandbox
from services.common.trajectory import Trajectory
from services.tasks.grading.bases import ImageRef
from services.tasks.grading.cleangrade import base_commit, extract_patch, grade_patch, patch_flags, with_flags
from services.tasks.grading.network import agent_network, with_network
from services.tasks.grading.verifier import VerifyResult, verify
from services.tasks.task import Task
from services.tasks.task_toml import grading_policy

from .agent import Budgets, Policy, SWEAgent
from .presets import PRESETS

log = logging.getLogger("cookbook.rollout")
SandboxFactory = Callable[[Path], Awaitable[Sandbox]]


@dataclass
class AgentConfig:
    """The agent's settings (config/harbor.yaml ``agent:``)."""

    tools: list[str] | None = None          # None = all tools
    compact_schemas: bool = False
    system_prompt: str | None = None
    budgets: Budgets = field(default_factory=Budgets)
    temperature: float = 1.0

    @classmethod
    def from_config(cls, cfg: dict[str, Any] | None) -> "AgentConfig":
        cfg = dict(cfg or {})
        budgets = Budgets.from_config(cfg.pop("budgets", None))
        known = {"tools", "compact_schemas", "system_prompt", "temperature"}
        unknown = set(cfg) - known
        if unknown:
            raise ValueError(f"unknown agent setting(s) {sorted(unknown)} in harbor.yaml agent:; "
                             f"known: {sorted(known)}")
        return cls(budgets=budgets, **cfg)


def agent_config(preset: str | None = None, budgets: dict[str, Any] | None = None) -> AgentConfig:
    """config/harbor.yaml ``agent:`` (the one source of truth) with the preset's agent over it (its budgets
    key by key), then the run's own budget flags (``budgets``: --max-turns, --max-tokens)."""
    cfg = dict(load_config("harbor").get("agent") or {})
    if preset:
        over = PRESETS[preset].agent
        cfg = {**cfg, **over, "budgets": {**(cfg.get("budgets") or {}), **over.get("budgets", {})}}
    if budgets:
        cfg["budgets"] = {**(cfg.get("budgets") or {}), **budgets}
    return AgentConfig.from_config(cfg)


def budget_flags(max_turns: int | None, max_tokens: int | None) -> dict[str, int]:
    """--max-turns / --max-tokens as agent budget overrides (the flags given only)."""
    for name, v in (("--max-turns", max_turns), ("--max-tokens", max_tokens)):
        if v is not None and v < 1:
            raise SystemExit(f"{name} must be >= 1, got {v}")
    return {k: v for k, v in (("max_turns", max_turns), ("max_output_tokens", max_tokens)) if v is not None}


def model_caused(traj: Trajectory) -> bool:
    """The loop ended on a 4xx from the sampler (other than timeout/conflict/rate limit): the model's
    request was invalid (e.g. prompt + max_tokens over the context length); a new sandbox won't help."""
    st = traj.error_status
    return st is not None and 400 <= st < 500 and st not in (408, 409, 429)


# While a rollout waits (on the sampler's queue, a long command, the verifier), its sandbox's lease is renewed this
# often: the sandbox manager reaps a sandbox idle for lifecycle.lease_s (300 s by default), and a model slower than
# that between two tool calls (a long decode on CPU, a busy GPU queue) lost the rollout as "sandbox expired".
KEEPALIVE_S = 60.0


async def keep_alive(sb: Any, every: float) -> None:
    """Renew ``sb``'s lease every ``every`` seconds until cancelled (a failed renewal is logged, not raised: the
    rollout's own next call reports a sandbox that is really gone)."""
    while True:
        await asyncio.sleep(every)
        try:
            await sb.heartbeat()
        except Exception as e:  # noqa: BLE001
            log.debug("sandbox heartbeat failed: %s", e)


@dataclass
class Failures:
    infra: int = 0
    agent: int = 0
    verifier: int = 0
    retries: int = 0
    hacks: dict[str, int] = field(default_factory=dict)  # hack:<kind> -> rollouts flagged

    def to_dict(self) -> dict[str, int]:
        return {**{k: v for k, v in self.__dict__.items() if k != "hacks"}, **dict(sorted(self.hacks.items()))}


# Tools that never change /workspace except through ``Sandbox.write_file`` (edit): with only these, the
# files an agent wrote determine its final workspace (run_test's pytest and bash could write anything).
WRITE_ONLY_TOOLS = frozenset({"edit", "read", "search", "find_file", "list_dir", "submit"})


class _WriteLog:
    """A rollout's sandbox, recording every file write in order (path, content digest): the base plus
    these writes replayed is the final workspace (in order: two paths may be one file through a
    symlink). ``dirty``: a write failed part-way, the file's content is unknown."""

    def __init__(self, sb: Sandbox):
        self._sb = sb
        self.writes: list[tuple[str, str]] = []
        self.dirty = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sb, name)

    async def write_file(self, path: str, content: str | bytes, *a: Any, **kw: Any) -> None:
        try:
            await self._sb.write_file(path, content, *a, **kw)
        except BaseException:
            self.dirty = True
            raise
        data = content.encode() if isinstance(content, str) else content
        self.writes.append((path, hashlib.sha256(data).hexdigest()))


class Rollouts:
    def __init__(self, factory: SandboxFactory, bases: dict[str, Path], tokenizer, agent_cfg: AgentConfig,
                 concurrency: int = 16, max_retries: int = 2, verifier_timeout: float | None = None,
                 reward_cache: bool = False, grading: str = "clean", black_box: Any = None,
                 agent_network: str = "none"):
        """``black_box``: an agent kind run inside the sandbox instead of the builtin SWEAgent (e.g.
        ``cookbook.modelservice.agent_runner.MiniSweAgent``): ``binds()`` for the sandbox and
        ``run(task, sandbox, policy) -> Trajectory``; its policy's model calls go through the ModelService.
        ``agent_network``: ``none`` (default: no network during RL, whatever the task says) or
        ``task`` (follow ``[agent] network_mode``); services.tasks.grading.network."""
        if grading not in ("clean", "in-place"):
            raise ValueError(f"grading must be 'clean' or 'in-place', got {grading!r}")
        self.grading = grading
        self.black_box = black_box
        self.agent_network = agent_network
        self.factory = factory
        self.bases = bases
        self.tok = tokenizer
        self.cfg = agent_cfg
        self.sem = asyncio.Semaphore(concurrency)
        self.max_retries = max_retries
        self.keepalive_s = KEEPALIVE_S
        self.verifier_timeout = verifier_timeout
        # Opt-in: the verifier's result for an identical change of the same task is reused (key: task
        # content hash + the patch bytes that are graded, or the write log of write-only agents). With
        # clean grading the key is exactly what is graded; in-place, only sound for agents without bash.
        self.reward_cache: dict[str, dict[str, Any]] | None = {} if reward_cache else None
        self.cache_hits = 0
        self._task_hashes: dict[str, str] = {}
        self._inflight: dict[str, asyncio.Future] = {}

    def _logged(self, sb: Sandbox) -> Sandbox:
        """With the reward cache and write-only tools, record the rollout's writes (its cache key)."""
        if (self.reward_cache is not None and self.black_box is None and self.cfg.tools is not None
                and set(self.cfg.tools) <= WRITE_ONLY_TOOLS):
            return _WriteLog(sb)
        return sb

    def _task_hash(self, task: Task) -> str:
        return self._task_hashes.get(task.name) or self._task_hashes.setdefault(task.name, task.content_hash())

    async def _cached(self, keys: list[str],
                      compute: Callable[[], Awaitable[VerifyResult]]) -> tuple[VerifyResult, bool]:
        """The result under any of ``keys`` (cached or being computed right now), else ``compute()``
        stored under all of them (errors are not cached)."""
        if self.reward_cache is None or not keys:
            return await compute(), False
        for key in keys:
            if key in self.reward_cache:
                self.cache_hits += 1
                return VerifyResult(**self.reward_cache[key]), True
        for key in keys:
            if key in self._inflight:  # the same change is being graded right now: share it
                res = await asyncio.shield(self._inflight[key])
                if not res.error:
                    self.cache_hits += 1
                    return VerifyResult(**res.to_dict()), True
        fut = asyncio.get_running_loop().create_future()
        for key in keys:
            self._inflight[key] = fut
        try:
            res = await compute()
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved
            raise
        else:
            if not res.error:
                for key in keys:
                    self.reward_cache[key] = res.to_dict()
            fut.set_result(res)
        finally:
            for key in keys:
                self._inflight.pop(key, None)
        return res, False

    async def _verify(self, sb: Sandbox, task: Task) -> tuple[VerifyResult, bool]:
        th = self._task_hash(task)
        write_key = (f"{th}:writes:" + hashlib.sha256(json.dumps(sb.writes).encode()).hexdigest()
                     if isinstance(sb, _WriteLog) and not sb.dirty else None)
        if write_key and self.reward_cache is not None and write_key in self.reward_cache:
            self.cache_hits += 1  # write-only tools: base + writes is the change; nothing to run in the sandbox
            return VerifyResult(**self.reward_cache[write_key]), True
        base = self.bases[task.name]
        ex = await extract_patch(sb, base_commit(base if isinstance(base, ImageRef) else Path(base)))
        if ex.error:
            return VerifyResult(0.0, error="PatchExtractError", reason=ex.error), False
        outside = {"hack:outside-workspace": ex.outside} if ex.outside else {}
        key = f"{th}:patch:{ex.sha256}:" + hashlib.sha256(json.dumps(ex.outside).encode()).hexdigest()
        keys = [k for k in (write_key, key) if k]
        if self.grading == "in-place":
            async def compute() -> VerifyResult:
                res = await verify(sb, task, timeout=self.verifier_timeout)
                return with_flags(res, {**outside, **patch_flags(task, base, ex.patch)},
                                  grading_policy(task.config.metadata)[1])
        else:
            async def compute() -> VerifyResult:
                return await grade_patch(task, base, self.factory, ex.patch, timeout=self.verifier_timeout,
                                         flags=outside)
        return await self._cached(keys, compute)

    def agent(self, policy: Policy) -> SWEAgent:
        kw: dict[str, Any] = {}
        if self.cfg.system_prompt:
            kw["system_prompt"] = self.cfg.system_prompt
        return SWEAgent(policy, self.tok, self.cfg.budgets, tools=self.cfg.tools,
                        compact_schemas=self.cfg.compact_schemas, **kw)

    async def run_one(self, task: Task, policy: Policy, failures: Failures | None = None) -> Trajectory | None:
        """One scored trajectory, or None if infrastructure kept failing."""
        failures = failures or Failures()
        for attempt in range(self.max_retries + 1):
            async with self.sem:
                t0 = time.time()
                sb = None
                keep: asyncio.Task | None = None
                try:
                    base = with_network(self.bases[task.name], agent_network(task, self.agent_network))
                    if self.black_box is not None:
                        sb = await self.factory(base, binds=self.black_box.binds())
                    else:
                        sb = self._logged(await self.factory(base))
                    if hasattr(sb, "heartbeat"):
                        keep = asyncio.create_task(keep_alive(sb, self.keepalive_s))
                    ts = time.time()
                    if self.black_box is not None:
                        traj = await self.black_box.run(task, sb, policy)
                    else:
                        traj = await self.agent(policy).run(task.instruction, sb, task_id=task.name)
                    traj.timings["sandbox_s"] = ts - t0
                    infra_error = traj.stop_reason == "error" and not model_caused(traj)
                    if infra_error and attempt < self.max_retries:
                        failures.retries += 1
                        log.warning("rollout of %s failed (%s); retrying in a fresh sandbox", task.name, traj.error)
                        continue
                    if infra_error:  # the last attempt failed too
                        raise RuntimeError(traj.error)
                    if traj.stop_reason == "error":  # model-caused: kept out of training like a context overflow
                        traj.masked = self.cfg.budgets.mask_overflow
                    tv = time.time()
                    res, cached = await self._verify(sb, task)
                    if res.infra:   # the verifier could not reach what it needed: never a reward
                        if attempt < self.max_retries:
                            failures.retries += 1
                            log.warning("rollout of %s: verifier infrastructure failure (%s); retrying", task.name,
                                        res.reason)
                            continue
                        raise RuntimeError(res.reason)
                    traj.timings["verifier_s"] = time.time() - tv
                    traj.reward = res.reward
                    traj.verifier = {**res.to_dict(), "cached": cached}
                    if traj.stop_reason in ("error", "timeout"):
                        failures.agent += 1
                    if res.error:
                        failures.verifier += 1
                    for flag in res.flags:
                        failures.hacks[flag] = failures.hacks.get(flag, 0) + 1
                    traj.timings["total_s"] = time.time() - t0
                    log.info("Rollout done: task=%s reward=%s turns=%d stop=%s (%.1fs)", task.name, traj.reward,
                             len(traj.turns), traj.stop_reason, traj.timings["total_s"])
                    return traj
                except Exception as e:  # noqa: BLE001  (sandbox creation / transport failure)
                    failures.retries += int(attempt < self.max_retries)
                    log.warning("rollout of %s: infrastructure error %s: %s (attempt %d)", task.name,
                                type(e).__name__, e, attempt + 1)
                finally:
                    if keep is not None:
                        keep.cancel()
                    if sb is not None:
                        try:
                            await sb.close()
                        except Exception:  # noqa: BLE001
                            pass
        failures.infra += 1
        return None

    async def run_many(self, items: list[tuple[Task, Policy]], failures: Failures | None = None,
                       on_done: Callable[[], None] | None = None) -> list[Trajectory | None]:
        async def one(t: Task, p: Policy):
            r = await self.run_one(t, p, failures)
            if on_done:
                on_done()
            return r

        return await asyncio.gather(*(one(t, p) for t, p in items))

    async def aclose(self) -> None:
        """Stop what the agent kind started (the in-process ModelService)."""
        if self.black_box is not None:
            await self.black_box.aclose()
