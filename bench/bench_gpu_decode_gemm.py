"""Decode GEMMs alone: cuBLAS (torch's default), cuBLASLt (``preferred_blas_library``) and the Triton
skinny GEMM (services/backend/gpu/skinny_gemm.py) over a sweep of tile / split-K configurations, at the
decode step's row counts, on every layer's weight in turn (as a decode step streams them: nothing stays
in L2), timed as CUDA-graph replays. Prints each variant's time per layer and the fraction of the
measured copy bandwidth that streaming the weight reached; the best config per (rows, N, K) is the table
for ``skinny_gemm.CONFIGS``. With ``--tma`` also the TMA kernels at 64 rows (``mm_tma``'s sweep, whose
best configs are the table for ``skinny_gemm.TMA_CONFIGS``, and ``mm_silu_tma``'s).

    python3 bench/bench_gpu_decode_gemm.py [--shape 4b] [--rows 1,16,64] [--tma] [--json out.jsonl]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_gpu_common import DEV, SHAPES, VOCAB, Results, hbm_bandwidth

from services.backend.gpu import skinny_gemm as sg


def weights(shape: str) -> dict[str, torch.Tensor]:
    s = SHAPES[shape]
    L, H, D, Hq, Hkv, Fd = (s["num_hidden_layers"], s["hidden_size"], s["head_dim"], s["num_attention_heads"],
                            s["num_key_value_heads"], s["intermediate_size"])
    r = lambda *sz: torch.randn(*sz, device=DEV, dtype=torch.bfloat16) * 0.02  # noqa: E731
    return {"qkv": r(L, (Hq + 2 * Hkv) * D, H), "o": r(L, H, Hq * D), "gate_up": r(L, 2 * Fd, H),
            "down": r(L, H, Fd), "lm_head": r(1, VOCAB, H)}


def tma_candidates(N: int, K: int):
    """(BN, BK, split, warps, stages) of ``skinny_gemm.mm_tma`` with (N / BN) * split programs in [100, 1400] and
    each split at least two K tiles."""
    for BN, BK, split, stages in itertools.product((32, 64, 128), (64, 128), (1, 2, 4, 8, 16), (4, 6)):
        progs = -(-N // BN) * split
        if 100 <= progs <= 1400 and K // split >= 2 * BK:
            yield (BN, BK, split, 4, stages)


def layers(fn, x, w):
    for l in range(w.shape[0]):
        fn(x, w[l])


def candidates(M: int, N: int, K: int):
    """Tile width BN, K tile BK, split, warps, stages, with (N / BN) * split programs in [120, 700]."""
    for BN, BK, split in itertools.product((16, 32, 64, 128), (128, 256), (1, 2, 4, 8)):
        progs = -(-N // BN) * split
        if 120 <= progs <= 700 and K // split >= BK and not (BN == 128 and BK == 256):
            yield (BN, BK, split, 4, 4)


def main() -> None:
    import triton.testing  # noqa: PLC0415  (CPU installs have no triton)

    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4b")
    ap.add_argument("--rows", default="1,16,64")
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-sweep", action="store_true", help="only the current CONFIGS table")
    ap.add_argument("--tma", action="store_true", help="also sweep skinny_gemm.mm_tma / mm_silu_tma at 64 rows")
    ap.add_argument("--write-tma-configs", default=None, help="write the best mm_tma config per (N, K) here (JSON)")
    ap.add_argument("--write-configs", default=None, help="write the best config per (row bucket, N, K) here (JSON)")
    a = ap.parse_args()
    R = Results(a.json)
    bw = hbm_bandwidth()
    R.add(bench="hbm_copy_bandwidth", bytes_per_s=bw)
    W = weights(a.shape)
    bench = lambda f: triton.testing.do_bench_cudagraph(f, rep=40, return_mode="median") / 1e3  # noqa: E731
    best: dict[tuple[int, int, int], tuple] = {}
    best_tma: dict[tuple[int, int], tuple] = {}
    t_start = time.perf_counter()
    for M in (int(m) for m in a.rows.split(",")):
        for name, w in W.items():
            L, N, K = w.shape
            x = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
            ref = F.linear(x, w[0])
            nbytes = N * K * 2
            row = dict(shape=a.shape, rows=M, weight=name, n=N, k=K)
            t_cublas = bench(partial(layers, F.linear, x, w)) / L
            torch.backends.cuda.preferred_blas_library("cublaslt")
            try:
                t_lt = bench(partial(layers, F.linear, x, w)) / L
            finally:
                torch.backends.cuda.preferred_blas_library("cublas")
            res = []
            cfgs = [sg.config_for(M, N, K)] if a.no_sweep or name == "lm_head" else list(candidates(M, N, K))
            for cfg in cfgs:
                try:
                    out = sg.reduce(sg.mm(x, w[0], cfg), torch.bfloat16)
                except triton.runtime.errors.OutOfResources:
                    continue
                err = float((out.float() - ref.float()).norm() / ref.float().norm())
                if err > 1e-2:
                    R.add(bench="decode_gemm_error", **row, config=list(cfg), rel_err=err)
                    continue
                t = bench(partial(layers, partial(sg.mm, cfg=cfg), x, w)) / L
                res.append((t, cfg))
            if a.tma and M == 64 and name != "gate_up":  # gate/up: mm_silu_tma below
                for cfg in tma_candidates(N, K):
                    try:
                        out = sg.reduce(sg.mm_tma(x, w[0], cfg), torch.bfloat16)
                        err = float((out.float() - ref.float()).norm() / ref.float().norm())
                        if err > 1e-2:
                            R.add(bench="decode_gemm_error", **row, variant="tma", config=list(cfg), rel_err=err)
                            continue
                        t = bench(partial(layers, partial(sg.mm_tma, cfg=cfg), x, w)) / L
                    except Exception as ex:  # noqa: BLE001  (a config the compiler rejects: the next one)
                        R.add(bench="decode_gemm_error", **row, variant="tma", config=list(cfg),
                              error=f"{type(ex).__name__}: {ex}"[:200])
                        continue
                    R.add(bench="decode_gemm_tma", **row, config=list(cfg), us=t * 1e6, frac_of_copy_bw=nbytes / t / bw)
                    if (N, K) not in best_tma or t < best_tma[(N, K)][0]:
                        best_tma[(N, K)] = (t, cfg)
                t = bench(partial(layers, sg.mm_tma, x, w)) / L  # tma_config's rule
                R.add(bench="decode_gemm_tma", **row, config=["rule", *sg.tma_config(N, K)], us=t * 1e6,
                      frac_of_copy_bw=nbytes / t / bw)
            if a.tma and M == 64 and name == "gate_up":  # the engine's kernel for 17-64 rows: with SiLU * up
                for cfg in [(32, 64, 4, 4), (64, 64, 4, 4), (32, 128, 4, 4), (32, 64, 4, 6), (64, 64, 4, 6)]:
                    t = bench(partial(layers, partial(sg.mm_silu_tma, cfg=cfg), x, w)) / L
                    R.add(bench="decode_gemm_tma", **row, config=["silu", *cfg], us=t * 1e6,
                          frac_of_copy_bw=nbytes / t / bw)
            res.sort()
            for t, cfg in res[:3]:
                # a split's float32 partials are summed by the next elementwise kernel: these bytes more there
                extra = (4 * cfg[2] - 2) * M * N if cfg[2] > 1 else 0
                R.add(bench="decode_gemm", **row, variant="triton", config=list(cfg), us=t * 1e6,
                      frac_of_copy_bw=nbytes / t / bw, us_with_partials=(t + extra / bw) * 1e6)
            for variant, t in (("cublas", t_cublas), ("cublaslt", t_lt)):
                R.add(bench="decode_gemm", **row, variant=variant, us=t * 1e6, frac_of_copy_bw=nbytes / t / bw)
            if res:
                best[(M, N, K)] = res[0][1]
    print(f"\n== decode GEMMs ({time.perf_counter() - t_start:.0f} s) ==")
    for r in R.rows:
        if r.get("bench") == "decode_gemm":
            print(r["rows"], r["weight"], r["variant"], r.get("config", ""), f"{r['us']:.1f} us",
                  f"{100 * r['frac_of_copy_bw']:.0f} %", f"(+partials {r.get('us_with_partials', r['us']):.1f} us)")
    tma = sorted((r for r in R.rows if r.get("bench") == "decode_gemm_tma"), key=lambda r: (r["weight"], r["us"]))
    shown: dict[str, int] = {}
    for r in tma:  # the 6 fastest per weight and the rule's (all in --json)
        shown[r["weight"]] = shown.get(r["weight"], 0) + 1
        if shown[r["weight"]] <= 6 or r["config"][0] == "rule":
            print(r["rows"], r["weight"], "tma", r["config"], f"{r['us']:.1f} us",
                  f"{100 * r['frac_of_copy_bw']:.0f} %")
    print("best:", {f"{k}": v for k, v in best.items()})
    print("best tma:", {f"{k}": (round(t * 1e6, 1), cfg) for k, (t, cfg) in best_tma.items()})
    if a.write_configs:  # skinny_gemm.config_for's keys: rows <= 16 share one bucket (the same 16-row tile)
        table = [[16 if M <= 16 else 64, N, K, list(cfg)] for (M, N, K), cfg in best.items()]
        Path(a.write_configs).write_text(json.dumps(table))
    if a.write_tma_configs:  # skinny_gemm.TMA_CONFIGS' keys
        Path(a.write_tma_configs).write_text(json.dumps([[N, K, list(cfg)] for (N, K), (_, cfg) in best_tma.items()]))


if __name__ == "__main__":
    main()
