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

from .cli_args import agent_argument
from .runs import endpoints, install_signal_handlers, new_run_dir, services, setup_client_log, write_exit_status

log = logging.getLogger("cookbook")


def common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--dataset", default="micro", help="dataset: a name under datasets/ or a path (default: micro)")
    ap.add_argument("--split", default=None, help="split of the dataset (default: train for training, all for rollout)")
    ap.add_argument("--task-id", action="append", default=None, help="run only this task (repeatable)")
    ap.add_argument("--run-dir", default=None, help="run directory (default: runs/<mode>-<timestamp>)")
    ap.add_argument("--name", default=None, help="results/<name>/ inside the run dir (default: the mode)")
    ap.add_argument("--sandbox", default="manager", choices=["manager", "host"],
                    help="manager: isolated sandboxes (default); host: dev only, NO isolation")
    ap.add_argument("--sandbox-backend", default=None, choices=["local", "docker"],
                    help="the sandbox manager's backend (default: config/harbor.yaml sandbox.backend, else local); "
                         "docker runs public Harbor tasks (repo inside their image) in containers")
    ap.add_argument("--preset", default=None, choices=["quickstart"], help="settings for the embedded tiny default")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--rollout-concurrency", type=int, default=None,
                    help="sandboxes at once (default 16; 64 with --preset quickstart, whose sandboxes are tiny)")
    ap.add_argument("--no-services", action="store_true", help="do not start the backend / sandbox manager")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="run.sh", description="Rollouts and RL/SFT recipes for SWE agents on the tinker SDK")
    sub = ap.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("rollout", help="evaluate the agent on tasks (no training)")
    common(r)
    r.add_argument("--n", type=int, default=1, help="attempts per task")
    r.add_argument("--model-path", default=None, help="tinker:// sampler/training checkpoint to sample from (default: base model)")
    agent_argument(r)
    from . import train

    train.add_arguments(sub, common)
    return ap


async def rollout_main(args, run_dir: Path) -> int:
    import tinker

    from .agent.agent import TinkerPolicy
    from .agent.chat_format import eos_id
    from .rollout import Failures
    from .setup import load_tasks, make_context

    ep = endpoints(need_sandbox=args.sandbox == "manager")
    tasks = load_tasks(args.dataset, args.split, args.task_id)
    ctx = await make_context(ep, tasks, args.sandbox, args.preset, args.rollout_concurrency, args.seed, agent=args.agent)
    sc = tinker.ServiceClient(base_url=ep.backend_url, api_key=ep.api_key)
    if args.model_path:
        sampler = await sc.create_sampling_client(model_path=args.model_path)
    else:
        sampler = await sc.create_sampling_client(base_model=ep.model)
    eos = eos_id(ctx.tokenizer)
    policy = TinkerPolicy(sampler, [eos], temperature=args.temperature)
    items = [(t, policy) for t in tasks for _ in range(args.n)]
    from tqdm import tqdm

    bar = tqdm(total=len(items), desc="rollouts", unit="rollout")
    failures = Failures()
    t0 = time.time()
    try:
        trajs = await ctx.rollouts.run_many(items, failures, on_done=lambda: bar.update(1))
    finally:
        await ctx.rollouts.aclose()
    bar.close()
    name = args.name or "rollout"
    res_dir = run_dir / "results" / name
    summaries = []
    single = len(items) == 1  # one rollout: results/<name>/{summary,trajectory}.* directly
    for i, ((task, _), tr) in enumerate(zip(items, trajs)):
        sub = res_dir if single else res_dir / f"{task.slug}-{i:03d}"
        if tr is None:
            summaries.append({"task_id": task.name, "reward": None, "episode_done": False, "error": "infrastructure failure"})
            continue
        sub.mkdir(parents=True, exist_ok=True)
        tr.save(sub)
        s = tr.summary()
        (sub / "summary.json").write_text(json.dumps(s, indent=1))
        summaries.append(s)
        log.info("rollout %s: reward=%s turns=%d stop=%s", task.name, tr.reward, len(tr.turns), tr.stop_reason)
    done = [s for s in summaries if s.get("reward") is not None]
    overall = {"mode": "rollout", "model": ep.model, "model_path": args.model_path, "n_rollouts": len(items),
               "mean_reward": sum(s["reward"] for s in done) / len(done) if done else None,
               "failures": failures.to_dict(), "time_seconds": time.time() - t0, "rollouts": summaries}
    res_dir.mkdir(parents=True, exist_ok=True)
    (res_dir / "result.json").write_text(json.dumps(overall, indent=1))
    print(f"mean reward {overall['mean_reward']} over {len(done)}/{len(items)} rollouts; results in {res_dir}")
    return 0 if len(done) == len(items) else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.sandbox_backend:   # read by cookbook.runs.endpoints() wherever endpoints are built
        os.environ["LTS_SANDBOX_BACKEND"] = args.sandbox_backend
    if args.rollout_concurrency is None:
        args.rollout_concurrency = 64 if args.preset == "quickstart" else 16
    from . import train

    resume_dir = getattr(args, "resume", None)
    run_dir = new_run_dir(args.mode, resume_dir or args.run_dir)
    setup_client_log(run_dir)
    install_signal_handlers()
    print(f"Run directory: {run_dir}", flush=True)
    log.info("Results dir: %s", run_dir)
    log.info("command: %s", " ".join(sys.argv))
    started = time.time()
    code = 1
    try:
        ep = endpoints(need_sandbox=args.sandbox == "manager")
        ctx = services(run_dir, ep, need_sandbox=args.sandbox == "manager") if not args.no_services else nullcontext([])
        with ctx as started_services:
            if started_services:
                log.info("started for this run: %s", ", ".join(started_services))
            if args.mode == "rollout":
                code = asyncio.run(rollout_main(args, run_dir))
            else:
                code = train.run(args, run_dir)
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
        write_exit_status(run_dir, code, started, mode=args.mode)
    return code


if __name__ == "__main__":
    sys.exit(main())
