"""Harbor's own runner (harbor==0.26.0, .venv-harbor from `bash setup.sh harbor`) as an outside
check: `harbor run -a oracle -e services.tasks.harbor_env:LtsSandboxEnvironment` scores reward 1
on every sample task through our sandbox manager's docker backend; the `nop` agent scores 0.

And on a task in the published SWE-bench Verified layout (issue 43: the stand-in pallets__flask-90001 of
datasets/swebench-verified-like, written by services/tasks/sources/swebench_like.py: swebench's test.sh, `uv run
parser.py`, an upstream requirements file fetched at grading, `[agent] network_mode = "no-network"`, `[verifier]
network_mode = "public"`): oracle 1 / nop 0, as our validation grades it. Before, Harbor refused the environment
("cannot change network policy after start"): the agent phase and the verifier phase need different networks."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from services.sandbox import offline_build
from services.tasks.grading.network import verifier_network
from services.tasks.sources import swebench_like as sl
from services.tasks.task import load_task

from .conftest import REPO, SAMPLE, containers_of

HARBOR = REPO / ".venv-harbor" / "bin" / "harbor"


def _harbor(admin, agent: str, path: Path, jobs: Path, env: dict[str, str] | None = None) -> dict[str, float]:
    if not HARBOR.exists():
        msg = "Harbor is not installed: run `bash setup.sh harbor`"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: {msg}")
        pytest.skip(msg)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LTS_SANDBOX_URL": admin.url,
           "LTS_SANDBOX_KEY": admin.key, "PYTHONPATH": str(REPO), **(env or {})}
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


PUBLISHED = REPO / "datasets" / "swebench-verified-like" / "pallets__flask-90001"


def test_harbor_on_a_published_layout_task_gold_1_nop_0(net_admin, docker_client, tmp_path):
    """`harbor run` on the published-layout stand-in: the agent phase in a `none` sandbox, the verifier moved into a
    `registry` one (the manager's mirror: uv's packages, the upstream file exported from the image's history);
    oracle 1, nop 0, no trial exception, every sandbox closed."""
    assert sl.build_images(docker_client, sl.DEFAULT_CACHE, PUBLISHED.parent, only=[PUBLISHED.name])
    task = load_task(PUBLISHED)
    assert (task.config.agent.network_mode, verifier_network(task)) == ("no-network", "registry")
    env = {"LTS_MIRROR_DIR": str(net_admin.dir / "mirror"), offline_build.ENV_FLAG: "1"}
    rewards = {}
    for agent in ("oracle", "nop"):
        got = _harbor(net_admin, agent, PUBLISHED, tmp_path / agent, env)
        if agent == "oracle":   # the trial's agent phase ran without network, its verifier on the mirror
            log = next((tmp_path / agent).glob("*/*/verifier/test-stdout.txt")).read_text()
            assert ">>>>> Start Test Output" in log and "GRADING ERROR" not in log, log[-3000:]
        rewards[agent] = got[task.name]
    assert rewards == {"oracle": 1.0, "nop": 0.0}, rewards
    assert containers_of(docker_client, net_admin.worker) == []
