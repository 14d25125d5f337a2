"""`bash run.sh MODE ...` lands here: python -m cookbook.cli {rollout,sft,grpo,ppo,ppo-kl} --help."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path

import tinker
from tqdm import tqdm

from services.common.config import load_config
from services.common.paths import REPO_ROOT
from services.common.renderers.qwen3 import eos_id

from . import train
from .agent.agent import TinkerPolicy
from .config import CONFIGS, HELP, AnyConfig, RolloutConfig, add_flags, build
from .context import context_of
from .evaluation import score
from .recorder import write_exit_status
from .rollout import Failures
from .runs import endpoints, install_signal_handlers, new_run_dir, services, setup_client_log
from .tasks import configured_task_id, write_task_manifest

log = logging.getLogger("cookbook")


def build_parser() -> argparse.ArgumentParser:
    """One subcommand per config class (cookbook/config.py): each lists only its own fields' flags."""
    ap = argparse.ArgumentParser(prog="run.sh",
                                 description="Rollouts and RL/SFT recipes for SWE agents on the tinker SDK")
    sub = ap.add_subparsers(dest="mode", required=True)
    for mode, cls in CONFIGS.items():
        add_flags(sub.add_parser(mode, help=HELP[mode], description=HELP[mode] + " (docs/recipes.md)"), cls)
    return ap


def parse(argv: list[str] | None = None) -> AnyConfig:
    """The typed config of ``run.sh MODE FLAGS...``. Without --task-id, --dataset and --preset, the task
    configure.py --task-id recorded (config/harbor.yaml tasks.task_id), as the seed's run.sh."""
    given = vars(build_parser().parse_args(argv))
    if not ({"task_id", "dataset", "preset"} & set(given)) and configured_task_id():
        given["task_id"] = [configured_task_id()]
    return build(given.pop("mode"), given)


def refuse_training_when_rollout_only(cfg: AnyConfig) -> None:
    if not isinstance(cfg, RolloutConfig) and (load_config("harbor").get("run") or {}).get("rollout_only"):
        raise SystemExit(f"run.sh {cfg.MODE}: this configuration is rollout-only (configure.py --rollout-only: "
                         "config/harbor.yaml run.rollout_only); re-run configure.py without it to train")


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
    eos = eos_id(ctx.tokenizer)
    policy = TinkerPolicy(sampler, [eos], temperature=c.temperature)
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
    write_task_manifest(res_dir, tasks, c.dataset, c.split, c.task_id, c.seed)
    summaries = []
    single = len(items) == 1  # one rollout: results/<name>/{summary,trajectory}.* directly
    for i, ((task, _), tr) in enumerate(zip(items, trajs)):
        sub = res_dir if single else res_dir / f"{task.slug}-{i:03d}"
        if tr is None:
            summaries.append({"task_id": task.name, "reward": None, "episode_done": False,
                              "error": "infrastructure failure"})
            continue
        sub.mkdir(parents=True, exist_ok=True)
        tr.save(sub)
        s = {**tr.summary(), **seed_summary(tr, task, i, run_dir, c)}
        (sub / "summary.json").write_text(json.dumps(s, indent=1))
        summaries.append(s)
        log.info("rollout %s: reward=%s turns=%d stop=%s", task.name, tr.reward, len(tr.turns), tr.stop_reason)
    done = [s for s in summaries if s.get("reward") is not None]
    scored = score([t for t, _ in items], trajs)   # pass rate (reward 1) overall and per task
    overall = {"mode": "rollout", "model": ep.model, "model_path": cfg.model_path, "split": c.split,
               "n_rollouts": len(items), "mean_reward": sum(s["reward"] for s in done) / len(done) if done else None,
               "pass_rate": scored.pass_rate, "pass_rate_by_task": scored.by_task,
               "failures": failures.to_dict(), "time_seconds": time.time() - t0, "rollouts": summaries}
    res_dir.mkdir(parents=True, exist_ok=True)
    (res_dir / "result.json").write_text(json.dumps(overall, indent=1))
    print(f"mean reward {overall['mean_reward']} over {len(done)}/{len(items)} rollouts; results in {res_dir}")
    return 0 if len(done) == len(items) else 1


def seed_summary(tr, task, i: int, run_dir: Path, c) -> dict:
    """summary.json's fields under the seed's names (docs/seed-mapping.md), beside ours."""
    return {"mode": "rollout", "runtime_id": run_dir.name, "runtime_type": "local", "runtime_ready": True,
            "runtime_status": "completed", "env_id": f"{task.slug}-{i:03d}", "task_name": task.name,
            "dataset": c.dataset, "split": c.split, "bench_name": "SWE-bench" if task.swe else "harbor",
            "sample_tokens": len(tr.turns[0].sampled_tokens) if tr.turns else 0}


def server_job_line(run_dir: Path, ep, started: list[str]) -> str:
    """The seed's ``TINKER_SERVER_JOB {...}`` marker: which backend this run talks to and where its log is."""
    if "backend" in started:
        log_dir = run_dir
    else:
        log_file = (load_config("runtime").get("backend") or {}).get("log_file", "state/logs/backend.log")
        p = Path(log_file)
        log_dir = (p if p.is_absolute() else REPO_ROOT / p).parent
    return "TINKER_SERVER_JOB " + json.dumps({"job_id": run_dir.name, "platform": "local",
                                               "base_url": ep.backend_url, "log_dir": str(log_dir)})


def main(argv: list[str] | None = None) -> int:
    cfg = parse(argv)
    refuse_training_when_rollout_only(cfg)
    c = cfg.common
    if c.sandbox_backend:   # read by cookbook.runs.endpoints() wherever endpoints are built
        os.environ["LTS_SANDBOX_BACKEND"] = c.sandbox_backend
    resume_dir = None if isinstance(cfg, RolloutConfig) else cfg.train.resume
    run_dir = new_run_dir(cfg.MODE, resume_dir or c.run_dir)
    setup_client_log(run_dir)
    install_signal_handlers()
    print(f"Run directory: {run_dir}", flush=True)
    log.info("Results dir: %s", run_dir / "results" / (c.name or cfg.MODE))
    log.info("command: %s", " ".join(sys.argv))
    started = time.time()
    code = 1
    try:
        ep = endpoints(need_sandbox=c.sandbox == "manager")
        ctx = services(run_dir, ep, need_sandbox=c.sandbox == "manager") if not c.no_services else nullcontext([])
        with ctx as started_services:
            if started_services:
                log.info("started for this run: %s", ", ".join(started_services))
            log.info("%s", server_job_line(run_dir, ep, list(started_services)))
            if isinstance(cfg, RolloutConfig):
                code = asyncio.run(rollout_main(cfg, run_dir))
            else:
                code = train.run(cfg, run_dir)
    except KeyboardInterrupt:
        log.warning("interrupted")
        print("interrupted; services started by this run were stopped", file=sys.stderr)
        code = 130
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 2
        if not isinstance(e.code, int):
            print(f"error: {e.code}", file=sys.stderr)
            log.error("%s", e.code)
    except Exception:  # noqa: BLE001
        log.error("run failed:\n%s", traceback.format_exc())
        print(traceback.format_exc(), file=sys.stderr)
        code = 1
    finally:
        write_exit_status(run_dir, code, started, mode=cfg.MODE)
    return code


if __name__ == "__main__":
    sys.exit(main())
