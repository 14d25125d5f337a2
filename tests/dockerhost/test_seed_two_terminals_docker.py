"""The seed's quick start typed in its order on a public-layout task (issue 43 item 9): a task whose repo lives in its
Docker image (the stand-in psf__requests-90003 of datasets/swebench-verified-like, the published SWE-bench Verified
layout: environment/Dockerfile, swebench's test.sh with `uv run parser.py`, its verifier on the network).

    prepare_sandbox.py --task T --task-id ID      (copies the task into T/assets/harbor-tasks/ID)
    configure.py --task-root T --task-id ID ...   (the seed's flags; no --sandbox-backend)
    bash serve.sh worker   |   bash serve.sh admin   (two terminals)
    bash run.sh rollout --task-id ID

configure says the task runs on Docker and writes it (admin.backend, worker.backend, harbor.yaml sandbox.backend);
the worker on 22555 runs the docker backend and the admin hands it the sandboxes; the rollout runs on the task
without an extra flag and writes the seed's files under T/runs/ with a reward. Before, the worker ran the local
backend, the admin (docker) did not use it, and without `--sandbox-backend docker` the rollout stopped with "needs
--backend docker"."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import httpx
import yaml

from helpers import REPO, free_port, read_json, run_sh, serve_worker_then_admin
from services.common.procs import stop
from services.sandbox import offline_build
from services.tasks.sources import swebench_like as sl

from .conftest import containers_of

PY = str(REPO / ".venv-control" / "bin" / "python")
WORKER_PORT = 22555   # the seed's, configure.py's default
TASK_ID = "psf__requests-90003"
DATASET = REPO / "datasets" / "swebench-verified-like"


def test_public_task_worker_then_admin_then_rollout(docker_client, tiny_model):
    with socket.socket() as s:   # the seed's fixed port must be ours for this test
        assert s.connect_ex(("127.0.0.1", WORKER_PORT)) != 0, f"port {WORKER_PORT} is in use: stop what holds it"
    assert sl.build_images(docker_client, sl.DEFAULT_CACHE, DATASET, only=[TASK_ID])   # its FROM image (cached)
    tmp = Path(tempfile.mkdtemp(prefix="lts-seed2d-"))
    tmp.chmod(0o755)
    task = tmp / "task"
    task.mkdir()
    worker_name = f"sd{os.getpid()}"
    env = {k: v for k, v in os.environ.items()
           if k not in ("LTS_CONFIG_DIR", "LTS_RUNS_DIR", "TASK", "TINKER_API_KEY", "TINKER_BASE_URL",
                        "LTS_SANDBOX_BACKEND", "LTS_MIRROR_DIR")}
    # the seed's task root; private run leases and mirror; the images built offline (uv from its wheel)
    env.update(TASK=str(task), LTS_STATE_DIR=str(tmp / "state"), **{offline_build.ENV_FLAG: "1"})
    procs: list[subprocess.Popen] = []
    try:
        r = subprocess.run([PY, "prepare_sandbox.py", "--task", str(task), "--task-id", TASK_ID], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        assert (task / "assets" / "harbor-tasks" / TASK_ID / "environment" / "Dockerfile").is_file()

        r = subprocess.run([PY, "configure.py", "--task-root", str(task), "--task-id", TASK_ID, "--node-ip",
                            "127.0.0.1", "--model", str(REPO / "models" / "qwen3-tiny-xs"), "--port", str(free_port()),
                            "--admin-port", str(free_port())], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "its repo lives in its Docker image" in r.stdout + r.stderr and "--sandbox-backend docker" in r.stdout
        cfg = task / "config"
        assert yaml.safe_load((cfg / "harbor.yaml").read_text())["sandbox"]["backend"] == "docker"
        rt = yaml.safe_load((cfg / "runtime.yaml").read_text())
        rt["backend"].update(state_dir=str(tmp / "backend"), log_file=str(tmp / "backend.log"))
        rt["engine_config"] = str(cfg / "engine.yaml")
        (cfg / "runtime.yaml").write_text(yaml.safe_dump(rt))
        adm = yaml.safe_load((cfg / "admin.yaml").read_text())
        assert adm["worker"]["port"] == WORKER_PORT
        assert adm["admin"]["backend"] == adm["worker"]["backend"] == "docker", adm
        adm["state_dir"] = str(tmp / "sandboxes")
        adm["admin"]["log_file"] = str(tmp / "admin.log")
        adm["worker"].update(log_file=str(tmp / "worker.log"), name=worker_name)   # its containers: ours only
        (cfg / "admin.yaml").write_text(yaml.safe_dump(adm))

        # terminal 1: bash serve.sh worker; terminal 2: bash serve.sh admin
        serve_worker_then_admin(WORKER_PORT, adm["admin"]["port"], env, tmp, procs)
        worker, admin = procs

        # then the rollout on the public-layout task (no --sandbox-backend), the seed's files under $TASK/runs/
        run = run_sh(env, "rollout", "--task-id", TASK_ID, "--preset", "quickstart", timeout=1200)
        assert run.parent == task / "runs", run
        assert read_json(run / "exit-status.json")["exit_code"] == 0
        summ = read_json(run / "results" / "rollout" / "summary.json")
        assert summ["task_name"].endswith(TASK_ID) and summ["reward"] in (0.0, 1.0), summ
        assert summ["episode_done"] is True
        assert read_json(run / "results" / "rollout" / "task_manifest.json")["selection"]["task_id"] == TASK_ID
        log = (run / "client.log").read_text()
        assert all(p in log for p in ("Results dir:", "TINKER_SERVER_JOB {", "Rollout done")), log[-3000:]
        assert "infra" not in str(summ.get("error") or ""), summ

        # the worker (the admin's only backend) ran the task's containers and is still up on the seed's port
        assert worker.poll() is None and admin.poll() is None
        wh = httpx.get(f"http://127.0.0.1:{WORKER_PORT}/health", timeout=10)
        assert wh.status_code == 200 and wh.json()["result"]["backend"] == "docker"
    finally:
        for p in reversed(procs):
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)
    assert containers_of(docker_client, worker_name) == []
