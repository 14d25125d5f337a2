"""Typed service configs (issue 42 item 5): a typo in any service's YAML is refused at start with one line naming
the file and the key (and the close match), instead of being silently ignored; every key the templates and
configure.py write is accepted."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from services.common.budgets import Budgets
from services.common.config import ConfigError, load_config, read_config
from services.common.service_configs import SCHEMAS
from services.common.service_configs import Budgets as BudgetsSection
from services.modelservice import config as mconfig
from services.sandbox import config as sbconfig
from services.sandbox.client import SandboxManagerClient

REPO = Path(__file__).resolve().parents[2]
RUNTIME_PY = str(REPO / ".venv-runtime" / "bin" / "python")
CONFIGURE_FLAGS = [   # each set writes other keys: all must be accepted
    [],
    ["--device", "cuda", "--sampler", "static", "--ray-trainers", "2", "--ray-samplers", "1", "--ray-address", "auto",
     "--rollout-only", "--task-id", "absolute", "--sandbox-backend", "docker"],
    ["--rock-base-url", "http://rock:8080", "--rock-cluster", "c1", "--rock-header", "X-Key=1234",
     "--outer-image", "python:3.11", "--model", "Qwen/Qwen3-0.6B"],
]


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), **kw)


def _check_all(cfg_dir: Path) -> None:
    for name in SCHEMAS:
        load_config(name, cfg_dir / f"{name}.yaml")
    data, source = read_config("admin", cfg_dir / "admin.yaml")
    sbconfig.check_config(data, sbconfig.AdminFile, source)


def test_templates_and_every_configure_flag_set_are_accepted(tmp_path: Path):
    _check_all(REPO / "templates")   # read directly (no config/ yet), rendered with the defaults
    for i, flags in enumerate(CONFIGURE_FLAGS):
        out = tmp_path / str(i)
        r = _run([sys.executable, "configure.py", "--out", str(out), *flags])
        assert r.returncode == 0, r.stdout + r.stderr
        _check_all(out)


def test_schema_keys_match_the_code_that_reads_them():
    assert set(BudgetsSection.model_fields) == {f.name for f in dataclasses.fields(Budgets)}


def _assert_refused(r: subprocess.CompletedProcess, path: Path, key: str, near: str) -> None:
    err = r.stderr.strip()
    print(f"exit {r.returncode}: {err[-400:]}")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{path}: unknown key {key!r} (did you mean {near!r}?)" in err, err[-2000:]
    assert "Traceback" not in err, err[-2000:]


def test_backend_refuses_a_typo_in_runtime_yaml_and_engine_yaml_at_start(tmp_path: Path):
    rt = tmp_path / "runtime.yaml"
    base = {"backend": {"port": 1, "api_keys": ["tml-x"], "state_dir": str(tmp_path / "state"),
                        "log_file": str(tmp_path / "backend.log")},
            "runtime": {"models": [{"name": "m", "path": str(tmp_path)}]}}
    rt.write_text(yaml.safe_dump({**base, "backend": {**base["backend"], "sesion_timeout_s": 5}}))
    _assert_refused(_run([RUNTIME_PY, "-m", "services.backend", "--config", str(rt)]), rt,
                    "backend.sesion_timeout_s", "session_timeout_s")
    eng = tmp_path / "engine.yaml"
    eng.write_text(yaml.safe_dump({"engine": {"device": "cpu", "max_sampler_snapshot": 4}}))
    rt.write_text(yaml.safe_dump({**base, "engine_config": str(eng)}))
    _assert_refused(_run([RUNTIME_PY, "-m", "services.backend", "--config", str(rt)]), eng,
                    "engine.max_sampler_snapshot", "max_sampler_snapshots")
    rt.write_text(yaml.safe_dump({**base, "runtime": {"models": [{"name": "m", "path": "x", "tokenizer": "t"}]}}))
    _assert_refused(_run([RUNTIME_PY, "-m", "services.backend", "--config", str(rt)]), rt,
                    "runtime.models.0.tokenizer", "tokenizer_id")


@pytest.mark.parametrize("role", ["admin", "worker"])
def test_sandbox_manager_refuses_a_typo_in_admin_yaml_at_start(tmp_path: Path, role: str):
    path = tmp_path / "admin.yaml"
    path.write_text(yaml.safe_dump({"auth": {"key": "k"}, "state_dir": str(tmp_path / "state"),
                                    "lifecycle": {"lease_s": 60, "warm_pool": {"sise": 2}}}))
    _assert_refused(_run([sys.executable, "-m", "services.sandbox", role, "--config", str(path)]), path,
                    "lifecycle.warm_pool.sise", "size")


def test_modelservice_refuses_a_typo_in_its_config_at_start(tmp_path: Path):
    path = tmp_path / "modelservice.yaml"
    path.write_text(yaml.safe_dump({"modelservice": {"port": 0, "max_sesions": 4},
                                    "tinker": {"base_url": "http://127.0.0.1:1", "api_key": "tml-x",
                                               "base_model": "m"}}))
    _assert_refused(_run([sys.executable, "-m", "services.modelservice", "--config", str(path)]), path,
                    "modelservice.max_sesions", "max_sessions")
    with pytest.raises(ConfigError, match="unknown key 'modelservice.max_sesions'"):
        mconfig.load(str(path))


def test_harbor_yaml_typo_is_refused_where_it_is_read(tmp_path: Path):
    path = tmp_path / "harbor.yaml"
    path.write_text(yaml.safe_dump({"sandbox": {"base_url": "http://127.0.0.1:1", "key_headr": "X-Key"},
                                    "agent": {"budgets": {"max_turn": 3}}}))
    with pytest.raises(ConfigError) as e:
        SandboxManagerClient.from_config(str(path))
    print(e.value)
    assert f"{path}: unknown key 'sandbox.key_headr' (did you mean 'key_header'?)" in str(e.value)
    assert f"{path}: unknown key 'agent.budgets.max_turn' (did you mean 'max_turns'?)" in str(e.value)
