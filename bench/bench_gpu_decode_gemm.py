"""Decode GEMMs alone: cuBLAS (torch's default), cuBLASLt (``preferred_blas_library``) and the Triton
skinny GEMM (services/backend/gpu/skinny_gemm.py) over a sweep of tile / split-K configurations, at the
decode step's row counts, on every layer's weight in turn (as a decode step streams them: nothing stays
in L2), timed as CUDA-graph replays. Prints each variant's time per layer and the fraction of the
measured copy bandwidth that streaming the weight reached; the best config per (rows, N, K) is the table
for ``skinny_gemm.CONFIGS``.

    python3 bench/bench_gpu_decode_gemm.py [--shape 4b] [--rows 1,16,64] [--json out.jsonl]
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


def tma_kernel():
    """A Hopper variant for the 64-row case (an experiment of this bench, not used by the engine): x and
    the weight tiles read through host-side TMA descriptors (the bulk tensor copy engine), the K loop
    software-pipelined ``STAGES`` deep, optionally warp-specialised (a producer warp issuing the copies),
    split over K as ``skinny_gemm.mm``."""
    import triton  # noqa: PLC0415  (CPU installs have no triton)
    import triton.language as tl  # noqa: PLC0415

    @triton.jit
    def kernel(x_desc, w_desc, P, M, N, s_pz, K_ITERS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr, STAGES: tl.constexpr, WS: tl.constexpr, OUT_F32: tl.constexpr):
        pid_n = tl.program_id(0)
        pid_s = tl.program_id(1)
        n0 = pid_n * BN
        k0 = pid_s * K_ITERS * BK
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for i in tl.range(0, K_ITERS, num_stages=STAGES, warp_specialize=WS):
            x = x_desc.load([0, k0 + i * BK])
            w = w_desc.load([n0, k0 + i * BK])
            acc = tl.dot(x, w.T, acc)
        offs_m = tl.arange(0, BM)
        offs_n = n0 + tl.arange(0, BN)
        mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
        ptr = P + pid_s * s_pz + offs_m[:, None] * N + offs_n[None, :]
        if OUT_F32:
            tl.store(ptr, acc, mask=mask)
        else:
            tl.store(ptr, acc.to(P.dtype.element_ty), mask=mask)

    return kernel


def tma_mm(kernel, x, w, cfg):
    """x [M <= 64, K] @ w [N, K]^T with cfg = (BN, BK, split, warps, stages, ws); float32 partials
    [split, M, N] when split > 1, else [M, N] bf16 (as skinny_gemm.mm)."""
    import triton  # noqa: PLC0415
    from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: PLC0415

    BN, BK, split, warps, stages, ws = cfg
    M, K = x.shape
    N = w.shape[0]
    k_split = sg.split_len(K, BK, split)
    split = -(-K // k_split)
    out = (torch.empty(split, M, N, device=x.device, dtype=torch.float32) if split > 1
           else torch.empty(M, N, device=x.device, dtype=x.dtype))
    xd = TensorDescriptor.from_tensor(x, [64, BK])
    wd = TensorDescriptor.from_tensor(w, [BN, BK])
    kernel[(triton.cdiv(N, BN), split)](xd, wd, out, M, N, M * N, K_ITERS=k_split // BK, BM=64, BN=BN, BK=BK,
                                        STAGES=stages, WS=ws, OUT_F32=split > 1, num_warps=warps)
    return out


def tma_candidates(N: int, K: int):
    for BN, BK, split, stages, ws in itertools.product((64, 128), (64, 128), (1, 2, 4), (4,), (False, True)):
        progs = -(-N // BN) * split
        if 100 <= progs <= 800 and K // split >= BK:
            yield (BN, BK, split, 4, stages, ws)


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
    ap.add_argument("--tma", action="store_true", help="also sweep the TMA variant (tma_kernel) at 64 rows")
    ap.add_argument("--write-configs", default=None, help="write the best config per (row bucket, N, K) here (JSON)")
    a = ap.parse_args()
    R = Results(a.json)
    bw = hbm_bandwidth()
    R.add(bench="hbm_copy_bandwidth", bytes_per_s=bw)
    W = weights(a.shape)
    bench = lambda f: triton.testing.do_bench_cudagraph(f, rep=40, return_mode="median") / 1e3  # noqa: E731
    best: dict[tuple[int, int, int], tuple] = {}
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
            if a.tma and M == 64 and name != "lm_head":
                kern = tma_kernel()
                for cfg in tma_candidates(N, K):
                    try:
                        out = sg.reduce(tma_mm(kern, x, w[0], cfg), torch.bfloat16)
                        err = float((out.float() - ref.float()).norm() / ref.float().norm())
                        if err > 1e-2:
                            R.add(bench="decode_gemm_error", **row, variant="tma", config=list(cfg), rel_err=err)
                            continue
                        t = bench(partial(layers, partial(tma_mm, kern, cfg=cfg), x, w)) / L
                    except Exception as ex:  # noqa: BLE001  (a config the compiler rejects: the next one)
                        R.add(bench="decode_gemm_error", **row, variant="tma", config=list(cfg),
                              error=f"{type(ex).__name__}: {ex}"[:200])
                        continue
                    R.add(bench="decode_gemm_tma", **row, config=list(cfg), us=t * 1e6, frac_of_copy_bw=nbytes / t / bw)
            if a.tma and M == 64 and name == "gate_up":  # the engine's kernel for 17-64 rows: with SiLU * up
                for cfg in [(32, 64, 4, 4), (64, 64, 4, 4), (32, 128, 4, 4), (32, 64, 4, 3)]:
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
    for r in tma:
        print(r["rows"], r["weight"], "tma", r["config"], f"{r['us']:.1f} us", f"{100 * r['frac_of_copy_bw']:.0f} %")
    print("best:", {f"{k}": v for k, v in best.items()})
    if a.write_configs:  # skinny_gemm.config_for's keys: rows <= 16 share one bucket (the same 16-row tile)
        table = [[16 if M <= 16 else 64, N, K, list(cfg)] for (M, N, K), cfg in best.items()]
        Path(a.write_configs).write_text(json.dumps(table))


if __name__ == "__main__":
    main()
