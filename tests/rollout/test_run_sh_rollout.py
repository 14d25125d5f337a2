"""Issue 5, acceptance 3: `run.sh rollout` on the embedded default, from the README's commands:
it starts the backend and the sandbox manager, runs one agent attempt in an isolated sandbox,
writes the run directory, and stops what it started."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing (bash setup.sh system)")


def _our_services(cfg: Path) -> list[int]:
    """PIDs of backend / sandbox-manager processes started with this test's LTS_CONFIG_DIR."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
            env = (d / "environ").read_bytes()
        except OSError:
            continue
        if (b"services.backend" in cmd or b"services.sandbox" in cmd) and f"LTS_CONFIG_DIR={cfg}".encode() in env:
            pids.append(int(d.name))
    return pids


def test_run_sh_rollout_embedded_default(isolated_config):
    tmp, cfg = isolated_config
    env = dict(os.environ, LTS_CONFIG_DIR=str(cfg), LTS_RUNS_DIR=str(tmp / "runs"))
    env.pop("TINKER_API_KEY", None)
    env.pop("TINKER_BASE_URL", None)
    r = subprocess.run(["bash", "run.sh", "rollout", "--task-id", "absolute", "--preset", "quickstart"], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    first = next((l for l in r.stdout.splitlines() if l.startswith("Run directory: ")), "")
    assert first, r.stdout[-2000:]
    run_dir = Path(first.split(": ", 1)[1])
    assert run_dir.parent == tmp / "runs" and run_dir.name.startswith("rollout-")
    status = json.loads((run_dir / "exit-status.json").read_text())
    assert status["exit_code"] == 0 and status["duration_s"] > 0
    summ = json.loads((run_dir / "results" / "rollout" / "summary.json").read_text())
    assert summ["task_id"] == "lts-micro/absolute" and summ["episode_done"] is True
    assert summ["reward"] in (0.0, 1.0) and summ["turns_used"] >= 1 and summ["time_seconds"] > 0
    assert summ["stop_reason"] in ("submitted", "max_turns", "context_overflow")
    assert summ["tokens"]["sampled"] > 0
    traj = json.loads((run_dir / "results" / "rollout" / "trajectory.json").read_text())
    assert traj["segments"] and traj["turns"] and traj["verifier"]
    assert (run_dir / "results" / "rollout" / "trajectory.txt").read_text().startswith("# task lts-micro/absolute")
    res = json.loads((run_dir / "results" / "rollout" / "result.json").read_text())   # scored by cookbook/evaluation.py
    assert res["pass_rate"] == float(summ["reward"] == 1.0) and res["pass_rate_by_task"] == {
        "lts-micro/absolute": res["pass_rate"]}
    log = (run_dir / "client.log").read_text()
    assert "starting backend" in log and "starting sandbox manager" in log and "stopping backend" in log
    assert _our_services(cfg) == [], "run.sh left a service running"


def test_sigterm_while_a_service_starts_leaves_nothing_behind(isolated_config):
    """Stopping a run while it is still starting the backend stops that backend too."""
    tmp, cfg = isolated_config
    env = dict(os.environ, LTS_CONFIG_DIR=str(cfg), LTS_RUNS_DIR=str(tmp / "runs"))
    env.pop("TINKER_API_KEY", None)
    run_dir = tmp / "runs" / "interrupted"
    p = subprocess.Popen([str(REPO / ".venv-control/bin/python"), "-m", "cookbook.cli", "rollout", "--task-id",
                          "absolute", "--preset", "quickstart", "--run-dir", str(run_dir)], cwd=REPO, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while "starting backend" not in ((run_dir / "client.log").read_text() if (run_dir / "client.log").exists() else ""):
        assert time.time() < deadline and p.poll() is None, "the run never started the backend"
        time.sleep(0.05)
    assert _our_services(cfg), "the backend process should exist now"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 130
    deadline = time.time() + 30
    while _our_services(cfg) and time.time() < deadline:
        time.sleep(0.2)
    assert _our_services(cfg) == [], "a service started by the interrupted run is still running"
    assert json.loads((run_dir / "exit-status.json").read_text())["exit_code"] == 130
