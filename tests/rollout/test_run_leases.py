"""Two runs sharing the services: the run that started them must not stop them under the other one
(cookbook/runs.py ``Leases``). A stand-in "run" and "service" are plain child processes (sleep)."""

from __future__ import annotations

import subprocess
import time

from cookbook.runs import Leases, Service
from services.common.procs import start_time, stop_pid


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "300"], start_new_session=True)


def _lease_of(leases: Leases, proc: subprocess.Popen) -> None:
    """Another run's lease (its PID and start time), as its own acquire() would write it."""
    leases.dir.mkdir(parents=True, exist_ok=True)
    (leases.dir / f"{proc.pid}.json").write_text(f'{{"pid": {proc.pid}, "start": {start_time(proc.pid)}}}')


def test_services_outlive_their_starter_while_another_run_uses_them(tmp_path):
    other_run, backend = _sleeper(), _sleeper()
    try:
        mine = Leases(tmp_path)
        mine.acquire()
        _lease_of(mine, other_run)
        svc = Service("backend", "http://127.0.0.1:1/health", ["sleep"], tmp_path / "log", proc=backend)
        with mine.release([svc]) as (handed, others):   # the starter ends first
            assert handed == [] and others == [other_run.pid]
        assert backend.poll() is None, "the starter must leave the service to the run still using it"
        assert not (tmp_path / f"{mine.me['pid']}.json").exists()

        other_run.kill()
        other_run.wait()
        last = Leases(tmp_path)   # the last run: its lease, then its end
        last.acquire()
        with last.release([]) as (handed, others):
            assert others == []
            assert [(r["name"], r["pid"]) for r in handed] == [("backend", backend.pid)]
        assert not (tmp_path / "handoff.json").exists()
        assert not list(tmp_path.glob("[0-9]*.json")), "the dead run's lease is cleaned up"
    finally:
        for p in (other_run, backend):
            p.kill()
            p.wait()


def test_last_run_stops_a_handed_over_service_by_pid(tmp_path):
    backend = _sleeper()
    try:
        started = start_time(backend.pid)
        stop_pid(backend.pid, started + 1)   # another process under a reused PID: left alone
        time.sleep(0.2)
        assert backend.poll() is None
        stop_pid(backend.pid, started)
        assert backend.wait(timeout=10) is not None
    finally:
        backend.kill()
        backend.wait()


def test_alone_a_run_stops_what_it_started(tmp_path):
    leases = Leases(tmp_path)
    leases.acquire()
    with leases.release([]) as (handed, others):
        assert handed == [] and others == []
