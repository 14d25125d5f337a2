"""Issue 35, fast checks of the seed's command-line semantics (the end-to-end run is
tests/integration/test_seed_quickstart.py): --task-id finds built-in then published tasks, a rollout-only
configuration refuses training, the agent's budgets come from config/harbor.yaml with flags over them."""

from __future__ import annotations

import shutil

import pytest

import cookbook.cli as cli
from cookbook.cli import parse
from cookbook.rollout import agent_config, budget_flags
from cookbook.tasks import PUBLISHED, load_tasks
from helpers import REPO


def test_task_id_takes_built_in_tasks_first_then_the_published_ones(tmp_path):
    dest = tmp_path / PUBLISHED / "acme__widget-7"
    shutil.copytree(REPO / "datasets" / "micro" / "clamp", dest)
    (dest / "task.toml").write_text((dest / "task.toml").read_text().replace("lts-micro/clamp", "acme/widget-7"))
    tasks = load_tasks("micro", None, ["absolute", "acme__widget-7"], root=tmp_path)
    assert [t.name for t in tasks] == ["lts-micro/absolute", "acme/widget-7"] and tasks[1].path == dest
    with pytest.raises(SystemExit, match="assets/harbor-tasks"):
        load_tasks("micro", None, ["nosuch__task-1"], root=tmp_path)


def test_task_id_accepts_the_swebench_instance_id_and_lists_close_matches(tmp_path):
    """A published SWE-bench task is found by its instance id (tests/config.json) and the published
    `swe-bench/<instance_id>` name, not only by its directory or slug; a miss lists close ids (issue 43)."""
    dest = tmp_path / PUBLISHED / "swebench-verified__pallets__flask-90001"
    shutil.copytree(REPO / "datasets" / "swebench-verified-like" / "pallets__flask-90001", dest)
    toml = dest / "task.toml"
    toml.write_text(toml.read_text().replace('name = "swebench-verified-like/pallets__flask-90001"',
                                             'name = "swebench-verified/swebench-verified__pallets__flask-90001"'))
    for tid in ("pallets__flask-90001", "swe-bench/pallets__flask-90001", "swebench-verified__pallets__flask-90001"):
        tasks = load_tasks("micro", None, [tid], root=tmp_path)
        assert [t.path for t in tasks] == [dest], tid
    with pytest.raises(SystemExit, match=r"pallets__flask-9001.*close.*pallets__flask-90001"):
        load_tasks("micro", None, ["pallets__flask-9001"], root=tmp_path)


def test_a_rollout_only_configuration_refuses_training(monkeypatch):
    monkeypatch.setattr(cli, "load_config", lambda name: {"run": {"rollout_only": True}})
    with pytest.raises(SystemExit, match="rollout-only"):
        cli.refuse_training_when_rollout_only(parse(["ppo"]))
    cli.refuse_training_when_rollout_only(parse(["rollout"]))   # evaluation still runs


def test_agent_budgets_come_from_harbor_yaml_with_flags_over_them():
    base = agent_config()
    assert (base.budgets.max_turns, base.budgets.max_output_tokens, base.budgets.max_input_tokens,
            base.budgets.max_context, base.budgets.max_observation_chars, base.budgets.keep_last_observations) == (
        32, 8192, 32768, 65536, 12000, 8)
    over = agent_config("quickstart", budget_flags(4, 100))
    assert (over.budgets.max_turns, over.budgets.max_output_tokens) == (4, 100) and over.tools == ["edit"]
    with pytest.raises(SystemExit, match="--max-turns"):
        budget_flags(0, None)
