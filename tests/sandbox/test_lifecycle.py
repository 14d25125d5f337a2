"""Acceptance 3 (kill -9 of the admin, orphans reaped on restart; nothing outlives its TTL),
leases and heartbeats, reset of a workspace, the warm pool, and a separate worker process."""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest

from services.sandbox.client import SandboxManagerClient
from services.sandbox.errors import Conflict

from .conftest import (
    free_port,
    leftovers,
    requires_bwrap,
    requires_root,
    run,
    start_admin,
    wait_no_leftovers,
    write_config,
)

pytestmark = [requires_bwrap, requires_root]


def test_kill9_admin_then_restart_reaps_every_orphan(tmp_state, base_repo):
    admin = start_admin(tmp_state, "crash")
    ids: list[str] = []

    async def busy():
        mgr = SandboxManagerClient(admin.url, admin.key)
        for _ in range(4):
            sb = await mgr.create(base_dir=base_repo)
            ids.append(sb.sandbox_id)
            await sb.run("echo dirty >> pkg/__init__.py")
            # long-running commands, including setsid escapers, in flight at the kill
            asyncio.ensure_future(sb.run("setsid sleep 4001 & sleep 4002", timeout=300))
        await asyncio.sleep(1.0)
        admin.proc.send_signal(signal.SIGKILL)
        admin.proc.wait(10)
        await asyncio.sleep(0.2)
        try:
            await mgr.aclose()
        except Exception:
            pass

    try:
        run(busy())
        dead = leftovers(admin)
        assert dead["cgroups"] and dead["run_dirs"], dead   # the crash really left something behind
        admin2 = start_admin(tmp_state, "crash", port=admin.port, config=admin.config)
        try:
            left = wait_no_leftovers(admin2)
            assert not any(left.values()), left
            async def statuses():
                async with SandboxManagerClient(admin2.url, admin2.key) as mgr:
                    return [await (await mgr.attach(i)).status() for i in ids]
            for st in run(statuses()):
                assert st["is_alive"] is False and "restart" in st["end_reason"], st
        finally:
            assert admin2.stop() == 0
        assert not any(wait_no_leftovers(admin2).values())
    finally:
        if admin.proc.poll() is None:
            admin.proc.kill()


def test_ttl_and_lease(admin, base_repo):
    async def main():
        async with SandboxManagerClient(admin.url, admin.key) as mgr:
            short_ttl = await mgr.create(ttl_s=1.5)
            short_lease = await mgr.create(lease_s=1.5)
            kept = await mgr.create(lease_s=1.5)
            for _ in range(6):
                await asyncio.sleep(0.5)
                await kept.heartbeat()
            st = [await s.status() for s in (short_ttl, short_lease, kept)]
            with pytest.raises(Conflict):
                await short_ttl.run("true")
            await kept.close()
            return st
    ttl_st, lease_st, kept_st = run(main())
    assert ttl_st["is_alive"] is False and ttl_st["end_reason"] == "ttl expired"
    assert lease_st["is_alive"] is False and lease_st["end_reason"] == "lease expired"
    assert kept_st["is_alive"] is True


def test_long_command_outlives_lease_but_not_ttl(admin):
    async def main():
        async with SandboxManagerClient(admin.url, admin.key) as mgr:
            sb = await mgr.create(lease_s=1.0, ttl_s=60)
            r = await sb.run("sleep 2.5; echo done", timeout=10)   # busy: the lease does not end
            await sb.close()
            return r
    assert run(main()).output == "done\n"


def test_reset_returns_workspace_to_base_fast(admin, base_repo):
    async def main():
        async with SandboxManagerClient(admin.url, admin.key) as mgr:
            sb = await mgr.create(base_dir=base_repo)
            await sb.run("echo junk > new.txt && rm secret_base.txt && echo x >> pkg/__init__.py && echo t > /tmp/t")
            dirty = await sb.run("git status --short; ls /tmp")
            seconds = await sb.reset()
            clean = await sb.run("git status --short; ls /tmp | grep -x t; cat secret_base.txt")
            await sb.close()
            return dirty, seconds, clean
    dirty, seconds, clean = run(main())
    assert "new.txt" in dirty.output and " D secret_base.txt" in dirty.output
    assert clean.output == "base-content\n", clean.output
    assert seconds < 0.5   # milliseconds in practice; generous for a loaded CI machine


def test_warm_pool(tmp_state, base_repo):
    admin = start_admin(tmp_state, "pool", lifecycle={"warm_pool": {"size": 2}, "reaper_interval_s": 0.5})
    try:
        async def main():
            async with SandboxManagerClient(admin.url, admin.key) as mgr:
                first = await mgr.create(base_dir=base_repo)
                for _ in range(50):
                    if httpx.get(admin.url + "/health").json()["result"]["pool"] == 2:
                        break
                    await asyncio.sleep(0.1)
                pool_before = httpx.get(admin.url + "/health").json()["result"]["pool"]
                second = await mgr.create(base_dir=base_repo)
                r = await second.run("cat secret_base.txt && git status --short")
                await first.close()
                await second.close()
                return pool_before, r
        pool_before, r = run(main())
        assert pool_before == 2
        assert r.output == "base-content\n"
    finally:
        assert admin.stop() == 0
    assert not any(wait_no_leftovers(admin).values())


def test_separate_worker_process(tmp_state, base_repo):
    """admin (backend: worker) -> worker process (local backend) over the internal HTTP API."""
    wport = free_port()
    cfg = write_config(tmp_state, free_port(), "sepworker",
                       worker={"url": f"http://127.0.0.1:{wport}", "name": "sepworker", "port": wport})
    worker = start_admin(tmp_state, "sepworker", role="worker", port=wport, config=cfg)
    admin = start_admin(tmp_state, "sepworker", config=cfg, extra_args=["--backend", "worker"])
    try:
        async def main():
            async with SandboxManagerClient(admin.url, admin.key) as mgr:
                sb = await mgr.create(base_dir=base_repo)
                r = await sb.run("cat secret_base.txt; id -u")
                n = httpx.get(worker.url + "/health").json()["result"]["sandboxes"]
                await sb.close()
                return r, n
        r, n = run(main())
        assert r.output == "base-content\n65534\n" and n == 1
        assert httpx.get(admin.url + "/health").json()["result"]["backend"] == "worker"
        assert httpx.post(worker.url + "/worker/v1/create", json={"sandbox_id": "x"}).status_code == 401
    finally:
        assert admin.stop() == 0
        assert worker.stop() == 0
    assert not any(wait_no_leftovers(worker).values())


def test_two_managers_on_one_host_leave_each_other_alone(state_root, base_repo):
    """Two sandbox managers with the same worker name but their own state dirs (two experiments,
    or a test beside a run): starting or stopping the second never touches the first's sandboxes
    (they once shared one cgroup parent, and the second reaped the first's as leftovers)."""
    dirs = [state_root / "two-a", state_root / "two-b"]
    for d in dirs:
        d.mkdir()
    first = start_admin(dirs[0], "local")
    second = None
    try:
        async def go():
            nonlocal second
            async with SandboxManagerClient(first.url, first.key) as mgr:
                sb = await mgr.create(base_dir=base_repo)
                assert (await sb.run("echo before")).output.strip() == "before"
                second = start_admin(dirs[1], "local")
                assert second.stop() == 0
                r = await sb.run("echo after")
                assert r.exit_code == 0 and r.output.strip() == "after", r
                await sb.close()

        run(go())
        assert leftovers(first)["cgroups"] == []
    finally:
        if second is not None and second.proc.poll() is None:
            second.proc.kill()
        assert first.stop() == 0
    assert not any(wait_no_leftovers(first).values())
