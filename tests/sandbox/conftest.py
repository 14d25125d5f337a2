"""Fixtures for the sandbox manager tests: a real admin process (local backend) on a free
port with its own state dir, worker name and key; a small git repository as base; and
checks for leftovers (processes, mounts, cgroups, run dirs)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from services.sandbox.local.backend import cgroup_parent

REPO = Path(__file__).resolve().parents[2]
SANDBOX_UID = 65534

pytestmark = []


def _have_bwrap() -> bool:
    return shutil.which("bwrap") is not None


requires_bwrap = pytest.mark.skipif(not _have_bwrap(), reason="bubblewrap not installed (apt-get install bubblewrap)")
requires_root = pytest.mark.skipif(os.geteuid() != 0, reason="cgroup limits need root")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Admin:
    url: str
    key: str
    port: int
    state_dir: Path
    worker_name: str
    config: Path
    proc: subprocess.Popen
    log: Path

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def mounts(self) -> list[str]:
        """Sandbox mounts in the admin's private mount namespace."""
        try:
            lines = Path(f"/proc/{self.proc.pid}/mountinfo").read_text().splitlines()
        except FileNotFoundError:
            return []
        return [line for line in lines if str(self.state_dir) in line and "/run/" in line]


def write_config(tmp: Path, port: int, worker_name: str, **overrides) -> Path:
    cfg = {
        "auth": {"key": "test-key-" + worker_name},
        "admin": {"port": port, "log_file": str(tmp / "admin.log"), "max_upload_mb": 2, "max_read_mb": 1},
        "worker": {"name": worker_name, "log_file": str(tmp / "worker.log")},
        "state_dir": str(tmp / "state"),
        "lifecycle": {"reaper_interval_s": 0.5},
        "base_sources": [tempfile.gettempdir()],   # the tests' base repos live in pytest's tmp dirs
    }
    for k, v in overrides.items():
        cfg[k] = {**cfg.get(k, {}), **v} if isinstance(v, dict) else v
    path = tmp / "admin.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def start_admin(tmp: Path, worker_name: str, role: str = "admin", port: int | None = None, config: Path | None = None,
                extra_args: list[str] | None = None, **overrides) -> Admin:
    port = port or free_port()
    config = config or write_config(tmp, port, worker_name, **overrides)
    log = tmp / f"{role}-{port}-stdout.log"
    proc = subprocess.Popen([sys.executable, "-m", "services.sandbox", role, "--config", str(config),
                             "--port", str(port), *(extra_args or [])], cwd=REPO, stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT)
    cfg = yaml.safe_load(config.read_text())
    admin = Admin(f"http://127.0.0.1:{port}", cfg["auth"]["key"], port, Path(cfg["state_dir"]), worker_name, config,
                  proc, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{role} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(admin.url + "/health", timeout=1).status_code == 200:
                return admin
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{role} did not come up:\n{log.read_text()[-3000:]}")


def sandbox_processes() -> list[str]:
    """Host processes running as the sandbox uid (there must be none once sandboxes are gone)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if d.stat().st_uid == SANDBOX_UID:
                    cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    out.append(f"{d.name}: {cmd}")
            except (FileNotFoundError, ProcessLookupError):
                pass
    return out


def leftovers(admin: Admin) -> dict[str, list[str]]:
    """Everything a sandbox of this admin could leave behind."""

    parent = cgroup_parent(admin.state_dir, admin.worker_name)
    cg = []
    for ctl in ("memory", "pids", "cpu", "unified"):
        d = Path("/sys/fs/cgroup") / ctl / parent
        if d.exists():
            cg += [str(p) for p in d.iterdir() if p.is_dir()]
    run = admin.state_dir / "local" / admin.worker_name / "run"
    return {"cgroups": cg, "run_dirs": [str(p) for p in run.iterdir()] if run.exists() else [],
            "mounts": admin.mounts(), "processes": sandbox_processes()}


def wait_no_leftovers(admin: Admin, timeout: float = 10.0) -> dict[str, list[str]]:
    deadline = time.monotonic() + timeout
    while True:
        left = leftovers(admin)
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


@pytest.fixture(scope="session")
def base_repo(tmp_path_factory) -> Path:
    """A small git repository with a passing pytest suite."""
    d = tmp_path_factory.mktemp("base") / "repo"
    (d / "pkg").mkdir(parents=True)
    (d / "pkg" / "__init__.py").write_text("def add(a, b):\n    return a + b\n")
    (d / "tests").mkdir()
    (d / "tests" / "test_add.py").write_text("from pkg import add\n\ndef test_add():\n    assert add(1, 2) == 3\n\n"
                                             "def test_add_neg():\n    assert add(-1, 1) == 0\n")
    (d / "secret_base.txt").write_text("base-content\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "init", "-q"], cwd=d, check=True)
    subprocess.run(["git", "add", "."], cwd=d, check=True)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=d, check=True, env=env)
    return d


@pytest.fixture(scope="session")
def state_root():
    """Sandbox state must be searchable by the sandbox uid (pytest's tmp dirs are 0700)."""
    d = Path(tempfile.mkdtemp(prefix="lts-sandbox-tests-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def tmp_state(state_root, request) -> Path:
    d = state_root / request.node.name[:40]
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def admin(state_root) -> Admin:
    """One admin (local backend) shared by most tests; checked for leftovers at the end."""
    if not _have_bwrap():
        pytest.skip("bubblewrap not installed")
    tmp = state_root / "shared-admin"
    tmp.mkdir()
    a = start_admin(tmp, f"t{os.getpid()}")
    yield a
    rc = a.stop()
    assert rc == 0, a.log.read_text()[-3000:]
    left = wait_no_leftovers(a)
    assert not any(left.values()), f"leftovers after admin shutdown: {left}"


def run(coro):
    return asyncio.run(coro)
