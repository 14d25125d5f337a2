"""The seed's two-terminal start, typed in its order (issue 43 item 9): after `configure.py` with the seed's flags,
`bash serve.sh worker` in one terminal, `bash serve.sh admin` in another, then `run.sh rollout`. The admin uses the
worker on 22555 (the seed's host rocklet port) instead of running sandboxes itself; the worker stays up, and the
rollout gives a reward and writes the seed's files under the task root's runs/ (TASK=T, item 8).
Before, the admin ran its own local backend on the same state dir, so the worker had to be stopped first (or the
admin, started second, found the state dir locked)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import httpx
import pytest
import yaml

from helpers import REPO, free_port, read_json, run_sh, serve_worker_then_admin
from services.common.procs import stop

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None and os.environ.get("CI") != "true",
                                reason="bubblewrap missing (bash setup.sh system)")
PY = str(REPO / ".venv-control" / "bin" / "python")
WORKER_PORT = 22555   # the seed's, configure.py's default


def test_worker_then_admin_then_rollout(tiny_model):
    with socket.socket() as s:   # the seed's fixed port must be ours for this test
        assert s.connect_ex(("127.0.0.1", WORKER_PORT)) != 0, f"port {WORKER_PORT} is in use: stop what holds it"
    tmp = Path(tempfile.mkdtemp(prefix="lts-seed2t-"))
    tmp.chmod(0o755)
    task = tmp / "task"
    task.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("LTS_CONFIG_DIR", "LTS_RUNS_DIR", "TASK", "TINKER_API_KEY", "TINKER_BASE_URL")}
    env.update(TASK=str(task), LTS_STATE_DIR=str(tmp / "state"))   # the seed's task root; private run leases
    procs: list[subprocess.Popen] = []
    try:
        r = subprocess.run([PY, "configure.py", "--task-root", str(task), "--task-id", "absolute", "--node-ip",
                            "127.0.0.1", "--model", str(REPO / "models" / "qwen3-tiny-xs"), "--port", str(free_port()),
                            "--admin-port", str(free_port())], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        cfg = task / "config"
        rt = yaml.safe_load((cfg / "runtime.yaml").read_text())
        rt["backend"].update(state_dir=str(tmp / "backend"), log_file=str(tmp / "backend.log"))
        rt["engine_config"] = str(cfg / "engine.yaml")
        (cfg / "runtime.yaml").write_text(yaml.safe_dump(rt))
        adm = yaml.safe_load((cfg / "admin.yaml").read_text())
        assert adm["worker"]["port"] == WORKER_PORT and adm["admin"]["backend"] == "local"
        adm["state_dir"] = str(tmp / "sandboxes")
        adm["admin"]["log_file"] = str(tmp / "admin.log")
        adm["worker"]["log_file"] = str(tmp / "worker.log")
        (cfg / "admin.yaml").write_text(yaml.safe_dump(adm))

        # terminal 1: bash serve.sh worker; terminal 2: bash serve.sh admin
        serve_worker_then_admin(WORKER_PORT, adm["admin"]["port"], env, tmp, procs)
        worker, admin = procs

        # then the rollout on the configured task, the seed's files under $TASK/runs/
        run = run_sh(env, "rollout", "--task-id", "absolute", "--preset", "quickstart", timeout=600)
        assert run.parent == task / "runs", run
        assert read_json(run / "exit-status.json")["exit_code"] == 0
        summ = read_json(run / "results" / "rollout" / "summary.json")
        assert summ["task_name"] == "lts-micro/absolute" and summ["reward"] in (0.0, 1.0), summ
        assert summ["episode_done"] is True
        assert read_json(run / "results" / "rollout" / "task_manifest.json")["selection"]["task_id"] == "absolute"
        log = (run / "client.log").read_text()
        assert all(p in log for p in ("Results dir:", "TINKER_SERVER_JOB {", "Rollout done")), log[-3000:]

        # the worker (the admin's only backend) ran the sandboxes and is still up on the seed's port
        assert worker.poll() is None and admin.poll() is None
        wh = httpx.get(f"http://127.0.0.1:{WORKER_PORT}/health", timeout=10)
        assert wh.status_code == 200 and wh.json()["result"]["backend"] == "local"
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)
