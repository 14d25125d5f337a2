"""The conformance suite against the backend on a GPU (bf16 weights, static sampler).

    python3 bench/bench_gpu_conformance.py --suite .carry/conformance [--model models/qwen3-tiny-xs] [--log out.txt]

Starts ``python -m services.backend`` on the model (device cuda, dtype bfloat16, engine.sampler auto =
static on CUDA), runs the suite with bf16 tolerances (below; the suite's defaults are for float32), and
exits with pytest's status. The float32 reference (MODEL_PATH) runs on the CPU as the suite defaults to.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_gpu_common import ROOT
from bench_gpu_grpo_step import RAY_ONE_GPU, free_port, start_backend, stop

BF16_TOLERANCES = {
    "CONFORMANCE_REF_ATOL_MEAN": "0.1",     # backend (bf16) vs float32 reference: mean |dlogprob|
    "CONFORMANCE_REF_ATOL_MAX": "1.0",
    "CONFORMANCE_REF_RTOL_LOSS": "0.05",
    "CONFORMANCE_PATH_ATOL_MEAN": "0.05",   # same weights through another path (batched vs single, ...)
    "CONFORMANCE_PATH_ATOL_MAX": "0.5",
    "CONFORMANCE_SAMPLE_LOGPROB_MSE": "0.01",
    "CONFORMANCE_DET_ATOL": "1e-3",
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default=str(ROOT / ".carry" / "conformance"))
    ap.add_argument("--model", default=str(ROOT / "models" / "qwen3-tiny-xs"))
    ap.add_argument("--name", default="local/qwen3-tiny-xs")
    ap.add_argument("--log", default=None)
    ap.add_argument("--backend-log", default=None)
    ap.add_argument("--sampler", default="auto", help="engine.sampler: auto (static on CUDA) | static | hf")
    ap.add_argument("--ray", action="store_true", help="engine.ray: 1 trainer rank + 1 sampler replica on the one GPU")
    ap.add_argument("pytest_args", nargs="*")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="conf-"))
    key, port = "tml-conformance", free_port()
    os.environ.setdefault("HF_HOME", str(ROOT / "hf-home"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.time()
    extra = {"sampler": a.sampler, "threads": 1, **({"ray": RAY_ONE_GPU} if a.ray else {})}
    proc = start_backend(Path(a.model), tmp / "state", port, key, a.name, extra,
                         tokenizer_id=a.name)
    print(f"backend up in {time.time() - t0:.1f}s", flush=True)
    env = dict(os.environ, TINKER_BASE_URL=f"http://127.0.0.1:{port}", TINKER_API_KEY=key, BASE_MODEL=a.name,
               MODEL_PATH=a.model, PYTHONDONTWRITEBYTECODE="1", **BF16_TOLERANCES)
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", a.suite,
                            *a.pytest_args],
                           env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    finally:
        stop(proc)
    out = r.stdout + r.stderr
    if a.log:
        Path(a.log).write_text(out)
    if a.backend_log and (tmp / "state" / "backend.log").exists():
        Path(a.backend_log).write_text((tmp / "state" / "backend.log").read_text()[-200000:])
    print(out[-5000:])
    print("conformance exit", r.returncode, f"({time.time() - t0:.0f}s)")
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
