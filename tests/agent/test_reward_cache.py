"""The opt-in reward cache keys on the change that is graded: the patch bytes taken out of the
workspace (untracked files included, no repo config or filters in the way), or the write log of
write-only agents. Different changes never share a cached reward, identical ones do, and a cached
result equals a real grading."""

from __future__ import annotations

import asyncio
import contextlib
import json
from unittest import mock

import cookbook.rollout as rollout_mod
from cookbook.rollout import AgentConfig, Rollouts, _WriteLog
from helpers import REPO
from services.tasks.grading.cleangrade import base_commit, extract_patch
from services.tasks.preparation.hostsandbox import HostSandbox
from services.tasks.preparation.workspace import build_base
from services.tasks.task import load_dataset


def _with_gold_edit(text: str, edit: dict) -> str:
    lines = text.split("\n")
    lines[edit["line"] - 1] = edit["new"]
    return "\n".join(lines)


def _host(base):
    return HostSandbox.create(base_dir=base)


def _rollouts(task, base, **kw):
    return Rollouts(_host, {task.name: base}, None, AgentConfig(**kw), reward_cache=True)


def test_reward_cache_keys_on_the_whole_workspace(tmp_path, tiny_model):
    task = load_dataset(REPO / "datasets" / "micro").tasks[0]
    base = tmp_path / "base"
    build_base(task, base)
    ro = _rollouts(task, base)
    edit = json.loads((task.solution_dir / "edit.json").read_text())

    async def state(mutate: str | None):
        sb = await HostSandbox.create(base_dir=base)
        try:
            if mutate == "gold":
                path = f"/workspace/{edit['path']}"
                await sb.write_file(path, _with_gold_edit(await sb.read_file(path), edit))
            elif mutate:
                await sb.run(mutate, cwd="/workspace")
            key = (await extract_patch(sb, base_commit(base))).sha256
            res, cached = await ro._verify(sb, task)
            return key, res.reward, cached
        finally:
            await sb.close()

    async def go():
        return [await state(m) for m in (None, "gold", "gold", "echo x > untracked.txt", None,
                                         "echo '# c' >> " + edit["path"])]

    (k0, r0, c0), (k1, r1, c1), (k2, r2, c2), (k3, r3, c3), (k4, r4, c4), (k5, r5, c5) = asyncio.run(go())
    assert len({k0, k1, k3, k5}) == 4, "different workspaces must have different keys"
    assert k1 == k2 and k0 == k4
    assert (r0, r1, r2, r4) == (0.0, 1.0, 1.0, 0.0)
    assert (c0, c1, c2, c4) == (False, False, True, True)
    assert not c3 and not c5


def test_a_git_clean_filter_does_not_make_a_buggy_workspace_look_fixed(tmp_path, tiny_model):
    """The issue's attack: a clean filter that hands git the gold file for the buggy one. The patch is
    taken with a throw-away git dir (no repo config, attributes neutralised): it shows the real bytes."""
    task = load_dataset(REPO / "datasets" / "micro").tasks[0]
    base = tmp_path / "base"
    build_base(task, base)
    ro = _rollouts(task, base)
    edit = json.loads((task.solution_dir / "edit.json").read_text())
    gold_text = _with_gold_edit((base / edit["path"]).read_text(), edit)

    async def go():
        out = []
        for hack in (False, True):
            sb = await HostSandbox.create(base_dir=base)
            try:
                if hack:
                    await sb.write_file("/workspace/gold.txt", gold_text)
                    r = await sb.run("git config filter.g.clean 'cat /workspace/gold.txt' && "
                                     f"printf '{edit['path']} filter=g\\n' > .git/info/attributes && "
                                     "git add -A && git diff --cached --stat HEAD", cwd="/workspace")
                    assert edit["path"] in r.output  # the repo's own git now reports the fix
                else:
                    path = f"/workspace/{edit['path']}"
                    await sb.write_file(path, gold_text)
                ex = await extract_patch(sb, base_commit(base))
                res, cached = await ro._verify(sb, task)
                out.append((ex.patch.decode(), res.reward, cached))
            finally:
                await sb.close()
        return out

    (gold_patch, gold_r, _), (hack_patch, hack_r, hack_cached) = asyncio.run(go())
    assert gold_r == 1.0 and hack_r == 0.0 and not hack_cached
    assert f"+{edit['new']}" in gold_patch and f"+{edit['new']}" not in hack_patch.split("gold.txt")[0]


def test_concurrent_identical_workspaces_are_graded_once(tmp_path, tiny_model):

    task = load_dataset(REPO / "datasets" / "micro").tasks[0]
    base = tmp_path / "base"
    build_base(task, base)
    ro = _rollouts(task, base)
    calls = []
    real = rollout_mod.grade_patch

    async def counting(*a, **kw):
        calls.append(1)
        return await real(*a, **kw)

    async def one():
        sb = await HostSandbox.create(base_dir=base)
        try:
            return await ro._verify(sb, task)
        finally:
            await sb.close()

    async def go():
        return await asyncio.gather(*(one() for _ in range(4)))

    with mock.patch.object(rollout_mod, "grade_patch", counting):
        out = asyncio.run(go())
    assert len(calls) == 1 and [r.reward for r, _ in out] == [0.0] * 4 and sum(c for _, c in out) == 3


def test_write_only_agents_are_keyed_by_their_writes_without_running_anything(tmp_path, tiny_model):
    """With edit-only tools a repeated write sequence is a cache hit with no command in the sandbox
    (no patch to take); a failed write, or a tool that can change files another way, keys by the patch."""

    task = load_dataset(REPO / "datasets" / "micro").tasks[0]
    base = tmp_path / "base"
    build_base(task, base)
    ro = _rollouts(task, base, tools=["edit", "submit"])
    assert not isinstance(Rollouts(None, {}, None, AgentConfig(tools=["edit", "bash"]),
                                   reward_cache=True)._logged(object()), _WriteLog)
    assert not isinstance(Rollouts(None, {}, None, AgentConfig(tools=["edit", "run_test"]),
                                   reward_cache=True)._logged(object()), _WriteLog)
    assert not isinstance(Rollouts(None, {}, None, AgentConfig(tools=None), reward_cache=True)._logged(object()),
                          _WriteLog)
    # no cache
    assert not isinstance(Rollouts(None, {}, None, AgentConfig(tools=["edit"]))._logged(object()), _WriteLog)
    edit = json.loads((task.solution_dir / "edit.json").read_text())
    path = f"/workspace/{edit['path']}"

    async def state(contents: list[str], fail: bool = False, expect_hit: bool = False):
        sb = ro._logged(await HostSandbox.create(base_dir=base))
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
            with no_commands if expect_hit else contextlib.nullcontext():
                res, cached = await ro._verify(sb, task)
            return res.reward, cached
        finally:
            await sb.close()

    async def go():
        return [await state([]), await state(["gold"]), await state(["gold"], expect_hit=True),
                await state(["x = 1\n"]),
                await state(["x = 1\n", "gold"]), await state(["gold"], fail=True)]

    (r0, c0), (r1, c1), (r2, c2), (r3, c3), (r4, c4), (r5, c5) = asyncio.run(go())
    assert (r0, r1, r2, r3, r4) == (0.0, 1.0, 1.0, 0.0, 1.0) and (c0, c1, c2, c3) == (False, False, True, False)
    assert c4  # x-then-gold is a new write log, but its patch is gold's: a hit on the patch key
    assert r5 == 1.0 and c5  # the failed write: no write key, keyed (and hit) by the patch
