"""Issue 37: set-ups that cannot work are refused in seconds with the reason and the fix, before
the model loads: a second backend on a state directory (it used to mark the first one's running
requests failed), a port already in use, engine.ray asking for GPUs the machine does not have; and
the documented ``--ray-trainers 2 --ray-samplers 2`` on a small machine serves (the private
cluster's logical CPUs are sized to fit the actors) instead of waiting 600 s and failing."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import httpx
import pytest
import yaml

from helpers import REPO, RUNTIME_PY, TINY_NAME, TINY_PATH, BackendProc, free_port
from services.backend.preflight import visible_gpus


def _start(cfg_dir, state_dir, port: int, runtime_extra: dict | None = None) -> tuple[int, str, float]:
    """Run a backend that is expected to refuse: (exit status, stderr + log, seconds)."""
    cfg = {"backend": {"host": "127.0.0.1", "port": port, "api_keys": ["tml-x"], "state_dir": str(state_dir),
                       "log_file": str(cfg_dir / f"backend-{port}.log")},
           "runtime": {"device": "cpu", "dtype": "float32", "threads": 1,
                       "models": [{"name": TINY_NAME, "path": str(TINY_PATH)}],
                       **(runtime_extra or {})}}
    p = cfg_dir / f"runtime-{port}.yaml"
    p.write_text(yaml.safe_dump(cfg))
    t = time.monotonic()
    r = subprocess.run([RUNTIME_PY, "-m", "services.backend", "--config", str(p)], cwd=REPO, capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    return r.returncode, r.stderr, time.monotonic() - t


def test_a_second_backend_on_a_state_dir_exits_at_once_naming_the_first(tmp_path, tiny_model):
    first = BackendProc(tmp_path / "state").start()
    try:
        rc, err, dt = _start(tmp_path, tmp_path / "state", free_port())
        print(f"second backend: exit {rc} after {dt:.1f}s: {err.strip()[-300:]}")
        assert rc == 2, err[-2000:]
        assert f"PID {first.proc.pid}" in err and f"port {first.port}" in err, err[-2000:]
        assert dt < 30, dt   # python + imports on a loaded 2-core machine; no model load, no Ray
        assert httpx.get(first.url + "/api/v1/healthz", timeout=10).status_code == 200
        log = (tmp_path / "state" / "backend.log").read_text()
        assert "restarted while this request" not in log
    finally:
        first.stop()
    again = BackendProc(tmp_path / "state").start()    # the lock went with the first process
    again.stop()


def test_a_port_in_use_is_refused_naming_the_process(tmp_path, tiny_model):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc, err, dt = _start(tmp_path, tmp_path / "state", port)
    print(f"busy port: exit {rc} after {dt:.1f}s: {err.strip()[-300:]}")
    assert rc == 2, err[-2000:]
    assert f"{port}" in err and "already in use" in err and f"PID {os.getpid()}" in err, err[-2000:]
    assert dt < 30, dt


def test_ray_asking_for_gpus_the_machine_lacks_is_refused_in_seconds(tmp_path, tiny_model):
    if visible_gpus() >= 4:
        pytest.skip("this machine has the 4 GPUs the set-up asks for")
    rc, err, dt = _start(tmp_path, tmp_path / "state", free_port(),
                         {"device": "cuda", "ray": {"address": "local", "trainers": 2, "samplers": 2}})
    print(f"ray on GPUs that are not there: exit {rc} after {dt:.1f}s: {err.strip()[-300:]}")
    assert rc == 2, err[-2000:]
    assert "need 4 GPU(s)" in err and "has 0" in err, err[-2000:]
    assert dt < 30, dt
