"""Our ``rock`` backend and ``flavor="rock"`` client against a real ROCK admin (rl-rock 1.11.0,
admin + Ray + worker rocklet, sandboxes as containers on the local Docker engine): create, exec
(with stdin), sessions, upload, read/write, stop; and a sample task validated gold 1 / empty 0
in ROCK sandboxes. tests/sandbox/test_rock_compat.py stays the contract test against our admin."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import tarfile
import time

from transformers import AutoTokenizer

from cookbook.agent import Budgets
from cookbook.agent.agent import SampleOut
from cookbook.agent.scripted import gold_turns
from cookbook.rollout import AgentConfig, Failures, Rollouts
from services.sandbox.backends.base import ExecRequest, SandboxSpec, bash
from services.sandbox.backends.rock_backend import RockBackend
from services.sandbox.client import SandboxManagerClient
from services.sandbox.limits import Limits
from services.tasks.grading.bases import ImageRef
from services.tasks.preparation.prepare import prepare_tasks
from services.tasks.preparation.workspace import build_base
from services.tasks.task import load_dataset

from .conftest import BASE_IMAGE, REPO

SAMPLE = REPO / "datasets" / "swebench-sample"


def rock_containers(admin) -> list[str]:
    return subprocess.run(["docker", "ps", "-q", "--filter", f"label=lts.rock={admin.label}"], capture_output=True,
                          text=True).stdout.split()


def test_rock_backend_against_real_rock(rock_admin, tmp_path):
    base = tmp_path / "base"
    (base / "pkg").mkdir(parents=True)
    (base / "pkg" / "mod.py").write_text("X = 1\n")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = b"from a tar\n"
        info = tarfile.TarInfo("extra/t.txt")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))

    async def main():
        b = RockBackend(rock_admin, default_image=BASE_IMAGE, startup_timeout=120)
        await b.create("lts-rock-a", SandboxSpec(base_dir=str(base), limits=Limits(memory_mb=1024, cpus=1)))
        try:
            out = {"live": await b.list_live(), "containers": rock_containers(rock_admin)}
            out["base"] = await b.exec("lts-rock-a", ExecRequest(argv=bash("cat pkg/mod.py; id -u")))
            out["stdin"] = await b.exec("lts-rock-a", ExecRequest(argv=["wc", "-c"], stdin=b"12345"))
            out["err"] = await b.exec("lts-rock-a", ExecRequest(argv=bash("echo oops >&2; exit 3"), merge_stderr=True))
            await b.create_session("lts-rock-a", "s1", env={"GREETING": "hi"})
            out["s1a"] = await b.run_in_session("lts-rock-a", "s1", "cd /tmp && export N=7 && echo $GREETING", 30,
                                                10_000)
            out["s1b"] = await b.run_in_session("lts-rock-a", "s1", "echo $(pwd) $N", 30, 10_000)
            await b.close_session("lts-rock-a", "s1")
            await b.write_file("lts-rock-a", "/workspace/w.bin", b"\x00\x01binary\xff")
            out["read"] = await b.read_file("lts-rock-a", "/workspace/w.bin", 1000)
            await b.extract_tar("lts-rock-a", "/workspace", buf.getvalue())
            out["tar"] = await b.exec("lts-rock-a", ExecRequest(argv=["cat", "extra/t.txt"]))
        finally:
            await b.destroy("lts-rock-a")
        out["after"] = await b.list_live()
        return out

    out = asyncio.run(main())
    assert out["live"] == ["lts-rock-a"] and len(out["containers"]) == 1
    assert out["base"].exit_code == 0 and out["base"].stdout == b"X = 1\n0\n"
    assert out["stdin"].stdout.strip() == b"5"
    assert out["err"].exit_code == 3 and out["err"].stdout == b"oops\n"
    assert out["s1a"].output.strip() == "hi" and out["s1b"].output.strip() == "/tmp 7"   # session state persists
    assert out["read"] == b"\x00\x01binary\xff"
    assert out["tar"].stdout == b"from a tar\n"
    assert out["after"] == []
    for _ in range(50):   # ROCK stops the container asynchronously
        if not rock_containers(rock_admin):
            break
        asyncio.run(asyncio.sleep(0.2))
    assert rock_containers(rock_admin) == []


def test_sample_task_gold_1_empty_0_in_rock_sandboxes(rock_admin, tmp_path):
    """The flavor="rock" client as the task validator's sandbox factory: the task image (built
    offline, scrubbed) started by ROCK; gold patch 1, empty patch 0."""
    task = next(t for t in load_dataset(SAMPLE).tasks if "stats" in t.name)

    async def main():
        await prepare_tasks([task], tmp_path, backend="docker", progress=False, dataset="swebench-sample")
        async with SandboxManagerClient(rock_admin, flavor="rock") as c:
            async def factory(base):
                assert isinstance(base, ImageRef), base
                return await c.create(image=str(base), limits={"memory_mb": 1024, "cpus": 1})
            return await prepare_tasks([task], tmp_path, validate=True, factory=factory, backend="docker",
                                       force=True, progress=False, dataset="swebench-sample")
    manifest = asyncio.run(main())
    e = manifest["tasks"][task.slug]
    v = e["validation"]
    assert not e["excluded"], e["reason"]
    assert (v["gold_reward"], v["empty_reward"]) == (1.0, 0.0), v


def test_one_rollout_in_a_rock_sandbox(rock_admin, tmp_path, tiny_model):
    """The real agent loop and verifier (in-place grading) in a ROCK sandbox through the
    flavor="rock" client; the policy answers with the micro task's gold edit → reward 1."""
    task = next(t for t in load_dataset(REPO / "datasets" / "micro").tasks if t.name.endswith("absolute"))
    base = tmp_path / "base"
    build_base(task, base)
    tok = AutoTokenizer.from_pretrained(str(tiny_model[1]))
    text = gold_turns(json.loads((task.solution_dir / "edit.json").read_text()), read=False, submit=False)[0]

    class GoldPolicy:
        async def sample(self, prompt, max_tokens):
            toks = list(tok.encode(text, add_special_tokens=False)) + [tok.convert_tokens_to_ids("<|im_end|>")]
            return SampleOut(toks, [0.0] * len(toks), "stop")

    async def main():
        async with SandboxManagerClient(rock_admin, flavor="rock") as c:
            async def factory(b):
                return await c.create(b, image=BASE_IMAGE, limits={"memory_mb": 1024, "cpus": 1})
            cfg = AgentConfig(tools=["edit"], compact_schemas=True, budgets=Budgets(max_turns=1, max_output_tokens=56))
            ro = Rollouts(factory, {task.name: base}, tok, cfg, concurrency=1, max_retries=0, grading="in-place")
            f = Failures()
            return await asyncio.wait_for(ro.run_one(task, GoldPolicy(), f), 300), f.to_dict()
    traj, failures = asyncio.run(main())
    assert traj is not None, failures
    assert traj.reward == 1.0 and traj.stop_reason != "error", (traj.stop_reason, traj.error, traj.verifier)
    assert failures == {"infra": 0, "agent": 0, "verifier": 0, "retries": 0}
    assert rock_containers(rock_admin) == [] or _wait_gone(rock_admin)


def _wait_gone(admin) -> bool:
    deadline = time.monotonic() + 15
    while rock_containers(admin) and time.monotonic() < deadline:
        time.sleep(0.3)
    return rock_containers(admin) == []
