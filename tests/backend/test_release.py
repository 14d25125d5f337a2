"""A finished session's adapters leave memory and the base model still samples (release_check.py,
runtime venv: peft is not in the control venv)."""

from __future__ import annotations

import os
import subprocess

from helpers import REPO, RUNTIME_PY, TINY_PATH


def test_base_sampling_after_the_last_adapter_is_released(tiny_model, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    check = REPO / "tests" / "backend" / "release_check.py"
    r = subprocess.run([RUNTIME_PY, str(check), str(TINY_PATH), str(tmp_path)], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), (r.stdout + r.stderr)[-4000:]
