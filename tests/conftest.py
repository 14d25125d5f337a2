from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shutil
import subprocess
import tempfile

import yaml

from helpers import REPO, BackendProc, SandboxAdminProc, ensure_tiny_model, free_port, serve_sh  # noqa: E402
from services.common.procs import stop

os.environ.setdefault("HF_HOME", str(REPO / "hf-home"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model():
    return ensure_tiny_model()


@pytest.fixture(scope="session")
def backend(tmp_path_factory, tiny_model):
    """One backend serving the tiny model for the whole test session."""
    b = BackendProc(tmp_path_factory.mktemp("backend")).start()
    old = {k: os.environ.get(k) for k in ("TINKER_BASE_URL", "TINKER_API_KEY")}
    os.environ.update(b.env())
    yield b
    b.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def sandbox_admin(tmp_path_factory):
    """One sandbox manager (local bubblewrap backend) for the whole test session."""

    d = Path(tempfile.mkdtemp(prefix="lts-sbx-test-"))
    d.chmod(0o755)  # the sandbox uid must be able to traverse to its workspace
    a = SandboxAdminProc(d).start()
    yield a
    a.stop()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture()
def isolated_config(tiny_model):
    """A private config/ (free ports, state under a temp dir) for run.sh tests."""
    with _isolated_config() as tc:
        yield tc


@contextlib.contextmanager
def _isolated_config():

    tmp = Path(tempfile.mkdtemp(prefix="lts-runsh-"))
    tmp.chmod(0o755)
    cfg = tmp / "config"
    subprocess.run([str(REPO / ".venv-control/bin/python"), "configure.py", "--out", str(cfg), "--port",
                    str(free_port()),
                    "--admin-port", str(free_port())], cwd=REPO, check=True, capture_output=True)
    rt = yaml.safe_load((cfg / "runtime.yaml").read_text())
    rt["backend"]["state_dir"] = str(tmp / "backend")
    rt["backend"]["log_file"] = str(tmp / "backend.log")
    rt["engine_config"] = str(cfg / "engine.yaml")
    (cfg / "runtime.yaml").write_text(yaml.safe_dump(rt))
    adm = yaml.safe_load((cfg / "admin.yaml").read_text())
    adm["state_dir"] = str(tmp / "sandboxes")
    adm["admin"]["log_file"] = str(tmp / "admin.log")
    (cfg / "admin.yaml").write_text(yaml.safe_dump(adm))
    yield tmp, cfg
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture()
def running(isolated_config):
    """run.sh tests: backend + sandbox manager already running (run.sh must then leave them running)."""
    with _running(*isolated_config) as te:
        yield te


@pytest.fixture(scope="module")
def running_module(tiny_model):
    """``running``, shared by the tests of one module (e.g. one warm start reused by several runs)."""
    with _isolated_config() as tc, _running(*tc) as te:
        yield te


@contextlib.contextmanager
def _running(tmp, cfg):

    env = dict(os.environ, LTS_CONFIG_DIR=str(cfg), LTS_RUNS_DIR=str(tmp / "runs"))
    env.pop("TINKER_API_KEY", None)
    rt = yaml.safe_load((cfg / "runtime.yaml").read_text())
    adm = yaml.safe_load((cfg / "admin.yaml").read_text())
    procs = []
    try:  # stop both services whatever happens, set-up failures included
        for svc, url in (("backend", f"http://127.0.0.1:{rt['backend']['port']}/api/v1/healthz"),
                         ("admin", f"http://127.0.0.1:{adm['admin']['port']}/health")):
            serve_sh(svc, url, env, tmp, 120, procs)
        yield tmp, env
    finally:
        for p in procs:
            stop(p)
