"""What every `run.sh` mode shares: the run directory, client.log, and the
services a run needs (started here if not already running, stopped on exit, Ctrl-C included; while other
runs still use them, handed over to the last of them instead: ``Leases``)."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from services.common.config import load_config
from services.common.paths import REPO_ROOT, RUNS_DIR, STATE_DIR
from services.common.procs import healthy, start_time, stop, stop_pid, wait_healthy

log = logging.getLogger("cookbook")


def new_run_dir(mode: str, run_dir: str | None = None) -> Path:
    d = Path(run_dir) if run_dir else RUNS_DIR / f"{mode}-{time.strftime('%Y%m%d-%H%M%S')}"
    if d.exists() and any(d.iterdir()) and not (d / "checkpoint.json").exists() and not (d / "state.json").exists():
        d = d.with_name(d.name + f"-{os.getpid()}")
    d.mkdir(parents=True, exist_ok=True)
    return d


def setup_client_log(run_dir: Path, level: str = "INFO") -> None:
    """client.log in the run dir (tail-able) and the console."""
    root = logging.getLogger()
    root.setLevel(level)
    for h in list(root.handlers):
        root.removeHandler(h)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    fh = logging.FileHandler(run_dir / "client.log")
    fh.setFormatter(fmt)
    sh = logging.StreamHandler(sys.stderr)
    sh.setFormatter(logging.Formatter("%(message)s"))
    sh.setLevel(logging.WARNING)
    root.addHandler(fh)
    root.addHandler(sh)
    for noisy in ("httpx", "httpcore", "tinker", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@dataclass
class Service:
    name: str
    health_url: str
    cmd: list[str]
    log_path: Path
    proc: subprocess.Popen | None = None

    def ensure(self, timeout: float = 180.0) -> bool:
        """Start it unless it already answers; True if we started it."""
        if healthy(self.health_url):
            log.info("%s already running (%s)", self.name, self.health_url)
            return False
        log.info("starting %s: %s (log %s)", self.name, " ".join(self.cmd), self.log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self.cmd, cwd=REPO_ROOT, stdout=open(self.log_path, "ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        wait_healthy(self.proc, self.health_url, timeout, self.log_path, self.name)
        return True

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            log.info("stopping %s (pid %d)", self.name, self.proc.pid)
        stop(self.proc)


@dataclass
class Endpoints:
    backend_url: str
    api_key: str
    model: str
    tokenizer_path: str
    sandbox_url: str | None
    sandbox_key: str | None
    sandbox_flavor: str = "local"
    sandbox_backend: str = "local"   # the manager's backend: local | docker (public Harbor tasks)
    extra: dict[str, Any] = field(default_factory=dict)


def endpoints(need_sandbox: bool = True) -> Endpoints:
    rt = load_config("runtime")
    b = rt.get("backend", {})
    m = rt["runtime"]["models"][0]
    path = m["path"] if Path(m["path"]).is_absolute() else str(REPO_ROOT / m["path"])
    h = load_config("harbor").get("sandbox", {}) if need_sandbox else {}
    return Endpoints(backend_url=f"http://127.0.0.1:{b.get('port', 19210)}",
                     api_key=os.environ.get("TINKER_API_KEY") or b["api_keys"][0], model=m["name"],
                     tokenizer_path=path if Path(path).exists() else m.get("tokenizer_id", m["name"]),
                     sandbox_url=h.get("base_url"), sandbox_key=os.environ.get("LTS_SANDBOX_KEY") or h.get("key"),
                     sandbox_flavor=h.get("flavor", "local"),
                     sandbox_backend=os.environ.get("LTS_SANDBOX_BACKEND") or h.get("backend") or "local")


class Leases:
    """Runs sharing the services (two experiments at once): every run holds a lease while it uses them
    (``<dir>/<pid>.json``). A run ending while others still hold theirs hands the services it started over
    (``handoff.json``: name, PID, start time) instead of stopping them under the others; the last run to end
    stops its own and the handed-over ones. Decided under a file lock, and a run takes its lease before it
    looks for running services, so a service is never stopped under a run that found it running."""

    def __init__(self, directory: Path | None = None):
        self.dir = directory or STATE_DIR / "run-leases"
        self.me = {"pid": os.getpid(), "start": start_time(os.getpid())}

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    @staticmethod
    def _alive(rec: dict[str, Any]) -> bool:
        return rec["start"] is not None and start_time(rec["pid"]) == rec["start"]

    @staticmethod
    def _read(path: Path) -> Any:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def acquire(self) -> None:
        with self._locked():
            (self.dir / f"{self.me['pid']}.json").write_text(json.dumps(self.me))

    @contextmanager
    def release(self, running: list[Service]) -> Iterator[tuple[list[dict[str, Any]], list[int]]]:
        """Drop our lease; yields (the handed-over services to stop now, the PIDs of the runs still using them)
        with the lock held, so the caller stops them before another run can find them running. ``running``:
        the services this run started that still run (handed over when other runs still use them)."""
        with self._locked():
            (self.dir / f"{self.me['pid']}.json").unlink(missing_ok=True)
            others = []
            for path in self.dir.glob("[0-9]*.json"):
                rec = self._read(path)
                if rec is not None and self._alive(rec):
                    others.append(rec["pid"])
                else:
                    path.unlink(missing_ok=True)   # a run that died without releasing its lease
            handoff = self.dir / "handoff.json"
            handed = [r for r in (self._read(handoff) or []) if self._alive(r)]
            if others:
                mine = [{"name": s.name, "pid": s.proc.pid, "start": start_time(s.proc.pid)}
                        for s in running if s.proc is not None]
                handoff.write_text(json.dumps(handed + mine))
                yield [], sorted(others)
            else:
                handoff.unlink(missing_ok=True)
                yield handed, []


@contextmanager
def services(run_dir: Path, ep: Endpoints, need_sandbox: bool = True,
             leases: Leases | None = None) -> Iterator[list[str]]:
    """Start the backend (and the sandbox manager) unless running; stop what we started, unless other runs
    still use it (``Leases``)."""
    leases = leases or Leases()
    py_rt = str(REPO_ROOT / ".venv-runtime" / "bin" / "python")
    started: list[Service] = []  # what we started (the others were already running)
    svcs = [Service("backend", ep.backend_url + "/api/v1/healthz", [py_rt, "-m", "services.backend"],
                    run_dir / "backend.log")]
    if need_sandbox and ep.sandbox_flavor == "local" and ep.sandbox_url and "127.0.0.1" in ep.sandbox_url:
        svcs.append(Service("sandbox manager", ep.sandbox_url + "/health",
                            [sys.executable, "-m", "services.sandbox", "admin", "--backend", ep.sandbox_backend],
                            run_dir / "sandbox-admin.log"))
    leases.acquire()
    try:
        for s in svcs:
            if s.ensure():
                started.append(s)
        yield [s.name for s in started]
    finally:  # s.proc is set as soon as we spawn it: a signal while it starts up still stops it
        running = [s for s in svcs if s.proc is not None and s.proc.poll() is None]
        with leases.release(running) as (handed, others):
            if others:
                if running:
                    log.info("leaving %s running: run(s) %s still use them (the last run to end stops them)",
                             ", ".join(s.name for s in running), ", ".join(map(str, others)))
            else:
                for s in reversed(svcs):
                    s.stop()
                for rec in handed:
                    log.info("stopping %s (pid %d, started by an earlier run)", rec["name"], rec["pid"])
                    stop_pid(rec["pid"], rec["start"])


def install_signal_handlers() -> None:
    """SIGTERM behaves like Ctrl-C, so `finally` blocks stop services and record the exit status."""
    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
