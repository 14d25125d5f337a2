"""The opt-in reward cache keys on every byte of the final workspace: different edits never share
a cached reward, identical ones do, and a cached result equals a real verification."""

from __future__ import annotations

import asyncio
import contextlib
import json

from cookbook.rollout import AgentConfig, Rollouts
from services.tasks.hostsandbox import HostSandbox
from services.tasks.task import load_dataset
from services.tasks.workspace import build_base

from helpers import REPO


def _with_gold_edit(text: str, edit: dict) -> str:
    lines = text.split("\n")
    lines[edit["line"] - 1] = edit["new"]
    return "\n".join(lines)


def test_reward_cache_keys_on_the_whole_workspace(tmp_path, tiny_model):
    task = load_dataset(REPO / "datasets" / "micro").tasks[0]
    build_base(task, tmp_path / "base")
    ro = Rollouts(None, {}, None, AgentConfig(), reward_cache=True)
    edit = json.loads((task.solution_dir / "edit.json").read_text())

    async def state(mutate: str | None):
        sb = await HostSandbox.create(base_dir=tmp_path / "base")
        try:
            if mutate == "gold":
                path = f"/workspace/{edit['path']}"
                await sb.write_file(path, _with_gold_edit(await sb.read_file(path), edit))
            elif mutate:
                await sb.run(mutate, cwd="/workspace")
            key = await ro._workspace_key(sb, task)
            res, cached = await ro._verify(sb, task)
            return key, res.reward, cached
        finally:
            await sb.close()

    async def go():
        return [await state(m) for m in (None, "gold", "gold", "echo x > untracked.txt", None, "echo '# c' >> " + edit["path"])]

    (k0, r0, c0), (k1, r1, c1), (k2, r2, c2), (k3, r3, c3), (k4, r4, c4), (k5, r5, c5) = asyncio.run(go())
    assert len({k0, k1, k3, k5}) == 4, "different workspaces must have different keys"
    assert k1 == k2 and k0 == k4
    assert (r0, r1, r2, r4) == (0.0, 1.0, 1.0, 0.0)
    assert (c0, c1, c2, c4) == (False, False, True, True)
    assert not c3 and not c5


def test_concurrent_identical_workspaces_are_verified_once(tmp_path, tiny_model):
    from unittest import mock

    import cookbook.rollout as rollout_mod

    task = load_dataset(REPO / "datasets" / "micro").tasks[0]
    build_base(task, tmp_path / "base")
    ro = Rollouts(None, {}, None, AgentConfig(), reward_cache=True)
    calls = []
    real = rollout_mod.verify

    async def counting(sb, t, timeout=None):
        calls.append(1)
        return await real(sb, t, timeout=timeout)

    async def one():
        sb = await HostSandbox.create(base_dir=tmp_path / "base")
        try:
            return await ro._verify(sb, task)
        finally:
            await sb.close()

    async def go():
        return await asyncio.gather(*(one() for _ in range(4)))

    with mock.patch.object(rollout_mod, "verify", counting):
        out = asyncio.run(go())
    assert len(calls) == 1 and [r.reward for r, _ in out] == [0.0] * 4 and sum(c for _, c in out) == 3


def test_write_only_agents_are_keyed_by_their_writes_without_running_anything(tmp_path, tiny_model):
    """With edit-only tools the cache key is the ordered list of writes (no git diff in the sandbox);
    a failed write, or a tool that can change files another way, falls back to the workspace diff."""
    from unittest import mock

    from cookbook.rollout import _WriteLog

    task = load_dataset(REPO / "datasets" / "micro").tasks[0]
    build_base(task, tmp_path / "base")
    ro = Rollouts(None, {}, None, AgentConfig(tools=["edit", "submit"]), reward_cache=True)
    assert not isinstance(Rollouts(None, {}, None, AgentConfig(tools=["edit", "bash"]), reward_cache=True)._logged(object()), _WriteLog)
    assert not isinstance(Rollouts(None, {}, None, AgentConfig(tools=["edit", "run_test"]), reward_cache=True)._logged(object()), _WriteLog)
    assert not isinstance(Rollouts(None, {}, None, AgentConfig(tools=None), reward_cache=True)._logged(object()), _WriteLog)
    assert not isinstance(Rollouts(None, {}, None, AgentConfig(tools=["edit"]))._logged(object()), _WriteLog)  # no cache
    edit = json.loads((task.solution_dir / "edit.json").read_text())
    path = f"/workspace/{edit['path']}"

    async def state(contents: list[str], fail: bool = False):
        sb = ro._logged(await HostSandbox.create(base_dir=tmp_path / "base"))
        assert isinstance(sb, _WriteLog)
        try:
            text = await sb.read_file(path)
            for c in contents:
                await sb.write_file(path, _with_gold_edit(text, edit) if c == "gold" else c)
            if fail:  # a write that fails part-way (the file's state is unknown)
                with mock.patch.object(sb._sb, "write_file", side_effect=OSError("disk full")):
                    try:
                        await sb.write_file(path, "x")
                    except OSError:
                        pass
                assert sb.dirty
            no_commands = mock.patch.object(sb._sb, "run", side_effect=AssertionError("ran a command"))
            with no_commands if not fail else contextlib.nullcontext():
                key = await ro._workspace_key(sb, task)
            res, cached = await ro._verify(sb, task)
            return key, res.reward, cached
        finally:
            await sb.close()

    async def go():
        return [await state(c) for c in ([], ["gold"], ["gold"], ["x = 1\n"], ["x = 1\n", "gold"])] + [await state(["gold"], fail=True)]

    (k0, r0, c0), (k1, r1, c1), (k2, r2, c2), (k3, r3, c3), (k4, r4, c4), (k5, r5, c5) = asyncio.run(go())
    assert all(":writes:" in k for k in (k0, k1, k2, k3, k4))
    assert k1 == k2 and len({k0, k1, k3, k4}) == 4        # order matters: x-then-gold is not gold
    assert (r0, r1, r2, r3, r4) == (0.0, 1.0, 1.0, 0.0, 1.0) and (c1, c2) == (False, True)
    assert ":writes:" not in k5 and r5 == 1.0                # the failed write: keyed by the workspace diff
