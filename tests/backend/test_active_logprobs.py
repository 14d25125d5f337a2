"""The trainer's logprob path that skips work (a shared prefix's unembedding once, padding never,
autograd only at active positions) equals the plain batched forward in values and gradients.
Needs peft: runs active_logprobs_check.py with the runtime venv in a subprocess."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from helpers import REPO, RUNTIME_PY, TINY_PATH


@pytest.mark.skipif(not Path(RUNTIME_PY).exists(), reason="runtime venv missing")
def test_active_logprobs_equal_plain_forward(tiny_model):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    r = subprocess.run([RUNTIME_PY, str(REPO / "tests" / "backend" / "active_logprobs_check.py"), str(TINY_PATH)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), (r.stdout + r.stderr)[-4000:]
