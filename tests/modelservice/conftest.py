"""Fixtures: the ModelService as a real subprocess (TCP + Unix socket) against the session's
backend, a tinker SamplingClient for compute_logprobs, the tiny model's tokenizer, and (for the
sandbox tests) a sandbox admin whose sandboxes may bind the ModelService's socket directory and
see .venv-agent."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import tinker
import yaml
from transformers import AutoTokenizer

from helpers import REPO, free_port

AGENT_VENV = REPO / ".venv-agent"


@dataclass
class MS:
    url: str
    key: str
    socket: Path
    proc: subprocess.Popen
    log: Path
    traj_dir: Path

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=120, **kw)

    def uds_client(self) -> httpx.Client:
        return httpx.Client(base_url="http://modelservice", transport=httpx.HTTPTransport(uds=str(self.socket)),
                            timeout=120)


def start_modelservice(tmp: Path, backend, extra: list[str] | None = None) -> MS:
    tmp.mkdir(parents=True, exist_ok=True)
    port, key = free_port(), "ms-test-key"
    sock = tmp / "sock" / "model.sock"
    log = tmp / "modelservice.log"
    harbor = tmp / "harbor.yaml"
    harbor.write_text(yaml.safe_dump({"agent": {"budgets": {"max_turns": 12}}}))
    cmd = [sys.executable, "-m", "services.modelservice", "--port", str(port), "--socket", str(sock), "--key", key,
           "--backend-url", backend.url, "--backend-key", backend.key, "--base-model", backend.model,
           "--tokenizer", str(backend.model_path), "--trajectories-dir", str(tmp / "trajectories"),
           "--harbor-config", str(harbor), "--log-file", str(log), "--record-requests", *(extra or [])]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=open(tmp / "stdout.log", "ab"), stderr=subprocess.STDOUT)
    ms = MS(f"http://127.0.0.1:{port}", key, sock, proc, log, tmp / "trajectories")
    deadline = time.time() + 90
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"modelservice exited {proc.returncode}: {(tmp / 'stdout.log').read_text()[-3000:]}")
        try:
            if httpx.get(ms.url + "/health", timeout=1).status_code == 200 and sock.exists():
                return ms
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("modelservice did not come up")


def stop(proc: subprocess.Popen, timeout: float = 30) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return -9
    return proc.returncode


@pytest.fixture(scope="session")
def ms_root():
    """A 0755 dir under /tmp: the sandbox uid must traverse to the socket and the admin state."""
    d = Path(tempfile.mkdtemp(prefix="lts-ms-test-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def modelservice(ms_root, backend):
    ms = start_modelservice(ms_root / "modelservice", backend)
    yield ms
    assert stop(ms.proc) == 0, "the ModelService did not stop cleanly on SIGTERM"
    assert not ms.socket.exists(), "the ModelService left its socket behind"


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    return AutoTokenizer.from_pretrained(str(tiny_model[1]))


@pytest.fixture(scope="session")
def sampling_client(backend):
    service = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    return service.create_sampling_client(base_model=backend.model)


@dataclass
class Admin:
    url: str
    key: str
    proc: subprocess.Popen
    log: Path


@pytest.fixture(scope="session")
def sandbox_admin(ms_root, modelservice):
    """Sandbox manager (local backend) whose sandboxes see .venv-agent and may bind the
    ModelService's socket directory (read-only)."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    if not (AGENT_VENV / "bin" / "mini").exists():
        r = subprocess.run([sys.executable, "-m", "cookbook.modelservice", "install-agent"], cwd=REPO,
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.fail("could not create .venv-agent (python -m cookbook.modelservice install-agent):\n"
                        f"{r.stderr[-3000:]}")
    tmp = ms_root / "sbadmin"
    tmp.mkdir(mode=0o755)
    port, key = free_port(), "sbx-ms-key"
    cfg = {"auth": {"key": key},
           "admin": {"host": "127.0.0.1", "port": port, "log_file": str(tmp / "admin.log")},
           "worker": {"name": f"ms{port}", "log_file": str(tmp / "worker.log")},
           "state_dir": str(tmp / "state"),
           "base_sources": [tempfile.gettempdir()],
           "local": {"runtime_paths": [sys.base_prefix, sys.prefix, str(AGENT_VENV)],
                     "bind_sources": [str(modelservice.socket.parent)]}}
    path = tmp / "admin.yaml"
    path.write_text(yaml.safe_dump(cfg))
    log = tmp / "stdout.log"
    proc = subprocess.Popen([sys.executable, "-m", "services.sandbox", "admin", "--config", str(path)], cwd=REPO,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT)
    admin = Admin(f"http://127.0.0.1:{port}", key, proc, log)
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sandbox admin exited: {log.read_text()[-3000:]}")
        try:
            if httpx.get(admin.url + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    yield admin
    stop(proc)
