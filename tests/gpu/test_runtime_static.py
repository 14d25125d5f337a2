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
@pytest.mark.parametrize("sampler,merge", [("static", "0"), ("hf", "1"), ("hf", "0")])
def test_runtime_sampler_matches_trainer(tiny_model, sampler, merge):
    """static engine; HF sampler over LoRA snapshots folded into a plain copy; HF sampler over peft."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    r = subprocess.run([RUNTIME_PY, str(REPO / "tests" / "gpu" / "runtime_static_check.py"), "cpu", "float32", "1e-4",
                        sampler, merge], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "OK" in r.stdout, (r.stdout + r.stderr)[-4000:]
    if sampler == "hf":
        assert f"'merged': {merge == '1'}" in r.stdout
