"""Fixtures for tests with real containers on a real Docker engine (`bash setup.sh docker`).

Without a usable engine (or without the base image) these tests skip, except under ``CI=true``,
where they fail: CI installs and starts Docker, so a missing engine there is a bug."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import httpx
import pytest
import yaml

from services.sandbox.client import SandboxManagerClient
from services.tasks.grading.bases import ImageRef
from services.tasks.preparation.prepare import prepare_tasks
from services.tasks.task import load_dataset

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "datasets" / "swebench-sample"
BASE_IMAGE = "lts/base:bookworm"


def _docker_problem() -> str | None:
    try:
        client = docker.from_env(timeout=20)
        client.ping()
    except Exception as e:  # noqa: BLE001
        return f"no usable Docker engine ({type(e).__name__}: {e}); run: sudo bash setup.sh docker"
    try:
        client.images.get(BASE_IMAGE)
    except Exception:  # noqa: BLE001
        return f"base image {BASE_IMAGE} is missing; run: sudo bash setup.sh docker"
    return None


@pytest.fixture(scope="session")
def docker_client():
    problem = _docker_problem()
    if problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: {problem}")
        pytest.skip(problem)
    return docker.from_env(timeout=300)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class DockerAdmin:
    """`python -m services.sandbox admin --backend docker` as a subprocess."""

    dir: Path
    worker: str
    port: int
    key: str = "docker-test-key"
    proc: subprocess.Popen | None = None
    lease_s: float = 300
    docker: dict | None = None   # extra docker: config (bind_sources, runtime_paths)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> "DockerAdmin":
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg = {"auth": {"key": self.key},
               "admin": {"port": self.port, "log_file": str(self.dir / "admin.log")},
               "worker": {"name": self.worker}, "state_dir": str(self.dir / "state"),
               "lifecycle": {"reaper_interval_s": 0.5, "lease_s": self.lease_s},
               "docker": {"bind_sources": [str(self.dir)], "runtime_paths": [], **(self.docker or {})}}
        path = self.dir / "admin.yaml"
        path.write_text(yaml.safe_dump(cfg))
        log = open(self.dir / "stdout.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "services.sandbox", "admin", "--config", str(path),
                                      "--backend", "docker", "--port", str(self.port)], cwd=REPO, stdout=log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"admin exited {self.proc.returncode}: "
                                   f"{(self.dir / 'stdout.log').read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop(signal.SIGKILL)
        raise RuntimeError("docker admin did not come up")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(60) if self.proc else 0

    def client(self):
        return SandboxManagerClient(self.url, self.key)


def containers_of(client, worker: str) -> list:
    return client.containers.list(all=True, filters={"label": f"lts.worker={worker}"})


@pytest.fixture(scope="session")
def docker_admin(docker_client):
    d = Path(tempfile.mkdtemp(prefix="lts-docker-admin-"))
    a = DockerAdmin(d, f"dt{os.getpid()}", free_port()).start()
    yield a
    assert a.stop() == 0, (d / "stdout.log").read_text()[-3000:]
    assert containers_of(docker_client, a.worker) == [], "containers left after the admin stopped"


@pytest.fixture(scope="module")
def net_admin(docker_client):
    """A docker admin whose mirror keeps its cache and raw store in a private dir (offline raw store:
    ``raw_online`` off, so an upstream file is served only if it was exported into ``<dir>/mirror/raw``)."""
    d = Path(tempfile.mkdtemp(prefix="lts-docker-net-"))
    a = DockerAdmin(d, f"dn{os.getpid()}", free_port(),
                    docker={"mirror": {"dir": str(d / "mirror"), "raw_online": False}}).start()
    yield a
    assert a.stop() == 0, (d / "stdout.log").read_text()[-3000:]
    assert containers_of(docker_client, a.worker) == [], "containers left after the admin stopped"


@pytest.fixture(scope="session")
def sample_prep(docker_client, tmp_path_factory):
    """The sample set's images built and scrubbed (cached by content hash on the engine)."""

    out = tmp_path_factory.mktemp("prep")
    ds = load_dataset(SAMPLE)
    manifest = asyncio.run(prepare_tasks(ds.tasks, out, backend="docker", docker=docker_client, progress=False,
                                         dataset="swebench-sample"))
    return ds, out, manifest


def manager_factory(client):

    async def factory(base):
        if isinstance(base, ImageRef):
            return await client.create(image=str(base), limits=base.limits, network=base.network)
        return await client.create(base)
    return factory


@pytest.fixture(scope="module")
def running_docker(docker_client, tiny_model):
    """run.sh tests on the docker backend: a private config whose sandbox manager runs its docker
    backend (worker name unique to this run), backend + manager started via serve.sh."""
    spec = importlib.util.spec_from_file_location("lts_root_conftest", REPO / "tests" / "conftest.py")
    root = importlib.util.module_from_spec(spec)   # tests/conftest.py's helpers (whatever "conftest" is now)
    spec.loader.exec_module(root)
    _isolated_config, _running = root._isolated_config, root._running
    with _isolated_config() as (tmp, cfg):
        adm = yaml.safe_load((cfg / "admin.yaml").read_text())
        worker = f"dr{os.getpid()}"
        adm["admin"]["backend"] = "docker"
        adm.setdefault("worker", {})["name"] = worker
        (cfg / "admin.yaml").write_text(yaml.safe_dump(adm))
        harbor = yaml.safe_load((cfg / "harbor.yaml").read_text())   # one edit call in one short turn
        harbor["agent"] = {"tools": ["edit"], "compact_schemas": True,
                           "system_prompt": "Fix the bug: edit the wrong line.",
                           "budgets": {**(harbor.get("agent") or {}).get("budgets", {}), "max_turns": 1,
                                       "max_output_tokens": 96}}
        (cfg / "harbor.yaml").write_text(yaml.safe_dump(harbor))
        with _running(tmp, cfg) as (tmp2, env):
            env = {**env, "LTS_SANDBOX_BACKEND": "docker"}
            yield tmp2, env, worker
        assert containers_of(docker_client, worker) == []
