"""Starting a service as a child process, waiting until it answers, and stopping it by PID."""

from __future__ import annotations

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
