"""Memory and stalls of the sandbox admin under hostile uploads (issue 17), default limits.

Uploads, with ``extract: tar``, a ~6 MB tar.gz of many empty members (the finding: 14-20 s event
loop stalls and +439 MB before the fix) and a tar.gz that unpacks to 1.5 GB of zeros, while another
thread polls ``/health`` every 20 ms. Prints the admin's RSS before/after, the worst /health latency
during each upload and before any (the baseline, same run), and the answers. Stated bound: admin
RSS +50 MB at most, /health never slower than 1 s.

    .venv-control/bin/python bench/bench_hostile.py      (root + bubblewrap, as the sandbox tests)
"""

from __future__ import annotations

import io
import os
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from tests.sandbox.conftest import start_admin  # noqa: E402

P = "/apis/envs/sandbox/v1"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def many_members(n: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9) as tf:
        for i in range(n):
            tf.addfile(tarfile.TarInfo(f"d{i % 100}/f{i}"), io.BytesIO(b""))
    return buf.getvalue()


def zeros(size: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tf:
        info = tarfile.TarInfo("zeros")
        info.size = size

        class Zeros(io.RawIOBase):
            left = size

            def readable(self):
                return True

            def readinto(self, b):
                n = min(len(b), self.left)
                b[:n] = bytes(n)
                self.left -= n
                return n
        tf.addfile(info, io.BufferedReader(Zeros(), 1 << 20))
    return buf.getvalue()


def worst_health(url: str, stop: threading.Event, out: list[float]) -> None:
    with httpx.Client(timeout=120) as c:
        while not stop.is_set():
            t = time.monotonic()
            c.get(url + "/health")
            out.append(time.monotonic() - t)
            time.sleep(0.02)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    tmp.chmod(0o755)
    a = start_admin(tmp, f"bench{os.getpid()}", admin={"max_upload_mb": 64, "max_read_mb": 16})
    try:
        with httpx.Client(base_url=a.url + P, headers={"X-Key": a.key}, timeout=600) as c:
            sid = c.post("/start", json={}).json()["result"]["sandbox_id"]
            rss0 = rss_mb(a.proc.pid)
            print(f"admin RSS at start {rss0:.0f} MB")
            for name, data in (("no upload (baseline)", None), ("many members", many_members(700_000)),
                               ("1.5 GB of zeros", zeros(3 << 29))):
                lat: list[float] = []
                stop = threading.Event()
                th = threading.Thread(target=worst_health, args=(a.url, stop, lat))
                th.start()
                t = time.monotonic()
                if data is None:
                    time.sleep(2)
                    answer = "-"
                else:
                    r = c.post("/upload", data={"sandbox_id": sid, "target_path": "/workspace/x", "extract": "tar"},
                               files={"file": ("a.tar.gz", data)})
                    answer = f"{r.status_code} {r.json()['error'] or ''}"[:90]
                took = time.monotonic() - t
                stop.set()
                th.join()
                size = f"{len(data) / 2**20:.1f} MB" if data else ""
                print(f"{name:22s} {size:>8s}  answered in {took:.2f}s: {answer}; worst /health "
                      f"{max(lat, default=0) * 1000:.0f} ms; "
                      f"admin RSS {rss_mb(a.proc.pid):.0f} MB (+{rss_mb(a.proc.pid) - rss0:.0f})", flush=True)
            c.post("/stop", json={"sandbox_id": sid})
    finally:
        a.stop()


if __name__ == "__main__":
    main()
