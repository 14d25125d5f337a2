"""The seed's task fetch (``prepare_sandbox.py --task ROOT --task-id ID``), task.toml schema 1.0 / 1.4
with unknown keys kept and reported, and the offline-build substitution of the uv installer line."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.sandbox import offline_build
from services.sandbox.docker_images import OFFLINE_CACHE
from services.tasks.sources.fetch import FetchError, fetch_task, find_task
from services.tasks.task import load_task

REPO = Path(__file__).resolve().parents[2]
LIKE = REPO / "datasets" / "swebench-verified-like"
TASK_ID = "psf__requests-90003"


def _tree(d: Path) -> dict[str, tuple[bytes, int]]:
    return {p.relative_to(d).as_posix(): (p.read_bytes(), p.stat().st_mode & 0o777) for p in d.rglob("*")
            if p.is_file()}


def test_fetch_copies_one_task_byte_for_byte_and_records_it(tmp_path):
    wheel = tmp_path / "rl_rock-1.11.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x03\x04 not really a wheel")
    rock = tmp_path / "ROCK"
    rock.mkdir()
    root = tmp_path / "seed"
    r = subprocess.run([sys.executable, "prepare_sandbox.py", "--task", str(root), "--task-id", TASK_ID,
                        "--source", str(LIKE), "--rock-root", str(rock), "--wheel", str(wheel)], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    dest = root / "assets" / "harbor-tasks" / TASK_ID
    assert _tree(dest) == _tree(LIKE / TASK_ID)                       # bytes and modes (test.sh executable)
    assert sorted(p.name for p in (root / "assets" / "harbor-tasks").iterdir()) == [TASK_ID]   # exactly one
    m = json.loads((root / "sandbox-preparation" / "manifest.json").read_text())
    e = m["fetched"][TASK_ID]
    assert e["files"] == {k: hashlib.sha256(v).hexdigest() for k, (v, _) in _tree(LIKE / TASK_ID).items()}
    assert e["source"]["kind"] == "directory" and e["source"]["task_path"] == str(LIKE / TASK_ID)
    assert list(e["images"]) == ["swebench/sweb.eval.x86_64.psf_1776_requests-90003:latest"]
    assert e["rock_root"]["path"] == str(rock)
    assert e["wheel"]["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert m["version"] == 1 and "tasks" in m       # the preparation manifest's own format is kept
    # a second fetch of another task keeps the first record; a changed source replaces the copy
    fetch_task(root, "pallets__flask-90001", LIKE)
    m = json.loads((root / "sandbox-preparation" / "manifest.json").read_text())
    assert set(m["fetched"]) == {TASK_ID, "pallets__flask-90001"}


def test_fetch_validates_paths_and_names(tmp_path):
    with pytest.raises(FetchError, match="--rock-root .*no such directory"):
        fetch_task(tmp_path, TASK_ID, LIKE, rock_root=tmp_path / "missing")
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(FetchError, match="not a wheel"):
        fetch_task(tmp_path, TASK_ID, LIKE, wheel=tmp_path / "x.txt")
    with pytest.raises(FetchError, match="no task 'nope__nope-1'"):
        fetch_task(tmp_path, "nope__nope-1", LIKE)
    with pytest.raises(FetchError, match="task directory name"):
        fetch_task(tmp_path, "../etc", LIKE)
    # the same id in two datasets of one source folder is ambiguous
    src = tmp_path / "src"
    for d in ("a", "b"):
        (src / d / "t1").mkdir(parents=True)
        (src / d / "t1" / "task.toml").write_text("")
    with pytest.raises(FetchError, match="ambiguous"):
        fetch_task(tmp_path / "root", "t1", src)
    assert not (tmp_path / "root" / "assets").exists()


def test_fetch_finds_a_published_task_by_its_swebench_instance_id(tmp_path):
    """`--task-id pallets__flask-5014` (or `swe-bench/pallets__flask-5014`) finds the published directory
    `swebench-verified__pallets__flask-5014` (issue 43 item 6)."""
    src = tmp_path / "src" / "swebench-verified__acme__widget-7"
    (src / "tests").mkdir(parents=True)
    (src / "task.toml").write_text("")
    (src / "tests" / "config.json").write_text(json.dumps({"instance_id": "acme__widget-7"}))
    for tid in ("acme__widget-7", "swe-bench/acme__widget-7", "swebench-verified__acme__widget-7"):
        assert find_task(tmp_path / "src", tid) == src, tid


def test_published_schema_1_0_loads_and_unknown_keys_are_kept_and_reported(tmp_path):
    t = load_task(LIKE / TASK_ID)
    assert t.config.schema_version == "1.0" and t.warnings == []
    assert t.config.task is not None and t.config.task.keywords[0] == "swe-bench"
    assert t.config.verifier.network_mode.value == "public" and t.config.agent.network_mode.value == "no-network"
    assert (t.config.verifier.timeout_sec, t.config.agent.timeout_sec) == (3000, 3000)
    assert (t.config.environment.memory_mb, t.config.environment.storage_mb) == (4096, 10240)
    d = tmp_path / "t"
    subprocess.run(["cp", "-a", str(LIKE / TASK_ID), str(d)], check=True)
    toml = (d / "task.toml").read_text().replace("[verifier]\n", "[verifier]\ntimeout_secs = 5\n")
    (d / "task.toml").write_text(toml + "\n[harbor_future]\nflag = true\n")
    t = load_task(d)
    assert any("verifier.timeout_secs" in w for w in t.warnings) and any("harbor_future" in w for w in t.warnings)
    assert t.config.verifier.model_extra == {"timeout_secs": 5}
    assert t.config.model_extra == {"harbor_future": {"flag": True}}


def test_offline_context_replaces_exactly_the_uv_line(tmp_path):
    env = tmp_path / "environment"
    env.mkdir()
    src = (LIKE / TASK_ID / "environment" / "Dockerfile").read_bytes()
    (env / "Dockerfile").write_bytes(src)
    rec = offline_build.offline_context(env, tmp_path / "ctx", OFFLINE_CACHE)
    assert rec["original_sha256"] == hashlib.sha256(src).hexdigest()
    [sub] = rec["substitutions"]
    assert sub["line"] == 5 and sub["original"] == "RUN curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh"
    new = (tmp_path / "ctx" / "Dockerfile").read_text().splitlines()
    old = src.decode().splitlines()
    assert "curl" not in "\n".join(new) and (tmp_path / "ctx" / ".lts-offline" / sub["wheel"]).is_file()
    assert [ln for ln in old if "curl" not in ln] == [ln for ln in new if ln in old]   # nothing else touched
    assert (env / "Dockerfile").read_bytes() == src                                      # the task is untouched
    # any other network step is refused, naming the line
    (env / "Dockerfile").write_text(src.decode() + "RUN pip install requests\n")
    with pytest.raises(offline_build.OfflineBuildError, match=r"Dockerfile:8: `RUN pip install requests`"):
        offline_build.offline_context(env, tmp_path / "ctx2", OFFLINE_CACHE)
    (env / "Dockerfile").write_text(src.decode() + "RUN python -m pip install --no-index -f /w x\n")
    offline_build.offline_context(env, tmp_path / "ctx3", OFFLINE_CACHE)   # no network: allowed
    assert os.environ.get(offline_build.ENV_FLAG) is None
