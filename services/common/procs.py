"""Starting a service as a child process, waiting until it answers, and stopping it by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx


def healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def wait_healthy(proc: subprocess.Popen, url: str, timeout: float, log: Path | None = None,
                 what: str = "service") -> None:
    """Block until ``url`` answers 200; raise with the end of ``log`` if the process dies or time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            tail = log.read_text()[-3000:] if log and log.exists() else ""
            raise RuntimeError(f"{what} exited with {proc.returncode}: {tail}")
        if healthy(url):
            return
        time.sleep(0.2)
    stop(proc)
    raise RuntimeError(f"{what} did not answer {url} within {timeout:.0f}s" + (f"; see {log}" if log else ""))


def stop(proc: subprocess.Popen | None, timeout: float = 30.0) -> None:
    """SIGTERM (clean shutdown), then SIGKILL if it does not exit in time."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat), None when it has ended: with the PID
    it names one process (a PID alone may be reused)."""
    try:
        st = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = st[st.rindex(")") + 2:].split()
    return None if fields[0] in "ZX" else int(fields[19])   # a zombie has ended (its parent has not reaped it yet)


def stop_pid(pid: int, started: int | None, timeout: float = 30.0) -> None:
    """``stop`` for a process we started but is no longer our child (another run started it and handed it over):
    only while ``pid`` is still the process that started at ``started``."""
    now = start_time(pid)
    if now is None or now != started:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if start_time(pid) != started:
            return
        time.sleep(0.1)
    if start_time(pid) == started:
        os.kill(pid, signal.SIGKILL)
