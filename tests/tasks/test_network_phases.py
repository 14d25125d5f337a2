"""Network per phase: the agent gets none during RL whatever task.toml says (logged), unless
--agent-network task; a verifier asking for "public" gets the mirror-only "registry" mode; directory
bases (local backend) never carry a network."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest

from services.tasks.grading.bases import ImageRef
from services.tasks.grading.network import agent_network, verifier_network, with_network
from services.tasks.task import load_task


def _task(tmp: Path, agent: str | None, verifier: str | None) -> object:
    (tmp / "tests").mkdir(parents=True)
    (tmp / "environment").mkdir()
    (tmp / "solution").mkdir()
    (tmp / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    (tmp / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (tmp / "instruction.md").write_text("do it\n")
    agent_line = f'network_mode = "{agent}"' if agent else ""
    verifier_line = f'network_mode = "{verifier}"' if verifier else ""
    (tmp / "task.toml").write_text(textwrap.dedent(f"""\
        schema_version = "1.0"
        [agent]
        {agent_line}
        [verifier]
        {verifier_line}
        [environment]
        docker_image = "lts/base:bookworm"
        """))
    return load_task(tmp)


def test_agent_network_is_none_by_default_and_logged(tmp_path, caplog):
    task = _task(tmp_path / "t1", "public", "public")
    with caplog.at_level(logging.INFO, logger="services.tasks.grading.network"):
        assert agent_network(task) == "none"
    assert "overridden" in caplog.text
    assert agent_network(task, "task") == "public"
    assert agent_network(_task(tmp_path / "t2", "no-network", None), "task") == "none"
    assert agent_network(_task(tmp_path / "t3", "allowlist", None), "task") == "none"
    with pytest.raises(ValueError):
        agent_network(task, "open")


def test_verifier_network_and_bases(tmp_path):
    assert verifier_network(_task(tmp_path / "a", None, "public")) == "registry"
    assert verifier_network(_task(tmp_path / "b", None, None)) == "none"
    ref = ImageRef("img", "c0ffee", {"cpus": 1.0})
    reg = with_network(ref, "registry")
    assert (str(reg), reg.commit, reg.limits, reg.network) == ("img", "c0ffee", {"cpus": 1.0}, "registry")
    assert with_network(reg, "none").network is None
    assert with_network(tmp_path, "registry") == tmp_path
