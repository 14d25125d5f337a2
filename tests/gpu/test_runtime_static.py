"""Runtime.sample with engine.sampler='static' on CPU: LoRA and full-FT snapshots served by the
static engine match the trainer's forward. Needs peft: runs tests/gpu/runtime_static_check.py
with the runtime venv (LTS_RUNTIME_PYTHON, default .venv-runtime/bin/python) in a subprocess."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from helpers import REPO, RUNTIME_PY


@pytest.mark.skipif(not Path(RUNTIME_PY).exists(), reason="runtime venv missing")
def test_runtime_static_sampler_matches_trainer(tiny_model):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    r = subprocess.run([RUNTIME_PY, str(REPO / "tests" / "gpu" / "runtime_static_check.py")], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "OK" in r.stdout, (r.stdout + r.stderr)[-4000:]
