"""Before validation, the tools the verifier calls that the Dockerfiles install over the network (`uv`, from
astral's `curl … | sh` line) must resolve in the task's environment the way test.sh calls them (its cwd, env
and PATH settings) (issue 43 item 2). Offline, that line fails inside `sh` and the build succeeds anyway, so the
image lacks uv: validation now says so in one line with the fix, instead of running the gold solution into an
infrastructure failure. No Docker needed: a local-backend sandbox has no uv either."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import REPO

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None and os.environ.get("CI") != "true",
                                reason="bubblewrap missing (bash setup.sh system)")


def test_validation_names_a_missing_verifier_tool(sandbox_admin, tmp_path: Path):
    task = tmp_path / "tasks" / "clamp"
    shutil.copytree(REPO / "datasets" / "micro" / "clamp", task)
    sh = task / "tests" / "test.sh"   # the SWE-bench adapter's grading lines, after the micro task's own
    sh.write_text(sh.read_text() + '\nexport PATH="$HOME/.local/bin:$PATH"\ncd /tests\n'
                  'uv run parser.py /logs/verifier/test-output.log | tee -a /logs/verifier/parser-output.txt\n')
    cfg = tmp_path / "config"
    cfg.mkdir()
    (cfg / "harbor.yaml").write_text(yaml.safe_dump({"sandbox": {
        "base_url": sandbox_admin.url, "key": sandbox_admin.key, "flavor": "local"}}))
    r = subprocess.run([sys.executable, "prepare_sandbox.py", str(task), "--validate", "--sandbox", "manager",
                        "--out", str(tmp_path / "prep"), "--no-progress"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, LTS_CONFIG_DIR=str(cfg)))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    [entry] = json.loads((tmp_path / "prep" / "manifest.json").read_text())["tasks"].values()
    reason = entry.get("reason") or ""
    assert entry["excluded"] and reason.startswith(
        "verifier toolchain: test.sh calls uv, which does not resolve in the task's environment"), entry
    assert "Fix: prepare with --offline-build" in reason and "\n" not in reason
    assert "EXCLUDED" in r.stdout and "verifier toolchain: test.sh calls uv" in r.stdout


def test_tool_calls_of_the_published_test_sh():
    from services.tasks.preparation.prepare import verifier_tool_calls  # noqa: PLC0415 (the function under test: item 2)
    from services.tasks.task import load_task  # noqa: PLC0415

    published = load_task(REPO / "datasets" / "swebench-verified-like" / "pallets__flask-90001")
    assert verifier_tool_calls(published) == (["uv"], ['export PATH="$HOME/.local/bin:$PATH"'])
    assert verifier_tool_calls(load_task(REPO / "datasets" / "micro" / "clamp")) == ([], [])


def test_a_test_sh_that_installs_uv_itself_is_not_checked(tmp_path: Path):
    from services.tasks.preparation.prepare import verifier_tool_calls  # noqa: PLC0415
    from services.tasks.task import load_task  # noqa: PLC0415

    task = tmp_path / "clamp"
    shutil.copytree(REPO / "datasets" / "micro" / "clamp", task)
    sh = task / "tests" / "test.sh"
    sh.write_text(sh.read_text() + "\ncurl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh\n"
                  "source $HOME/.local/bin/env\nuv run parser.py x\nuvx ruff --version\n")
    assert verifier_tool_calls(load_task(task)) == ([], ["source $HOME/.local/bin/env"])
