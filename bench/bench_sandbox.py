"""Sandbox latency and throughput (local backend) next to a plain-subprocess baseline.

    python bench/bench_sandbox.py [--n 50] [--concurrency 8]
    python bench/bench_sandbox.py --docker [--docker-image IMAGE] [--n 32]

Prints create->first-exec latency P50/P95 for: a plain subprocess (no isolation), the local
backend in-process (bwrap + overlay + cgroups), and the full path through the admin's HTTP API
with the project client; then throughput of create + `git status` + close at a concurrency.
Runs as root (cgroups); re-executes itself in a private mount namespace.

``--docker``: container create -> first exec P50/P95 of the docker backend (a real engine;
``bash setup.sh docker``) at concurrency 1 and 16, next to the local bwrap backend in the same
run (each op: create, ``true``, destroy; the docker sandbox starts from IMAGE, default
lts/base:bookworm, the local one from a 200-file repo).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import docker  # noqa: E402
import httpx  # noqa: E402
import yaml  # noqa: E402

from services.sandbox.backends.base import ExecRequest, SandboxSpec  # noqa: E402
from services.sandbox.backends.docker_backend import DockerBackend  # noqa: E402
from services.sandbox.client import SandboxManagerClient  # noqa: E402
from services.sandbox.local.backend import LocalBackend  # noqa: E402
from services.sandbox.local.namespace import ensure_private_namespace  # noqa: E402


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def row(name: str, xs: list[float]) -> str:
    return f"{name:<46} P50 {pct(xs, 50) * 1000:7.1f} ms   P95 {pct(xs, 95) * 1000:7.1f} ms   (n={len(xs)})"


def make_repo(root: Path) -> Path:
    d = root / "repo"
    (d / "pkg").mkdir(parents=True)
    for i in range(200):
        (d / "pkg" / f"m{i}.py").write_text(f"X{i} = {i}\n" * 20)
    (d / "tests").mkdir()
    (d / "tests" / "test_x.py").write_text("def test_x():\n    assert True\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    subprocess.run("git init -q && git add . && git commit -qm init", shell=True, cwd=d, check=True, env=env)
    return d


async def baseline(n: int, repo: Path) -> tuple[list[float], float, int]:
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        p = await asyncio.create_subprocess_exec("/bin/bash", "-c", "true")
        await p.wait()
        lat.append(time.perf_counter() - t)
    return lat, *(await throughput_plain(repo, n))


async def throughput_plain(repo: Path, n: int) -> tuple[float, int]:
    t = time.perf_counter()
    procs = [await asyncio.create_subprocess_exec("/bin/bash", "-c", "git status --short", cwd=repo,
                                                  stdout=asyncio.subprocess.DEVNULL) for _ in range(n)]
    rcs = [await p.wait() for p in procs]
    return n / (time.perf_counter() - t), sum(1 for rc in rcs if rc != 0)


async def local_inprocess(n: int, repo: Path, state: Path) -> list[float]:
    b = LocalBackend(state, worker_name="bench")
    await b.start()
    spec = SandboxSpec(base_dir=str(repo))
    await b.create("warmup", spec)       # first use copies the base into the cache
    await b.destroy("warmup")
    lat = []
    try:
        for i in range(n):
            t = time.perf_counter()
            await b.create(f"b{i}", spec)
            out = await b.exec(f"b{i}", ExecRequest(argv=["/bin/true"], timeout=10))
            lat.append(time.perf_counter() - t)
            assert out.exit_code == 0, out
            await b.destroy(f"b{i}")
    finally:
        await b.shutdown()
    return lat


async def via_admin(n: int, conc: int, repo: Path, state: Path) -> tuple[list[float], list[float], float, int]:
    port = 18000 + os.getpid() % 1000
    cfg = state / "admin.yaml"
    cfg.write_text(yaml.safe_dump({"auth": {"key": "bench"}, "admin": {"port": port, "log_file": str(state / "a.log")},
                                   "worker": {"name": "bench-admin"}, "state_dir": str(state / "s")}))
    proc = subprocess.Popen([sys.executable, "-m", "services.sandbox", "admin", "--config", str(cfg)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        async with SandboxManagerClient(url, "bench") as mgr:
            sb = await mgr.create(base_dir=repo)
            await sb.close()
            lat, reset = [], []
            for _ in range(n):
                t = time.perf_counter()
                sb = await mgr.create(base_dir=repo)
                r = await sb.run("true")
                lat.append(time.perf_counter() - t)
                assert r.exit_code == 0
                await sb.run("echo x >> pkg/m1.py")
                t = time.perf_counter()
                await sb.reset()
                reset.append(time.perf_counter() - t)
                await sb.close()
            sem = asyncio.Semaphore(conc)
            failures = 0

            async def one():
                nonlocal failures
                async with sem:
                    s = await mgr.create(base_dir=repo)
                    r = await s.run("git status --short")
                    failures += r.exit_code != 0
                    await s.close()
            t = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(n)))
            tput = n / (time.perf_counter() - t)
        return lat, reset, tput, failures
    finally:
        proc.terminate()
        proc.wait(30)


async def first_exec(backend, spec, n: int, conc: int, tag: str) -> list[float]:
    """create -> first `true` latency of ``n`` sandboxes, ``conc`` at a time (each destroyed after)."""
    sem = asyncio.Semaphore(conc)
    lat: list[float] = []

    async def one(i: int) -> None:
        async with sem:
            sid = f"{tag}{i}"
            t = time.perf_counter()
            await backend.create(sid, spec)
            try:
                out = await backend.exec(sid, ExecRequest(argv=["/bin/true"], timeout=60))
                lat.append(time.perf_counter() - t)
                assert out.exit_code == 0, out
            finally:
                await backend.destroy(sid)
    await asyncio.gather(*(one(i) for i in range(n)))
    return lat


async def docker_vs_local(n: int, image: str, repo: Path, state: Path) -> None:
    dk = DockerBackend(docker.from_env(timeout=300), worker_name=f"bench{os.getpid()}")
    lb = LocalBackend(state, worker_name="bench-docker-vs-local")
    await dk.start()
    await lb.start()
    rows = []
    try:
        dspec, lspec = SandboxSpec(image=image), SandboxSpec(base_dir=str(repo))
        await first_exec(dk, dspec, 1, 1, "warm")     # image workdir lookup, page cache
        await first_exec(lb, lspec, 1, 1, "warm")     # base copied into the cache
        for conc in (1, 16):
            rows.append((f"local bwrap: create -> first exec (c={conc})",
                         await first_exec(lb, lspec, n, conc, f"l{conc}-")))
            rows.append((f"docker: create -> first exec (c={conc})", await first_exec(dk, dspec, n, conc, f"d{conc}-")))
    finally:
        await dk.shutdown()
        await lb.shutdown()
    print(f"sandbox bench (docker vs local): {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, docker image "
          f"{image}")
    for name, xs in rows:
        print(row(name, xs))


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--docker", action="store_true", help="docker backend vs local bwrap at concurrency 1 and 16")
    ap.add_argument("--docker-image", default="lts/base:bookworm")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lts-bench-sandbox-"))
    tmp.chmod(0o755)
    if args.docker:
        try:
            await docker_vs_local(args.n, args.docker_image, make_repo(tmp), tmp / "state")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    try:
        repo = make_repo(tmp)
        base_lat, base_tput, base_fail = await baseline(args.n, repo)
        local_lat = await local_inprocess(args.n, repo, tmp / "state")
        http_lat, reset_lat, tput, fails = await via_admin(args.n, args.concurrency, repo, tmp)
        print(f"sandbox bench: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, repo 200 files + .git")
        print(row("plain subprocess `bash -c true` (no isolation)", base_lat))
        print(row("local backend in-process: create -> `true`", local_lat))
        print(row("admin HTTP + client: create -> first exec", http_lat))
        print(row("admin HTTP: reset workspace to base", reset_lat))
        print(f"{'throughput plain `git status` (no isolation)':<46} {base_tput:7.1f} /s   failures {base_fail}")
        print(f"{f'throughput create+git status+close (c={args.concurrency})':<46} {tput:7.1f} /s   failures {fails}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    ensure_private_namespace()
    asyncio.run(main())
