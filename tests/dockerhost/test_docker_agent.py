"""A black-box agent (unmodified mini-swe-agent from .venv-agent) inside a task's container reaches
the ModelService as in local sandboxes: its socket bound in, no network. Scripted replies
(teacher-forced) apply the gold fix of a public-layout sample task -> the task's verifier gives 1."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shlex
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from cookbook.modelservice.agent_runner import AGENT_VENV, run_mini_swe_agent
from services.tasks.preparation.prepare import base_of

from .conftest import REPO, DockerAdmin, free_port


def _ms_helpers():
    spec = importlib.util.spec_from_file_location("lts_ms_conftest", REPO / "tests" / "modelservice" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_mini_swe_agent_in_a_task_container_scores_the_gold_fix(docker_client, sample_prep, backend):
    if not (AGENT_VENV / "bin" / "mini").exists():
        pytest.skip("no .venv-agent (bash setup.sh agent)")
    ds, _, manifest = sample_prep
    task = next(t for t in ds.tasks if "stats" in t.name)
    ms_helpers = _ms_helpers()
    root = Path(tempfile.mkdtemp(prefix="lts-docker-ms-"))
    ms = ms_helpers.start_modelservice(root / "ms", backend)
    port = free_port()
    admin = DockerAdmin(root / "admin", f"ms{port}", port,
                        docker={"bind_sources": [str(ms.socket.parent)], "runtime_paths": "auto"}).start()
    fixed = "    n = len(s)\n    if n % 2 == 0:\n        return (s[n // 2 - 1] + s[n // 2]) / 2\n"
    code = (f"import pathlib; p = pathlib.Path('stats/__init__.py'); "
            f"p.write_text(p.read_text().replace('    n = len(s)\\n', {fixed!r}, 1))")

    def call(cmd: str) -> str:
        return "<tool_call>\n" + json.dumps({"name": "bash", "arguments": {"command": cmd}}) + "\n</tool_call>"
    script = [call("pwd -P && git log --all --oneline | wc -l"), call("python3 -c " + shlex.quote(code)),
              call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]
    try:
        async def go():
            async with admin.client() as mgr:
                return await run_mini_swe_agent(task, mgr, ms.url, ms.key, ms.socket,
                                                base_of(manifest["tasks"][task.slug]),
                                                step_limit=5, max_tokens=256, timeout_s=240, replay=script)
        run = asyncio.run(go())
    finally:
        assert admin.stop() == 0
        ms.proc.send_signal(signal.SIGTERM)
        ms.proc.wait(30)
    traj = run.trajectory
    assert run.agent_traj["info"]["exit_status"] == "Submitted", run.output[-3000:]
    first = json.loads(traj.turns[0].observations[0])["output"].split()
    assert first == ["/testbed", "1"], first          # in the image's WORKDIR, history scrubbed
    assert traj.reward == 1.0 and traj.stop_reason == "submitted", run.summary()
