"""Well-known locations inside a checkout. Everything a user touches lives under the repo
root unless a config file says otherwise (README "Ports, paths, keys")."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(os.environ.get("LTS_ROOT", Path(__file__).resolve().parents[2]))
CONFIG_DIR = Path(os.environ.get("LTS_CONFIG_DIR", REPO_ROOT / "config"))
TEMPLATES_DIR = REPO_ROOT / "templates"
STATE_DIR = Path(os.environ.get("LTS_STATE_DIR", REPO_ROOT / "state"))  # services' persistent state
MODELS_DIR = Path(os.environ.get("LTS_MODELS_DIR", REPO_ROOT / "models"))  # locally created models
RUNS_DIR = Path(os.environ.get("LTS_RUNS_DIR", REPO_ROOT / "runs"))
DATASETS_DIR = REPO_ROOT / "datasets"
HF_HOME = Path(os.environ.get("HF_HOME", REPO_ROOT / "hf-home"))
