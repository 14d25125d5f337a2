"""Per-rollout grading time: clean grading (the agent's patch taken out, a fresh sandbox from the
task's base, patch applied, tests run there) next to in-place grading (the verifier in the agent's
own sandbox), in the same run, on the embedded default's tasks (the quickstart's 8 micro tasks).

    python bench/bench_grading.py [--n 32] [--concurrency 8]

Starts its own sandbox manager (local bubblewrap backend, root for cgroups) on a free port and
stops it at the end. Each rollout: an agent sandbox with one edit (the gold fix or a wrong one,
alternating), then graded. Both modes grade the same edits (each in its own agent sandbox: in-place
grading restores the hidden tests into the workspace it grades). Prints P50/P95 per rollout
sequentially, the parts of clean grading, throughput at ``--concurrency``, and whether both modes
gave the same rewards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import yaml  # noqa: E402

from services.sandbox.client import SandboxManagerClient  # noqa: E402
from services.tasks.grading.cleangrade import base_commit, extract_patch, grade_patch  # noqa: E402
from services.tasks.grading.verifier import verify  # noqa: E402
from services.tasks.preparation.workspace import build_base  # noqa: E402
from services.tasks.task import load_dataset  # noqa: E402


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def row(name: str, xs: list[float]) -> str:
    return f"{name:<52} P50 {pct(xs, 50) * 1000:7.0f} ms   P95 {pct(xs, 95) * 1000:7.0f} ms   (n={len(xs)})"


def start_admin(d: Path) -> tuple[subprocess.Popen, str, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    key = secrets.token_hex(16)
    cfg = {"auth": {"key": key}, "admin": {"host": "127.0.0.1", "port": port, "log_file": str(d / "admin.log")},
           "worker": {"name": f"bg{port}", "log_file": str(d / "worker.log")}, "state_dir": str(d / "state"),
           "base_sources": [str(d)]}
    (d / "admin.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "services.sandbox", "admin", "--config", str(d / "admin.yaml")],
                            cwd=REPO, stdout=open(d / "stdout.log", "ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        if proc.poll() is not None:
            raise SystemExit(f"sandbox admin exited: {(d / 'stdout.log').read_text()[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url, key
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("sandbox admin did not come up")


def edit_of(task, gold: bool) -> tuple[str, int, str]:
    e = json.loads((task.solution_dir / "edit.json").read_text())
    return e["path"], e["line"], e["new"] if gold else e["old"].rstrip() + "  # still wrong"


async def agent_sandbox(factory, base: Path, task, gold: bool):
    sb = await factory(base)
    path, line, new = edit_of(task, gold)
    lines = (await sb.read_file(f"/workspace/{path}")).split("\n")
    lines[line - 1] = new
    await sb.write_file(f"/workspace/{path}", "\n".join(lines))
    return sb


async def in_place(factory, base, task, gold) -> tuple[float, float]:
    sb = await agent_sandbox(factory, base, task, gold)
    try:
        t0 = time.perf_counter()
        res = await verify(sb, task)
        return time.perf_counter() - t0, res.reward
    finally:
        await sb.close()


async def clean(factory, base, task, gold) -> tuple[float, float, dict[str, float]]:
    sb = await agent_sandbox(factory, base, task, gold)
    try:
        t0 = time.perf_counter()
        ex = await extract_patch(sb, base_commit(base))
        t1 = time.perf_counter()
    finally:
        await sb.close()
    res = await grade_patch(task, base, factory, ex.patch)
    t2 = time.perf_counter()
    return t2 - t0, res.reward, {"extract": t1 - t0, "grade": t2 - t1}


async def main_async(a) -> None:

    tmp = Path(tempfile.mkdtemp(prefix="lts-bench-grading-"))
    tmp.chmod(0o755)
    proc, url, key = start_admin(tmp)
    try:
        tasks = load_dataset(REPO / "datasets" / "micro").split("train")[:8]  # the quickstart's tasks
        bases = {}
        for t in tasks:
            bases[t.name] = tmp / "bases" / t.slug
            build_base(t, bases[t.name])
        client = SandboxManagerClient(url, key)

        async def factory(base):
            return await client.create(str(base))

        items = [(tasks[i % len(tasks)], i % 2 == 0) for i in range(a.n)]
        ip, cl, parts, same = [], [], {"extract": [], "grade": []}, 0
        for k, (t, gold) in enumerate(items):  # sequential, alternating which mode goes first
            first, second = (in_place, clean) if k % 2 == 0 else (clean, in_place)
            r1 = await first(factory, bases[t.name], t, gold)
            r2 = await second(factory, bases[t.name], t, gold)
            (ri, rc) = (r1, r2) if first is in_place else (r2, r1)
            ip.append(ri[0])
            cl.append(rc[0])
            for p, v in rc[2].items():
                parts[p].append(v)
            same += int(ri[1] == rc[1] == (1.0 if gold else 0.0))
        print(f"grading on the quickstart's {len(tasks)} micro tasks, {a.n} rollouts (half gold, half wrong), "
              f"host load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
        print(row("in-place: verify in the agent's sandbox", ip))
        print(row("clean: extract patch + fresh sandbox + apply + verify", cl))
        print(row("  clean part: extract the patch (agent sandbox)", parts["extract"]))
        print(row("  clean part: fresh sandbox + apply + verify + close", parts["grade"]))
        print(f"{'extra per graded rollout (P50 clean - P50 in-place)':<52} {(pct(cl, 50) - pct(ip, 50)) * 1000:7.0f} "
              "ms")
        print(f"{'rewards as expected in both modes':<52} {same}/{a.n}")

        sem = asyncio.Semaphore(a.concurrency)

        async def limited(fn, t, gold):
            async with sem:
                return await fn(factory, bases[t.name], t, gold)

        for name, fn in (("in-place", in_place), ("clean", clean)):
            t0 = time.perf_counter()
            await asyncio.gather(*(limited(fn, t, gold) for t, gold in items))
            dt = time.perf_counter() - t0
            print(f"throughput {name:<9} (concurrency {a.concurrency}) {a.n / dt:6.2f} rollouts/s   ({dt:.1f} s for "
                  f"{a.n})")
        await client.aclose()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=32, help="rollouts per mode (default: %(default)s)")
    ap.add_argument("--concurrency", type=int, default=8, help="for the throughput rows (default: %(default)s)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("note: not root: the local backend runs without cgroups", file=sys.stderr)
    asyncio.run(main_async(a))


if __name__ == "__main__":
    main()
