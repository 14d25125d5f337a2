"""Our ``rock`` backend and ``flavor="rock"`` client against a real ROCK admin (rl-rock 1.11.0,
admin + Ray + worker rocklet, sandboxes as containers on the local Docker engine): create, exec
(with stdin), sessions, upload, read/write, stop; and a sample task validated gold 1 / empty 0
in ROCK sandboxes. tests/sandbox/test_rock_compat.py stays the contract test against our admin."""

from __future__ import annotations

import asyncio
import io
import subprocess
import tarfile

from .conftest import BASE_IMAGE, REPO

SAMPLE = REPO / "datasets" / "swebench-sample"


def rock_containers(admin) -> list[str]:
    return subprocess.run(["docker", "ps", "-q", "--filter", f"label=lts.rock={admin.label}"], capture_output=True,
                          text=True).stdout.split()


def test_rock_backend_against_real_rock(rock_admin, tmp_path):
    from services.sandbox.backends.base import ExecRequest, SandboxSpec, bash
    from services.sandbox.backends.rock_backend import RockBackend
    from services.sandbox.limits import Limits

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
            out["s1a"] = await b.run_in_session("lts-rock-a", "s1", "cd /tmp && export N=7 && echo $GREETING", 30, 10_000)
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
    from services.sandbox.client import SandboxManagerClient
    from services.tasks.prepare import ImageRef, prepare_tasks
    from services.tasks.task import load_dataset

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
