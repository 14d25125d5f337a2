"""Acceptance (issue 14): a GRPO step's forward_backward enters each backend layer once
(docs/backend.md "One forward_backward, file by file"). Runs layers_check.py with the runtime venv:
the backend in one process, every Python call profiled while the SDK's forward_backward runs."""

from __future__ import annotations

import os
import subprocess

from helpers import REPO, RUNTIME_PY, TINY_PATH


def test_forward_backward_crosses_each_layer_once(tiny_model, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    r = subprocess.run([RUNTIME_PY, str(REPO / "tests" / "backend" / "layers_check.py"), str(TINY_PATH), str(tmp_path)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), (r.stdout + r.stderr)[-4000:]
