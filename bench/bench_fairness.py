"""Fair sampling (issue 17): how long a small sample request (2 tokens) from one client waits
while another client's large request (num_samples x max_tokens) runs, on the embedded tiny model.

Runs the same workload twice in one go: with the backend's default ``sample_round_tokens``
(large requests answered in chunks, small ones served between chunks) and with chunking off
(the baseline: one call for the whole large request). Prints, for each: the small request's
latency alone, its worst wait while the large one runs (several small requests, one per
second), and the large request's total time. Goal: worst wait < 5 s.

    .venv-control/bin/python bench/bench_fairness.py [--num-samples 1024] [--max-tokens 512]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import tinker  # noqa: E402
from tinker import types  # noqa: E402

from helpers import BackendProc, ensure_tiny_model  # noqa: E402


def measure(round_tokens: int | None, n: int, max_tokens: int) -> dict[str, float]:
    extra = {"backend": {"sample_round_tokens": round_tokens}} if round_tokens else {}
    with tempfile.TemporaryDirectory(prefix="bench-fair-") as d:
        b = BackendProc(Path(d), extra=extra).start()
        try:
            big_c = tinker.ServiceClient(base_url=b.url, api_key=b.key).create_sampling_client(base_model=b.model)
            small_c = tinker.ServiceClient(base_url=b.url, api_key=b.key).create_sampling_client(base_model=b.model)
            small_sp = types.SamplingParams(max_tokens=2, stop=[])

            def small() -> float:
                t = time.monotonic()
                small_c.sample(types.ModelInput.from_ints([1, 2, 3]), 1, small_sp).result(timeout=3600)
                return time.monotonic() - t

            small()   # warm-up
            alone = min(small() for _ in range(3))
            t0 = time.monotonic()
            big = big_c.sample(types.ModelInput.from_ints([5, 6, 7, 8, 9]), n,
                               types.SamplingParams(max_tokens=max_tokens, stop=[], seed=1))
            waits: list[float] = []
            done = threading.Event()
            threading.Thread(target=lambda: (big.result(timeout=7200), done.set()), daemon=True).start()
            while not done.is_set():
                time.sleep(1.0)
                if not done.is_set():
                    waits.append(small())
            total = time.monotonic() - t0
        finally:
            b.stop()
    return {"alone_s": alone, "worst_wait_s": max(waits) if waits else 0.0, "n_small": len(waits), "large_s": total}


def main() -> None:
    warnings.simplefilter("ignore", FutureWarning)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-samples", type=int, default=1024)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--skip-baseline", action="store_true", help="only the default (chunked) configuration")
    a = ap.parse_args()
    ensure_tiny_model()
    rows = [("default (chunked)", None)] + ([] if a.skip_baseline else [("baseline (no chunks)", 10**12)])
    print(f"large request: {a.num_samples} x {a.max_tokens} tokens; small: 1 x 2 tokens, one per second")
    for name, rt in rows:
        r = measure(rt, a.num_samples, a.max_tokens)
        print(f"{name:22s} small alone {r['alone_s']:.3f}s  worst wait {r['worst_wait_s']:.2f}s "
              f"(over {r['n_small']} small requests)  large request {r['large_s']:.1f}s", flush=True)


if __name__ == "__main__":
    main()
