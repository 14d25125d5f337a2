"""Soak: the backend stays bounded over many short sessions (docs/backend.md "Lifecycle").

Each cycle is one client session: create a LoRA training client, one forward_backward + optim_step,
save_weights_and_get_sampling_client, one sample, finish the session. Prints the backend's RSS, its
database size (SQLite file and its write-ahead log, which SQLite reuses once it has reached ~4 MB)
and the number of stored futures after a warm-up and after ``--cycles``
cycles; then, as the baseline in the same run, ``--baseline-cycles`` more cycles whose sessions are
never finished (what every session did before the lifecycle work), and the same figures again.

    .venv-control/bin/python bench/bench_soak.py [--cycles 200] [--baseline-cycles 50]
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import tinker  # noqa: E402
from tinker import types  # noqa: E402

from helpers import BackendProc, ensure_tiny_model  # noqa: E402

DATUM = types.Datum(model_input=types.ModelInput.from_ints(list(range(10, 73))),
                    loss_fn_inputs={"target_tokens": types.TensorData.from_numpy(np.arange(11, 74, dtype=np.int64)),
                                    "weights": types.TensorData.from_numpy(np.ones(63, dtype=np.float32))})


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def figures(b: BackendProc) -> dict:
    db = b.state_dir / "backend.sqlite3"
    wal = db.with_name(db.name + "-wal")
    with sqlite3.connect(str(db)) as c:
        futures = c.execute("SELECT COUNT(*) FROM futures").fetchone()[0]
    return {"rss_mb": round(rss_mb(b.proc.pid), 1), "db_kb": round(db.stat().st_size / 1024, 1),
            "wal_kb": round(wal.stat().st_size / 1024 if wal.exists() else 0.0, 1), "futures": futures}


def cycle(b: BackendProc, finish: bool) -> None:
    sc = tinker.ServiceClient(base_url=b.url, api_key=b.key)
    tc = sc.create_lora_training_client(base_model=b.model, rank=8).result(60)
    tc.forward_backward([DATUM], "cross_entropy").result(60)
    tc.optim_step(types.AdamParams(learning_rate=1e-4)).result(60)
    s = tc.save_weights_and_get_sampling_client().result(60)
    s.sample(types.ModelInput.from_ints([5, 6, 7]), 1, types.SamplingParams(max_tokens=8, seed=1)).result(60)
    if finish:
        r = httpx.post(f"{b.url}/api/v1/sessions/{tc.model_id.split(':')[0]}/finish", headers={"X-API-Key": b.key},
                       json={})
        r.raise_for_status()


def run(b: BackendProc, n: int, finish: bool, label: str) -> None:
    t0 = time.time()
    for i in range(n):
        cycle(b, finish)
        if (i + 1) % 50 == 0:
            print(f"  {label}: {i + 1}/{n} cycles, {figures(b)}", flush=True)
    time.sleep(3)  # one TTL + reaper round: retrieved futures of the last cycles go too
    print(f"{label}: {n} cycles in {time.time() - t0:.0f} s -> {figures(b)}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--baseline-cycles", type=int, default=50)
    args = ap.parse_args()
    ensure_tiny_model()
    with tempfile.TemporaryDirectory(prefix="lts-soak-") as tmp:
        b = BackendProc(Path(tmp) / "state", extra={"backend": {"future_ttl_s": 1, "reap_every_s": 0.5}}).start()
        try:
            for _ in range(10):  # warm-up: allocator, compiled paths, the SDK's first connection
                cycle(b, True)
            time.sleep(3)
            start = figures(b)
            print(f"after 10 warm-up cycles: {start}", flush=True)
            run(b, args.cycles, True, "finished sessions")
            run(b, args.baseline_cycles, False, "baseline: sessions never finished")
        finally:
            b.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
