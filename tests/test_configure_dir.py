"""configure.py writes where the services read: $LTS_CONFIG_DIR when it is set (services/common/paths.py), as
run.sh's "configure if $LTS_CONFIG_DIR/runtime.yaml is missing" expects. Before, it wrote config/ whatever the
variable said: `LTS_CONFIG_DIR=D bash run.sh grpo` configured config/ and then ran on a D without configs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def test_configure_writes_to_lts_config_dir(tmp_path: Path):
    cfg = tmp_path / "cfg"
    before = {p.name: p.stat().st_mtime_ns for p in (REPO / "config").glob("*.yaml")}
    r = subprocess.run([sys.executable, str(REPO / "configure.py"), "--port", "29911", "--admin-port", "29981"],
                       cwd=REPO, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, LTS_CONFIG_DIR=str(cfg)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert yaml.safe_load((cfg / "runtime.yaml").read_text())["backend"]["port"] == 29911
    assert yaml.safe_load((cfg / "admin.yaml").read_text())["admin"]["port"] == 29981
    assert {p.name: p.stat().st_mtime_ns for p in (REPO / "config").glob("*.yaml")} == before, "config/ was written"
