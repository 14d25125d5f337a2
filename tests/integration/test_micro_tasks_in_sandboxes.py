"""Issues 3 + 4 together: every built-in micro task validates (gold = 1, untouched = 0, no git
history leak) inside real isolated sandboxes from the sandbox manager."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from helpers import REPO
from services.tasks.preparation.prepare import prepare_tasks
from services.tasks.task import load_dataset

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing (bash setup.sh system)")


def test_every_micro_task_validates_in_real_sandboxes(sandbox_admin, tmp_path):
    tasks = load_dataset(REPO / "datasets" / "micro").tasks
    clients = {}

    async def factory(base_dir):
        loop = asyncio.get_running_loop()
        if loop not in clients:
            clients[loop] = sandbox_admin.client()
        return await clients[loop].create(base_dir)

    manifest = asyncio.run(prepare_tasks(tasks, tmp_path, validate=True, factory=factory, jobs=2, progress=False))
    entries = manifest["tasks"]
    bad = {k: v.get("reason") or v.get("validation") for k, v in entries.items() if v.get("excluded")}
    assert not bad, bad
    assert len(entries) == len(tasks) >= 40
    for k, v in entries.items():
        val = v["validation"]
        assert val["gold_reward"] == 1.0 and val["empty_reward"] == 0.0 and not val["history_problems"], (k, val)
