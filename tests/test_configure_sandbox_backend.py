"""`configure.py --sandbox-backend docker` is one setting: admin.yaml's `admin.backend` (the manager serve.sh
starts) and harbor.yaml's `sandbox.backend` (the manager run.sh starts and the tasks are prepared for) both
say docker. Before, harbor.yaml kept `backend: local`, so `run.sh` without `--sandbox-backend docker` started
a local manager (issue 43 item 4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def test_sandbox_backend_is_written_to_admin_and_harbor_yaml(tmp_path: Path):
    for backend in ("docker", "local"):
        cfg = tmp_path / backend
        r = subprocess.run([sys.executable, str(REPO / "configure.py"), "--sandbox-backend", backend],
                           cwd=REPO, capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, LTS_CONFIG_DIR=str(cfg)))
        assert r.returncode == 0, r.stdout + r.stderr
        admin = yaml.safe_load((cfg / "admin.yaml").read_text())
        harbor = yaml.safe_load((cfg / "harbor.yaml").read_text())
        assert admin["admin"]["backend"] == harbor["sandbox"]["backend"] == backend, (admin["admin"], harbor["sandbox"])
