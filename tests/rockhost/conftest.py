"""A real ROCK admin (rl-rock 1.11.0: admin + Ray head + host worker rocklet) on this host's Docker
engine, started by ``python -m services.sandbox.rock_local`` (needs `bash setup.sh docker` and
`bash setup.sh rock`). Without them these tests skip, except under ``CI=true``, where they fail."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv-rock"
BASE_IMAGE = "lts/base:bookworm"


class RockAdmin(str):
    """The admin's URL, with the label of the containers it starts."""

    def __new__(cls, url: str, label: str):
        obj = super().__new__(cls, url)
        obj.label = label
        return obj


def _problem() -> str | None:
    if not (VENV / "bin" / "rocklet").exists():
        return "no .venv-rock (run: bash setup.sh rock)"
    r = subprocess.run(["docker", "image", "inspect", BASE_IMAGE], capture_output=True, text=True)
    if r.returncode != 0:
        return f"no usable Docker engine or no {BASE_IMAGE} ({r.stderr.strip()[:300]}); run: sudo bash setup.sh docker"
    return None


@pytest.fixture(scope="session")
def rock_admin():
    """The admin URL (``.label``: the lts.rock label of its containers); stopped (processes and
    containers) at the end of the session."""
    problem = _problem()
    if problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: {problem}")
        pytest.skip(problem)
    state = Path(tempfile.mkdtemp(prefix="lts-rock-"))
    cmd = [sys.executable, "-m", "services.sandbox.rock_local"]
    r = subprocess.run([*cmd, "start", "--state", str(state)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"rock_local start failed:\n{r.stdout}\n{r.stderr}"
    label = json.loads((state / "pids.json").read_text())["label"]
    try:
        yield RockAdmin(r.stdout.strip().splitlines()[-1], label)
    finally:
        r = subprocess.run([*cmd, "stop", "--state", str(state)], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=lts.rock={label}"], capture_output=True,
                              text=True).stdout
        assert not left.strip(), f"ROCK containers left: {left}"
        shutil.rmtree(state, ignore_errors=True)
