"""Well-known locations inside a checkout. Everything a user touches lives under the repo
root unless a config file says otherwise (README "Ports, paths, keys").

The seed's task root (its ``$TASK``: "a fresh TASK directory keeps each example's configuration and results
separate") moves configs to ``$TASK/config/`` and runs to ``$TASK/runs/``: ``configure.py --task-root T``
writes ``T/config/``, and run.sh / serve.sh / every service started with ``TASK=T`` read it and write
``T/runs/``. ``$LTS_CONFIG_DIR`` / ``$LTS_RUNS_DIR`` still win; without any of them, the repo's own."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(os.environ.get("LTS_ROOT", Path(__file__).resolve().parents[2]))


def _task_root() -> Path | None:
    """``$TASK`` when it names a directory (the seed's task root), else None (the repo's config/ and runs/)."""
    t = os.environ.get("TASK")
    return Path(t).expanduser().resolve() if t and Path(t).expanduser().is_dir() else None


TASK_ROOT = _task_root()


def config_dir(task_root: Path | None = None) -> Path:
    """Where configs are read (and configure.py writes them): $LTS_CONFIG_DIR, else ``<task root>/config`` (the
    given one, else $TASK's), else the repo's config/. The one rule: services, run.sh, serve.sh, configure.py."""
    if os.environ.get("LTS_CONFIG_DIR"):
        return Path(os.environ["LTS_CONFIG_DIR"])
    return (task_root or TASK_ROOT or REPO_ROOT) / "config"


CONFIG_DIR = config_dir()
TEMPLATES_DIR = REPO_ROOT / "templates"
STATE_DIR = Path(os.environ.get("LTS_STATE_DIR", REPO_ROOT / "state"))  # services' persistent state
MODELS_DIR = Path(os.environ.get("LTS_MODELS_DIR", REPO_ROOT / "models"))  # locally created models
RUNS_DIR = Path(os.environ.get("LTS_RUNS_DIR", (TASK_ROOT or REPO_ROOT) / "runs"))
DATASETS_DIR = REPO_ROOT / "datasets"
HF_HOME = Path(os.environ.get("HF_HOME", REPO_ROOT / "hf-home"))

if __name__ == "__main__":   # run.sh / serve.sh: `python -m services.common.paths CONFIG_DIR`
    print(globals()[sys.argv[1]])
