"""The project client satisfies services.common.sandbox_api.Sandbox, and the cookbook adapter
satisfies tinker_cookbook.sandbox.SandboxInterface (tinker-cookbook 0.5.8), end to end."""

from __future__ import annotations

import pytest
from tinker_cookbook.sandbox import SandboxInterface, SandboxTerminatedError

from services.common.sandbox_api import Sandbox
from services.sandbox.client import SandboxManagerClient
from services.sandbox.cookbook_adapter import harbor_sandbox_factory

from .conftest import requires_bwrap, requires_root, run

pytestmark = [requires_bwrap, requires_root]


def test_client_protocol_and_upload_dir(admin, base_repo, tmp_path):
    (tmp_path / "up" / "sub").mkdir(parents=True)
    (tmp_path / "up" / "sub" / "t.sh").write_text("echo uploaded\n")

    async def main():
        async with SandboxManagerClient(admin.url, admin.key) as mgr:
            sb = await mgr.create(base_dir=base_repo)
            assert isinstance(sb, Sandbox)
            await sb.upload_dir(str(tmp_path / "up"), "/tests")
            r = await sb.run("bash /tests/sub/t.sh; echo err >&2; exit 4", timeout=10)
            cwd = await sb.run("pwd", cwd="/tmp", env={"V": "1"})
            await sb.write_file("/workspace/b.bin", b"\x00\x01\xff")
            raw = await sb.read_bytes("/workspace/b.bin")
            await sb.heartbeat()
            await sb.close()
            return r, cwd, raw
    r, cwd, raw = run(main())
    assert r.exit_code == 4 and r.output == "uploaded\nerr\n"
    assert cwd.output == "/tmp\n"
    assert raw == b"\x00\x01\xff"


def test_cookbook_sandbox_interface(admin, base_repo):
    pytest.importorskip("tinker_cookbook")

    async def main():
        async with SandboxManagerClient(admin.url, admin.key) as mgr:
            factory = harbor_sandbox_factory(mgr, base_for=lambda env_dir: base_repo)
            sb = await factory(base_repo / "environment", 600)
            assert isinstance(sb, SandboxInterface)
            await sb.send_heartbeat()
            w = await sb.write_file("/tests/test.sh", "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
                                    executable=True)
            await sb.run_command("mkdir -p /logs/verifier", workdir="/root")
            r = await sb.run_command("/tests/test.sh && cat secret_base.txt && echo e >&2")
            reward = await sb.read_file("/logs/verifier/reward.txt")
            head = await sb.read_file("/workspace/secret_base.txt", max_bytes=4)
            await sb.cleanup()
            with pytest.raises(SandboxTerminatedError):
                await sb.run_command("true")
            return w, r, reward, head
    w, r, reward, head = run(main())
    assert w.exit_code == 0
    assert r.exit_code == 0 and r.stdout == "base-content\n" and r.stderr == "e\n"
    assert reward.stdout.strip() == "1"
    assert head.stdout == "base"
