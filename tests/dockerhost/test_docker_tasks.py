"""Public Harbor tasks (SWE-bench layout) on real containers: gold 1 / empty 0 through the sandbox
manager's docker backend, history scrubbed inside the agent's sandbox, a broken Dockerfile
excluded with a clear error, kill -9 of the manager with live containers."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from services.tasks.preparation.prepare import base_of, prepare_tasks
from services.tasks.task import load_task

from .conftest import DockerAdmin, containers_of, free_port, manager_factory


def _future_commits(task_dir: Path) -> list[str]:
    """Commits of the task's repository after its base (the fix among them), from its bundle."""
    base = json.loads((task_dir / "tests" / "config.json").read_text())["base_commit"]
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["git", "clone", "-q", str(task_dir / "environment" / "testbed.bundle"), d], check=True)
        out = subprocess.run(["git", "rev-list", "--all", f"^{base}"], cwd=d, capture_output=True, text=True,
                             check=True)
    return out.stdout.split()


def test_sample_tasks_gold_1_empty_0_history_clean(docker_admin, sample_prep):
    ds, out, _ = sample_prep
    assert len(ds.tasks) >= 3

    async def main():
        async with docker_admin.client() as c:
            return await prepare_tasks(ds.tasks, out, validate=True, factory=manager_factory(c), backend="docker",
                                       force=True, progress=False, dataset="swebench-sample")
    manifest = asyncio.run(main())
    for t in ds.tasks:
        e = manifest["tasks"][t.slug]
        v = e["validation"]
        assert not e["excluded"], e["reason"]
        assert (v["gold_reward"], v["empty_reward"], v["history_problems"]) == (1.0, 0.0, []), v
        assert e["base"]["commit"] == json.loads((t.tests_dir / "config.json").read_text())["base_commit"]
        assert e["base"]["workdir"] == "/testbed"


def test_history_scrubbed_in_agent_sandbox(docker_admin, docker_client, sample_prep):
    ds, _, manifest = sample_prep
    task = next(t for t in ds.tasks if "inventory" in t.name)
    base = manifest["tasks"][task.slug]["base"]
    future = _future_commits(task.path)
    assert len(future) == 2   # the fixing commit and a later one
    # the unscrubbed environment image (what SWE-bench images look like) holds the fix ...
    raw = docker_client.containers.run(base["env_image"], ["git", "-C", "/testbed", "log", "--all", "--format=%H"],
                                       network_mode="none", remove=True).decode().split()
    assert set(future) <= set(raw)

    async def main():
        async with docker_admin.client() as c:
            sb = await manager_factory(c)(base_of(manifest["tasks"][task.slug]))
            host = next(x for x in containers_of(docker_client, docker_admin.worker)
                        if x.labels["lts.sandbox"] == sb.sandbox_id).attrs["HostConfig"]
            assert (host["Memory"], host["NanoCpus"]) == (1024 << 20, 10**9)   # the task's [environment] limits
            assert host["NetworkMode"] == "none" and host["CapDrop"] == ["ALL"] and not host["Privileged"]
            try:
                probes = " ; ".join(f"git cat-file -e {sha} 2>/dev/null && echo LEAK {sha}" for sha in future)
                r = await sb.run("pwd -P; git log --all --reflog --format=%H; git for-each-ref --format='%(refname)'; "
                                 f"ls .git/objects/pack | wc -l; git status --porcelain | wc -l; {probes}; true")
                return r.output.split()
            finally:
                await sb.close()
    lines = asyncio.run(main())
    # ... the agent's sandbox, in the image's WORKDIR through /workspace, sees the base commit only
    assert lines == ["/testbed", base["commit"], "refs/heads/main", "0", "0"], lines


def test_broken_dockerfile_is_excluded_with_its_log_and_docker_image_tasks_work(docker_client, sample_prep, tmp_path):
    ds, _, manifest = sample_prep
    good = next(t for t in ds.tasks if "stats" in t.name)
    broken = tmp_path / "tasks" / "broken"
    shutil.copytree(good.path, broken)
    (broken / "task.toml").write_text((broken / "task.toml").read_text().replace(
        'name = "swebench-sample/sample__stats-202"', 'name = "tests/broken-build"'))
    (broken / "environment" / "Dockerfile").write_text(
        f"FROM {manifest['tasks'][good.slug]['base']['env_image']}\nRUN echo build-step-output-$((6*7)) && exit 3\n")
    named = tmp_path / "tasks" / "named"   # [environment].docker_image instead of a Dockerfile
    shutil.copytree(good.path, named)
    (named / "environment" / "Dockerfile").unlink()
    (named / "environment" / "testbed.bundle").unlink()
    (named / "task.toml").write_text((named / "task.toml").read_text()
                                     .replace('name = "swebench-sample/sample__stats-202"',
                                              'name = "tests/named-image"')
                                     .replace("[environment]\n", f"[environment]\ndocker_image = "
                                              f"\"{manifest['tasks'][good.slug]['base']['env_image']}\"\n"))
    tasks = [load_task(broken), load_task(named)]
    m = asyncio.run(prepare_tasks(tasks, tmp_path / "prep", backend="docker", docker=docker_client, progress=False,
                                  log=lambda s: None))
    bad, ok = m["tasks"]["tests__broken-build"], m["tasks"]["tests__named-image"]
    assert bad["excluded"] and "tests/broken-build" in bad["reason"] and "failed to build" in bad["reason"]
    assert "build-step-output-42" in bad["reason"], bad["reason"]   # the build log's tail (the step's output)
    assert not ok["excluded"], ok["reason"]
    assert ok["base"]["commit"] == manifest["tasks"][good.slug]["base"]["commit"]


def test_kill9_manager_with_live_containers(docker_client, sample_prep):
    _, _, manifest = sample_prep
    image = next(iter(manifest["tasks"].values()))["base"]["image"]
    d = Path(tempfile.mkdtemp(prefix="lts-docker-kill9-"))
    port = free_port()
    a = DockerAdmin(d, f"k9{port}", port).start()

    async def create(n: int, lease_s: float | None = None) -> list[str]:
        async with a.client() as c:
            return [(await c.create(image=image, lease_s=lease_s)).sandbox_id for _ in range(n)]
    kept = asyncio.run(create(2))
    short = asyncio.run(create(1, lease_s=1))
    assert len(containers_of(docker_client, a.worker)) == 3
    a.stop(signal.SIGKILL)
    assert len(containers_of(docker_client, a.worker)) == 3   # the containers outlive the manager ...
    time.sleep(1.5)          # ... and the short lease runs out while it is down
    a.start()
    try:
        async def after() -> tuple[list[str], str]:
            async with a.client() as c:
                listed = sorted(s["sandbox_id"] for s in await c.list() if s.get("state") == "running")
                sb = await c.attach(kept[0])
                return listed, (await sb.run("echo alive")).output.strip()
        listed, alive = asyncio.run(after())
        assert listed == sorted(kept) and alive == "alive"      # adopted: records and containers agree
        live = {c.labels["lts.sandbox"] for c in containers_of(docker_client, a.worker)}
        assert live == set(kept) and short[0] not in live       # the expired one was removed
    finally:
        assert a.stop() == 0
    assert containers_of(docker_client, a.worker) == []


def test_two_managers_on_one_docker_host_leave_each_other_alone(docker_client, sample_prep):
    """Same worker name, other state dir (a test beside a run): the second manager's start-up
    reconciliation must neither adopt nor remove the first one's containers."""
    _, _, manifest = sample_prep
    image = next(iter(manifest["tasks"].values()))["base"]["image"]
    port1, port2 = free_port(), free_port()
    worker = f"two{port1}"
    a = DockerAdmin(Path(tempfile.mkdtemp(prefix="lts-docker-two-")), worker, port1).start()
    b = None
    try:
        async def create() -> str:
            async with a.client() as c:
                return (await c.create(image=image)).sandbox_id
        sid = asyncio.run(create())
        b = DockerAdmin(Path(tempfile.mkdtemp(prefix="lts-docker-two-")), worker, port2).start()

        async def check() -> tuple[list, str]:
            async with b.client() as c:
                theirs = [s["sandbox_id"] for s in await c.list()]
            async with a.client() as c:
                return theirs, (await (await c.attach(sid)).run("echo alive")).output.strip()
        theirs, alive = asyncio.run(check())
        assert sid not in theirs and alive == "alive"
    finally:
        if b is not None:
            assert b.stop() == 0
        assert a.stop() == 0
    assert containers_of(docker_client, worker) == []


def test_unix_socket_bound_into_the_container(docker_admin, sample_prep):
    """How a black-box agent reaches the ModelService: its Unix socket bound read-only (no network)."""
    _, _, manifest = sample_prep
    image = next(iter(manifest["tasks"].values()))["base"]["image"]
    sock_dir = docker_admin.dir / "ms"
    sock_dir.mkdir(exist_ok=True)
    path = sock_dir / "ms.sock"
    path.unlink(missing_ok=True)
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        conn.sendall(b"pong:" + conn.recv(100))
        conn.close()
    threading.Thread(target=serve, daemon=True).start()

    async def main():
        async with docker_admin.client() as c:
            sb = await c.create(image=image, binds=[{"source": str(sock_dir), "target": "/run/lts-ms"}])
            try:
                r = await sb.run("python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
                                 "s.connect('/run/lts-ms/ms.sock'); s.sendall(b'ping'); print(s.recv(100).decode())\"; "
                                 "touch /run/lts-ms/x 2>&1 | grep -c 'Read-only'; "
                                 "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), 2)\" 2>&1 | "
                                 "tail -1")
                bad = None
                try:
                    await c.create(image=image, binds=[{"source": "/etc", "target": "/run/x"}])
                except Exception as e:  # noqa: BLE001
                    bad = str(e)
                return r.output.splitlines(), bad
            finally:
                await sb.close()
    lines, bad = asyncio.run(main())
    srv.close()
    assert lines[0] == "pong:ping" and lines[1] == "1", lines
    assert "unreachable" in lines[2].lower() or "OSError" in lines[2], lines   # and still no network
    assert bad and "not under an allowed directory" in bad
