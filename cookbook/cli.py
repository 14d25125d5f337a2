"""`bash run.sh MODE ...` lands here: python -m cookbook.cli MODE --help, one MODE per registered recipe
(cookbook/recipes/__init__.py: rollout, sft, grpo, ppo, ppo-kl)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from services.common.config import load_config
from services.common.paths import REPO_ROOT

from .config import add_flags
from .recipes import RECIPES, config_of
from .recorder import write_exit_status
from .runs import endpoints, install_signal_handlers, new_run_dir, services, setup_client_log
from .tasks import configured_task_id

log = logging.getLogger("cookbook")


def build_parser() -> argparse.ArgumentParser:
    """One subcommand per registered recipe (cookbook/recipes/): each lists only its own config's flags."""
    ap = argparse.ArgumentParser(prog="run.sh",
                                 description="Rollouts and RL/SFT recipes for SWE agents on the tinker SDK")
    sub = ap.add_subparsers(dest="mode", required=True)
    for mode, spec in RECIPES.items():
        add_flags(sub.add_parser(mode, help=spec.help, description=spec.help + " (docs/recipes.md)"), spec.config)
    return ap


def parse(argv: list[str] | None = None) -> Any:
    """The typed config of ``run.sh MODE FLAGS...``. Without --task-id, --dataset and --preset, the task
    configure.py --task-id recorded (config/harbor.yaml tasks.task_id), as the seed's run.sh."""
    given = vars(build_parser().parse_args(argv))
    if not ({"task_id", "dataset", "preset"} & set(given)) and configured_task_id():
        given["task_id"] = [configured_task_id()]
    return config_of(given.pop("mode"), given)


def refuse_training_when_rollout_only(cfg: Any) -> None:
    if RECIPES[cfg.MODE].trains and (load_config("harbor").get("run") or {}).get("rollout_only"):
        raise SystemExit(f"run.sh {cfg.MODE}: this configuration is rollout-only (configure.py --rollout-only: "
                         "config/harbor.yaml run.rollout_only); re-run configure.py without it to train")


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
    resume_dir = cfg.train.resume if hasattr(cfg, "train") else None
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
            code = RECIPES[cfg.MODE].main(cfg, run_dir)
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
