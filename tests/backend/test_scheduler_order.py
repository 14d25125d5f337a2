"""A scheduler round answers the waiting samples before it runs the waiting training jobs, and a
forward_backward answers the samples that arrive meanwhile between its micro-batches
(scheduler_order_check.py, runtime venv: the scheduler imports peft)."""

from __future__ import annotations

import os
import subprocess

from helpers import REPO, RUNTIME_PY, TINY_PATH


def test_waiting_samples_run_before_waiting_training(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    check = REPO / "tests" / "backend" / "scheduler_order_check.py"
    r = subprocess.run([RUNTIME_PY, str(check), str(tmp_path / "futures.db")], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), (r.stdout + r.stderr)[-4000:]


def test_sampling_between_microbatches_leaves_training_unchanged(tiny_model, tmp_path):
    """between_check.py: a LoRA snapshot sampled between micro-batches changes neither the
    logprobs nor the gradients of the forward_backward it interrupts."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    check = REPO / "tests" / "backend" / "between_check.py"
    r = subprocess.run([RUNTIME_PY, str(check), str(TINY_PATH), str(tmp_path / "spill")], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), (r.stdout + r.stderr)[-4000:]
