"""Harbor evaluates a checkpoint: ``bash run.sh eval MODEL`` runs Harbor's own runner with an
off-the-shelf Harbor agent that speaks OpenAI (``terminus-2``: it runs in Harbor's process and drives a
tmux session in the task's sandbox, so the sandbox needs no network) against the backend's
OpenAI-compatible endpoint (``<backend>/oai/api/v1``, docs/backend.md), on our sandboxes
(``-e services.tasks.harbor_env:LtsSandboxEnvironment``); rewards come from the tasks' own verifiers.

    bash run.sh eval tinker://<run>/sampler_weights/<name> [--tasks datasets/swebench-sample] [--max-turns 20]
    bash run.sh eval runs/grpo-20261201-101500          # a run's final checkpoint; results go beside the run

Needs the backend (``serve.sh backend``), the sandbox manager with its docker backend, Harbor
(``bash setup.sh harbor``) and the base image with tmux (``bash setup.sh docker``). Writes
``<out>/harbor/`` (Harbor's job directory) and ``<out>/eval.json`` (model, agent, per-task rewards, mean).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from cookbook.runs import REPO_ROOT, endpoints

HARBOR = REPO_ROOT / ".venv-harbor" / "bin" / "harbor"


def resolve_model(spec: str) -> tuple[str, Path | None]:
    """(model name for /oai, the run directory it came from): a tinker:// path, a base model id, or a run
    directory (its checkpoint.json, else state.json)."""
    d = Path(spec)
    if d.is_dir():
        for name, key in (("checkpoint.json", "path"), ("state.json", "checkpoint")):
            f = d / name
            if f.exists() and json.loads(f.read_text()).get(key):
                return str(json.loads(f.read_text())[key]), d
        raise SystemExit(f"run.sh eval: {spec} is a directory without a saved checkpoint (checkpoint.json or "
                         "state.json)")
    return spec, None


def harbor_command(tasks: Path, model: str, oai_url: str, jobs: Path, agent: str, max_turns: int,
                   n_concurrent: int) -> list[str]:
    return [str(HARBOR), "run", "-p", str(tasks), "-a", agent, "-m", f"openai/{model}",
            "--ak", f"api_base={oai_url}", "--ak", f"max_turns={max_turns}", "--ak", "suppress_max_turns_warning=true",
            "-n", str(n_concurrent), "-o", str(jobs), "-e", "services.tasks.harbor_env:LtsSandboxEnvironment", "-y"]


def collect(jobs: Path) -> dict:
    trials = []
    for res in sorted(jobs.glob("*/*/result.json")):
        data = json.loads(res.read_text())
        rewards = (data.get("verifier_result") or {}).get("rewards") or {}
        usage = data.get("agent_result") or {}
        trials.append({"task": data.get("task_name"), "trial": data.get("trial_name"),
                       "reward": rewards.get("reward"), "exception": (data.get("exception_info") or {}).get(
                           "exception_type") if data.get("exception_info") else None,
                       "input_tokens": usage.get("n_input_tokens"), "output_tokens": usage.get("n_output_tokens"),
                       "dir": str(res.parent)})
    scored = [t["reward"] for t in trials if t["reward"] is not None]
    return {"trials": trials, "n_trials": len(trials), "n_scored": len(scored),
            "mean_reward": sum(scored) / len(scored) if scored else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="run.sh eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="tinker://<run>/sampler_weights/<name> (or .../weights/<name>), a base model id, "
                                  "or a run directory")
    ap.add_argument("--tasks", default=str(REPO_ROOT / "datasets" / "swebench-sample"),
                    help="a Harbor task directory or a directory of tasks (default: datasets/swebench-sample)")
    ap.add_argument("--agent", default="terminus-2", help="a Harbor agent that runs in Harbor's process and "
                    "speaks OpenAI through litellm (default: terminus-2)")
    ap.add_argument("--max-turns", type=int, default=20)
    ap.add_argument("--n-concurrent", type=int, default=1)
    ap.add_argument("--out", help="output directory (default: <run dir>/eval-<time>, or runs/eval-<time>)")
    a = ap.parse_args(argv)
    if not HARBOR.exists():
        raise SystemExit("run.sh eval: Harbor is not installed: run `bash setup.sh harbor`")
    model, run_dir = resolve_model(a.model)
    env_given = all(os.environ.get(k) for k in ("TINKER_BASE_URL", "TINKER_API_KEY", "LTS_SANDBOX_URL",
                                                 "LTS_SANDBOX_KEY"))
    ep = None if env_given else endpoints(need_sandbox=True)   # config/runtime.yaml + config/harbor.yaml

    def pick(var: str, attr: str) -> str:
        return os.environ.get(var) or (str(getattr(ep, attr) or "") if ep is not None else "")

    backend, api_key = pick("TINKER_BASE_URL", "backend_url"), pick("TINKER_API_KEY", "api_key")
    sandbox_url, sandbox_key = pick("LTS_SANDBOX_URL", "sandbox_url"), pick("LTS_SANDBOX_KEY", "sandbox_key")
    if not sandbox_url:
        raise SystemExit("run.sh eval: no sandbox manager URL (config/harbor.yaml sandbox.base_url or LTS_SANDBOX_URL)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(a.out) if a.out else (run_dir / f"eval-{stamp}" if run_dir else REPO_ROOT / "runs" / f"eval-{stamp}")
    out.mkdir(parents=True, exist_ok=True)
    print(f"Run directory: {out}", flush=True)
    oai_url = backend.rstrip("/") + "/oai/api/v1"
    cmd = harbor_command(Path(a.tasks), model, oai_url, out / "harbor", a.agent, a.max_turns, a.n_concurrent)
    env = {**os.environ, "OPENAI_API_KEY": api_key, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "LTS_SANDBOX_URL": sandbox_url, "LTS_SANDBOX_KEY": sandbox_key,
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    with open(out / "harbor.log", "w") as log:
        rc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    summary = {"model": model, "agent": a.agent, "tasks": str(a.tasks), "base_url": oai_url, "harbor_exit": rc,
               **collect(out / "harbor")}
    (out / "eval.json").write_text(json.dumps(summary, indent=1))
    for t in summary["trials"]:
        print(f"{t['task']}: reward {t['reward']}" + (f" ({t['exception']})" if t["exception"] else ""))
    print(f"mean reward {summary['mean_reward']} over {summary['n_scored']} scored trials; {out / 'eval.json'}")
    if rc != 0:
        print(f"run.sh eval: harbor exited {rc}; see {out / 'harbor.log'}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
