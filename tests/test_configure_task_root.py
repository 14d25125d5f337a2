"""The seed keeps each example's configuration under $TASK/config/ (issue 43 item 8): `configure.py --task-root T`
writes T/config/, and run.sh / serve.sh / the services given the same task root ($TASK=T, the seed's variable) read
T/config/ and write T/runs/ (services/common/paths.py, the one owner). Without it, the repo's config/ as before.
Before, --task-root only said where published tasks are, and the configs went into the repo's config/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LTS_CONFIG_DIR", "LTS_RUNS_DIR", "TASK")}
    return {**env, **extra}


def _paths(env: dict[str, str]) -> tuple[str, str]:
    r = subprocess.run([sys.executable, "-c", "from services.common import paths; print(paths.CONFIG_DIR); "
                        "print(paths.RUNS_DIR)"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    cfg, runs = r.stdout.split()
    return cfg, runs


def _repo_config() -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (REPO / "config").glob("*")}


def test_task_root_holds_configs_and_runs(tmp_path: Path):
    t = tmp_path / "task"
    t.mkdir()
    before = _repo_config()
    r = subprocess.run([sys.executable, str(REPO / "configure.py"), "--task-root", str(t), "--port", "29912",
                        "--admin-port", "29982"], cwd=REPO, capture_output=True, text=True, timeout=120, env=_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert yaml.safe_load((t / "config" / "runtime.yaml").read_text())["backend"]["port"] == 29912
    assert yaml.safe_load((t / "config" / "admin.yaml").read_text())["admin"]["port"] == 29982
    assert yaml.safe_load((t / "config" / "harbor.yaml").read_text())["tasks"]["root"] == str(t)
    assert (t / "config" / "manifest.json").exists()
    assert _repo_config() == before, "the repo's config/ was written"

    # the same task root given the seed's way ($TASK): every reader follows it; without it, the repo's
    assert _paths(_env(TASK=str(t))) == (str(t / "config"), str(t / "runs"))
    assert _paths(_env()) == (str(REPO / "config"), str(REPO / "runs"))
    assert _paths(_env(TASK=str(t), LTS_CONFIG_DIR=str(tmp_path / "c")))[0] == str(tmp_path / "c")
    r = subprocess.run([sys.executable, "-c", "from services.common.config import load_config; "
                        "print(load_config('admin')['admin']['port'])"],
                       cwd=REPO, env=_env(TASK=str(t)), capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "29982", r.stdout + r.stderr
    # serve.sh looks for T/config/ (here: a fresh task root without one, named in the error)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    r = subprocess.run(["bash", "serve.sh", "backend"], cwd=REPO, env=_env(TASK=str(fresh)), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and f"{fresh}/config/ is missing" in r.stderr, r.stderr
    # configure.py given the task root only as $TASK writes there too
    r = subprocess.run([sys.executable, str(REPO / "configure.py"), "--port", "29913"], cwd=REPO, capture_output=True,
                       text=True, timeout=120, env=_env(TASK=str(fresh)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert yaml.safe_load((fresh / "config" / "runtime.yaml").read_text())["backend"]["port"] == 29913
    assert _repo_config() == before, "the repo's config/ was written"
