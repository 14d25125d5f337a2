"""`prepare_sandbox.py TASKS --backend docker --validate` with a manager of another backend on the configured port
(issue 43 item 3): refused at once, before any image is built, naming the running manager's backend (its /health)
and the fix. Before, it built the images and then crashed in validation with "the local backend has no network
mode 'registry'". No Docker needed: a local-backend admin is what answers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from helpers import REPO, free_port

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None and os.environ.get("CI") != "true",
                                reason="bubblewrap missing (bash setup.sh system)")


def _prepare(cfg: Path, out: Path) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "prepare_sandbox.py", str(REPO / "datasets" / "swebench-sample"), "--backend",
                        "docker", "--validate", "--out", str(out), "--no-progress"], cwd=REPO, capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, LTS_CONFIG_DIR=str(cfg)))
    return r, time.monotonic() - t0


def test_docker_validation_refuses_a_local_manager(sandbox_admin, tmp_path: Path):
    cfg = tmp_path / "config"
    cfg.mkdir()
    (cfg / "harbor.yaml").write_text(yaml.safe_dump({"sandbox": {
        "base_url": sandbox_admin.url, "key": sandbox_admin.key, "flavor": "local", "backend": "docker"}}))
    r, took = _prepare(cfg, tmp_path / "prep")
    assert r.returncode != 0 and took < 30, (took, r.stdout[-2000:], r.stderr[-2000:])
    assert f"the sandbox manager at {sandbox_admin.url} runs the 'local' backend" in r.stderr, r.stderr[-2000:]
    assert "serve.sh admin --backend docker" in r.stderr
    assert not (tmp_path / "prep" / "manifest.json").exists()

    # nothing on the port: refused the same way, naming the URL and the fix
    (cfg / "harbor.yaml").write_text(yaml.safe_dump({"sandbox": {
        "base_url": f"http://127.0.0.1:{free_port()}", "key": "k", "flavor": "local"}}))
    r, took = _prepare(cfg, tmp_path / "prep")
    assert r.returncode != 0 and took < 30 and "none answers there" in r.stderr, r.stderr[-2000:]
