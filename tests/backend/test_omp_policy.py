"""OpenMP reads OMP_WAIT_POLICY once, when torch is first imported: the backend must have set it
(PASSIVE) by then, or idle OpenMP threads spin and a forward_backward on a few shared cores runs
several times slower (it did, with 2 threads, when __main__'s imports moved to the top)."""

from __future__ import annotations

import os
import subprocess

from helpers import REPO, RUNTIME_PY

PROBE = """
import importlib.abc, os, sys
seen = {}
class Probe(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and "torch" not in seen:
            seen["torch"] = os.environ.get("OMP_WAIT_POLICY")
        return None
sys.meta_path.insert(0, Probe())
import services.backend.__main__  # what `python -m services.backend` imports first
import services.backend.runtime  # what its main() imports once the start-up checks passed (torch, if not yet)
print("OMP_WAIT_POLICY at torch import:", seen.get("torch"))
"""


def test_omp_wait_policy_is_set_before_torch_is_imported():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = str(REPO)
    r = subprocess.run([RUNTIME_PY, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("OMP_WAIT_POLICY at torch import: PASSIVE"), r.stdout
