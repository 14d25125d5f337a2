"""Harbor's own runner (harbor==0.26.0, .venv-harbor from `bash setup.sh harbor`) as an outside
check: `harbor run -a oracle -e services.tasks.harbor_env:LtsSandboxEnvironment` scores reward 1
on every sample task through our sandbox manager's docker backend; the `nop` agent scores 0."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO, SAMPLE, containers_of

HARBOR = REPO / ".venv-harbor" / "bin" / "harbor"


def _harbor(admin, agent: str, path: Path, jobs: Path) -> dict[str, float]:
    if not HARBOR.exists():
        msg = "Harbor is not installed: run `bash setup.sh harbor`"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: {msg}")
        pytest.skip(msg)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LTS_SANDBOX_URL": admin.url,
           "LTS_SANDBOX_KEY": admin.key, "PYTHONPATH": str(REPO)}
    r = subprocess.run([str(HARBOR), "run", "-p", str(path), "-a", agent, "-n", "3", "-o", str(jobs),
                        "-e", "services.tasks.harbor_env:LtsSandboxEnvironment"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rewards = {}
    for res in jobs.glob("*/*/result.json"):
        data = json.loads(res.read_text())
        assert not data.get("exception_info"), data["exception_info"]
        rewards[data["task_name"]] = data["verifier_result"]["rewards"]["reward"]
    return rewards


def test_harbor_oracle_reward_1_on_every_sample_task(docker_admin, docker_client, tmp_path):
    rewards = _harbor(docker_admin, "oracle", SAMPLE, tmp_path / "jobs")
    assert len(rewards) == 3 and set(rewards.values()) == {1.0}, rewards
    assert containers_of(docker_client, docker_admin.worker) == []   # Harbor's stop closed every sandbox


def test_harbor_nop_agent_scores_0(docker_admin, tmp_path):
    task = next(SAMPLE.glob("sample__stats-*"))
    assert list(_harbor(docker_admin, "nop", task, tmp_path / "jobs").values()) == [0.0]
