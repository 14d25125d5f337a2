"""One admin over two worker processes (``worker.urls``): least-loaded placement, a killed
worker's sandboxes reported failed (at once on use, by the reaper when idle), and new sandboxes
placed on the live worker."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx
from services.sandbox.client import SandboxManagerClient

from .conftest import free_port, requires_bwrap, requires_root, run, start_admin, wait_no_leftovers, write_config

pytestmark = [requires_bwrap, requires_root]


def worker_list(worker) -> list[str]:
    return httpx.get(worker.url + "/worker/v1/list", headers={"X-Key": worker.key}).json()["result"]


def test_two_workers_placement_and_a_dead_worker(tmp_state, base_repo):
    workers = []
    for name in ("poolw1", "poolw2"):
        d = tmp_state / name
        d.mkdir()
        port = free_port()
        cfg = write_config(d, port, name, auth={"key": "pool-key"})
        workers.append(start_admin(d, name, role="worker", port=port, config=cfg))
    w1, w2 = workers
    cfg = write_config(tmp_state, free_port(), "pooladmin", auth={"key": "pool-key"},
                       worker={"urls": [w.url for w in workers], "health_interval_s": 0.5})
    admin = start_admin(tmp_state, "pooladmin", config=cfg, extra_args=["--backend", "worker"])
    try:
        async def place():
            async with SandboxManagerClient(admin.url, admin.key) as mgr:
                sbs = [await mgr.create(base_dir=base_repo) for _ in range(4)]
                outs = [await sb.run("cat secret_base.txt") for sb in sbs]
                return [sb.sandbox_id for sb in sbs], outs
        ids, outs = run(place())
        assert all(o.output == "base-content\n" for o in outs)
        on1, on2 = set(worker_list(w1)), set(worker_list(w2))
        assert len(on1) == len(on2) == 2 and on1 | on2 == set(ids)   # least-loaded: 2 + 2

        w1.proc.send_signal(signal.SIGKILL)
        w1.proc.wait()
        used, idle = sorted(on1)

        async def after_death():
            async with SandboxManagerClient(admin.url, admin.key) as mgr:
                t0 = time.monotonic()
                async with httpx.AsyncClient(base_url=admin.url, headers={"X-Key": admin.key}) as h:
                    r = await h.post("/apis/envs/sandbox/v1/execute",
                                     json={"sandbox_id": used, "command": "echo hi", "timeout": 30})
                    took = time.monotonic() - t0
                    # the idle one is reported failed by the reaper (health loop 0.5 s, reaper 0.5 s)
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline:
                        st = (await h.get("/apis/envs/sandbox/v1/get_status", params={"sandbox_id": idle})).json()
                        if ((st.get("result") or {}).get("status") or {}).get("docker_run", {}).get("status") == "failed":
                            break
                        await asyncio.sleep(0.2)
                    st_used = (await h.get("/apis/envs/sandbox/v1/get_status", params={"sandbox_id": used})).json()
                fresh = [await mgr.create(base_dir=base_repo) for _ in range(2)]   # the retry of a rollout
                outs = [await s.run("cat secret_base.txt") for s in fresh]
                return r, took, st, st_used, [s.sandbox_id for s in fresh], outs
        r, took, st_idle, st_used, fresh, outs = run(after_death())
        # 410 if the call found the worker dead, 409 "is failed" if the health loop did first
        assert r.status_code in (409, 410) and "worker died" in r.json()["error"], r.text
        assert took < 5   # reported, not hung
        for st in (st_used, st_idle):   # ROCK's shape: state stopped, the run stage failed
            assert not st["result"]["is_alive"] and st["result"]["status"]["docker_run"]["status"] == "failed", st
        assert "worker died" in st_idle["result"]["end_reason"]
        assert all(o.output == "base-content\n" for o in outs)
        assert set(fresh) <= set(worker_list(w2))
        health = httpx.get(admin.url + "/health").json()["result"]
        alive = {w["url"]: w["alive"] for w in health["limits"]["workers"]}
        assert alive == {w1.url: False, w2.url: True}, health
    finally:
        assert admin.stop() == 0
        assert w2.stop() == 0
    assert not any(wait_no_leftovers(w2).values())
