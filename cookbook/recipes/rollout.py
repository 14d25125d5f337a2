"""rollout: evaluate the agent on tasks (no training): ``--n`` attempts a task with the base model or a checkpoint;
results/<name>/result.json (mean reward, pass rate per task, failures) and one summary + trajectory per rollout."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import tinker
from tqdm import tqdm

from services.common.renderers.qwen3 import eos_id

from ..agent.agent import TinkerPolicy
from ..config import AGENT_HELP, Common, flag
from ..context import context_of
from ..evaluation import score
from ..recorder import write_rollout_results, write_task_manifest
from ..rollout import Failures
from ..runs import endpoints
from ..tasks import task_manifest
from .base import RecipeSpec

log = logging.getLogger("cookbook")


@dataclass
class RolloutConfig:
    MODE: ClassVar[str] = "rollout"
    common: Common = field(default_factory=Common)
    agent: str = flag(AGENT_HELP, "builtin", choices=["builtin", "mini-swe-agent"])
    n: int = flag("attempts per task", 1)
    model_path: str | None = flag("tinker:// sampler/training checkpoint to sample from (default: base model)")


async def rollout_main(cfg: RolloutConfig, run_dir: Path) -> int:
    c = cfg.common
    ep = endpoints(need_sandbox=c.sandbox == "manager")
    ctx = await context_of(ep, c, training=False, agent=cfg.agent)
    tasks = ctx.tasks
    sc = tinker.ServiceClient(base_url=ep.backend_url, api_key=ep.api_key)
    if cfg.model_path:
        sampler = await sc.create_sampling_client(model_path=cfg.model_path)
    else:
        sampler = await sc.create_sampling_client(base_model=ep.model)
    policy = TinkerPolicy(sampler, [eos_id(ctx.tokenizer)], temperature=c.temperature)
    items = [(t, policy) for t in tasks for _ in range(cfg.n)]
    bar = tqdm(total=len(items), desc="rollouts", unit="rollout")
    failures = Failures()
    t0 = time.time()
    try:
        trajs = await ctx.rollouts.run_many(items, failures, on_done=lambda: bar.update(1))
    finally:
        await ctx.rollouts.aclose()
    bar.close()
    name = c.name or "rollout"
    res_dir = run_dir / "results" / name
    write_task_manifest(res_dir, task_manifest(tasks, c.dataset, c.split, c.task_id, c.seed))
    summaries = []
    for i, ((task, _), tr) in enumerate(zip(items, trajs)):
        if tr is None:
            summaries.append({"task_id": task.name, "reward": None, "episode_done": False,
                              "error": "infrastructure failure"})
            continue
        summaries.append({**tr.summary(), **seed_summary(tr, task, i, run_dir, c)})
        log.info("rollout %s: reward=%s turns=%d stop=%s", task.name, tr.reward, len(tr.turns), tr.stop_reason)
    done = [s for s in summaries if s.get("reward") is not None]
    scored = score([t for t, _ in items], trajs)   # pass rate (reward 1) overall and per task
    overall = {"mode": "rollout", "model": ep.model, "model_path": cfg.model_path, "split": c.split,
               "n_rollouts": len(items), "mean_reward": sum(s["reward"] for s in done) / len(done) if done else None,
               "pass_rate": scored.pass_rate, "pass_rate_by_task": scored.by_task,
               "failures": failures.to_dict(), "time_seconds": time.time() - t0, "rollouts": summaries}
    write_rollout_results(res_dir, [t for t, _ in items], trajs, summaries, overall)
    print(f"mean reward {overall['mean_reward']} over {len(done)}/{len(items)} rollouts; results in {res_dir}")
    return 0 if len(done) == len(items) else 1


def seed_summary(tr, task, i: int, run_dir: Path, c: Common) -> dict:
    """summary.json's fields under the seed's names (docs/seed-mapping.md), beside ours."""
    return {"mode": "rollout", "runtime_id": run_dir.name, "runtime_type": "local", "runtime_ready": True,
            "runtime_status": "completed", "env_id": f"{task.slug}-{i:03d}", "task_name": task.name,
            "dataset": c.dataset, "split": c.split, "bench_name": "SWE-bench" if task.swe else "harbor",
            "sample_tokens": len(tr.turns[0].sampled_tokens) if tr.turns else 0}


def main(cfg: RolloutConfig, run_dir: Path) -> int:
    return asyncio.run(rollout_main(cfg, run_dir))


SPEC = RecipeSpec("rollout", RolloutConfig, "evaluate the agent on tasks (no training)", main, trains=False)
