"""rl-rock's own SDK client (rock.sdk.sandbox.client.Sandbox, rl-rock 1.11.0) works unchanged
against our admin; and our ``rock`` backend (which drives a ROCK admin through that SDK) is
contract-tested against our own admin standing in for a real ROCK deployment."""

from __future__ import annotations

import pytest
from rock.actions import Command, CreateBashSessionRequest, ReadFileRequest, WriteFileRequest
from rock.sdk.sandbox.client import RunMode, Sandbox
from rock.sdk.sandbox.config import SandboxConfig

from services.sandbox.backends.base import ExecRequest, SandboxSpec, bash
from services.sandbox.backends.rock_backend import RockBackend
from services.sandbox.limits import Limits

from .conftest import requires_bwrap, requires_root, run

pytestmark = [requires_bwrap, requires_root]
rock = pytest.importorskip("rock.sdk.sandbox.client")


def test_rock_sdk_sandbox_against_our_admin(admin, tmp_path):
    local = tmp_path / "hello.txt"
    local.write_text("uploaded by rock sdk\n")

    async def main():
        sb = Sandbox(SandboxConfig(base_url=admin.url, image="python:3.11", memory="1g", cpus=1,
                                   extra_headers={"X-Key": admin.key}, startup_timeout=30))
        await sb.start()
        try:
            assert (await sb.is_alive()).is_alive
            status = await sb.get_status()
            assert status.sandbox_id == sb.sandbox_id and status.is_alive
            out = {}
            out["arun"] = await sb.arun("cd /tmp && export X=42 && echo hello-$X")
            await sb.create_session(CreateBashSessionRequest(session="s1", env={"GREETING": "hi"}))
            out["s1a"] = await sb.arun("cd /tmp && echo $GREETING", session="s1")
            out["s1b"] = await sb.arun("pwd", session="s1")
            out["nohup"] = await sb.arun("sleep 1; echo from-nohup", session="s1", mode=RunMode.NOHUP,
                                         wait_timeout=30, wait_interval=5)
            out["exec"] = await sb.execute(Command(command=["python3", "-c",
                                                            "import sys; print(sys.version_info[:2])"]))
            out["write"] = await sb.write_file(WriteFileRequest(content="abc\n", path="/workspace/f.txt"))
            out["read"] = await sb.read_file(ReadFileRequest(path="/workspace/f.txt"))
            out["upload"] = await sb.upload_by_path(str(local), "/workspace/up/hello.txt")
            out["cat"] = await sb.arun("cat /workspace/up/hello.txt")
            return sb.sandbox_id, out
        finally:
            await sb.stop()

    sid, out = run(main())
    assert out["arun"].output.strip() == "hello-42" and out["arun"].exit_code == 0
    assert out["s1a"].output.strip() == "hi" and out["s1b"].output.strip() == "/tmp"   # session state persists
    assert "from-nohup" in out["nohup"].output and out["nohup"].exit_code == 0
    assert out["exec"].stdout.strip() == "(3, 11)" and out["exec"].exit_code == 0
    assert out["write"].success and out["read"].content == "abc\n"
    assert out["upload"].success and out["cat"].output.strip() == "uploaded by rock sdk"


def test_rock_backend_contract_against_our_admin(admin, base_repo):
    """Our RockBackend -> rl-rock SDK -> (ROCK API) -> our admin."""

    async def main():
        b = RockBackend(admin.url, extra_headers={"X-Key": admin.key}, default_image="python:3.11", startup_timeout=30)
        await b.create("rockc-1", SandboxSpec(base_dir=str(base_repo), limits=Limits(memory_mb=512)))
        try:
            r1 = await b.exec("rockc-1", ExecRequest(argv=bash("cat secret_base.txt; ls pkg"), merge_stderr=True))
            r2 = await b.exec("rockc-1", ExecRequest(argv=["cat"], stdin=b"via-stdin"))
            await b.write_file("rockc-1", "/workspace/w.txt", b"written")
            data = await b.read_file("rockc-1", "/workspace/w.txt", 1000)
            await b.create_session("rockc-1", "s", env={"A": "1"})
            s1 = await b.run_in_session("rockc-1", "s", "cd /tmp; echo $A", 30, 1000)
            s2 = await b.run_in_session("rockc-1", "s", "pwd; false", 30, 1000)
            await b.close_session("rockc-1", "s")
            return r1, r2, data, s1, s2
        finally:
            await b.destroy("rockc-1")

    r1, r2, data, s1, s2 = run(main())
    assert r1.stdout == b"base-content\n__init__.py\n" and r1.exit_code == 0
    assert r2.stdout == b"via-stdin"
    assert data == b"written"
    assert s1.output.strip() == "1" and s1.exit_code == 0
    assert s2.output.strip() == "/tmp" and s2.exit_code == 1
