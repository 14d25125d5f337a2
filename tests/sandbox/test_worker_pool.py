"""One admin over two worker processes (``worker.urls``): least-loaded placement, a killed
worker's sandboxes reported failed (at once on use, by the reaper when idle), and new sandboxes
placed on the live worker."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import httpx
from transformers import AutoTokenizer

from cookbook.agent import Budgets
from cookbook.agent.agent import SampleOut
from cookbook.agent.scripted import gold_turns
from cookbook.rollout import AgentConfig, Failures, Rollouts
from services.sandbox.client import SandboxManagerClient
from services.tasks.preparation.workspace import build_base
from services.tasks.task import load_dataset

from .conftest import REPO, free_port, requires_bwrap, requires_root, run, start_admin, wait_no_leftovers, write_config

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
                        status = (st.get("result") or {}).get("status") or {}
                        if status.get("docker_run", {}).get("status") == "failed":
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


def test_rollout_retried_on_the_live_worker_when_its_worker_dies(tmp_state, tiny_model):
    """Rollouts.run_one over the pool: the worker holding the rollout's sandbox is killed while
    the policy samples; the agent's next call fails at once (sandbox lost), the rollout is retried
    in a fresh sandbox, placed on the live worker, and scores the gold edit."""


    task = next(t for t in load_dataset(REPO / "datasets" / "micro").tasks if t.name.endswith("absolute"))
    base = tmp_state / "base"
    build_base(task, base)
    tok = AutoTokenizer.from_pretrained(str(tiny_model[1]))
    text = gold_turns(json.loads((task.solution_dir / "edit.json").read_text()), read=False, submit=False)[0]
    workers = []
    for name in ("rollw1", "rollw2"):
        d = tmp_state / name
        d.mkdir()
        port = free_port()
        workers.append(start_admin(d, name, role="worker", port=port,
                                   config=write_config(d, port, name, auth={"key": "pool-key"})))
    w1, w2 = workers
    cfg = write_config(tmp_state, free_port(), "rolladmin", auth={"key": "pool-key"},
                       worker={"urls": [w.url for w in workers], "health_interval_s": 0.5})
    admin = start_admin(tmp_state, "rolladmin", config=cfg, extra_args=["--backend", "worker"])
    placed = []

    class KillingGoldPolicy:
        async def sample(self, prompt, max_tokens):
            if not placed:   # first attempt: its sandbox is on w1 (both empty: config order)
                placed.append(worker_list(w1))
                w1.proc.send_signal(signal.SIGKILL)
                w1.proc.wait()
            toks = list(tok.encode(text, add_special_tokens=False)) + [tok.convert_tokens_to_ids("<|im_end|>")]
            return SampleOut(toks, [0.0] * len(toks), "stop")

    try:
        async def main():
            async with SandboxManagerClient(admin.url, admin.key) as mgr:
                async def factory(b):
                    return await mgr.create(base_dir=b)
                cfg = AgentConfig(tools=["edit"], compact_schemas=True,
                                  budgets=Budgets(max_turns=1, max_output_tokens=56))
                ro = Rollouts(factory, {task.name: base}, tok, cfg, concurrency=1, max_retries=2, grading="in-place")
                f = Failures()
                traj = await asyncio.wait_for(ro.run_one(task, KillingGoldPolicy(), f), 120)
                return traj, f.to_dict(), worker_list(w2)
        traj, failures, on_w2 = run(main())
        assert len(placed[0]) == 1   # the first attempt's sandbox was on the killed worker
        assert traj is not None and traj.reward == 1.0, traj and (traj.stop_reason, traj.error, traj.verifier)
        assert failures["retries"] == 1 and failures["infra"] == 0, failures
        assert on_w2 == []   # the retry's sandbox ran on w2 and was closed
    finally:
        assert admin.stop() == 0
        assert w2.stop() == 0
    assert not any(wait_no_leftovers(w2).values())
