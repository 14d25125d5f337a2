"""Sampling throughput of the static engine (services/backend/gpu) next to HF ``generate``, on
random-init Qwen3-shaped models, plus logits/logprob agreement with HF and the trainer.

    python3 bench/bench_gpu_sampling.py [--shapes 0.6b,4b] [--batches 1,16,64] [--json out.jsonl]

Per shape and batch size b: b distinct random prompts of 512 tokens, 256 new tokens each
(temperature 1, no stop), timed end to end (prefill + decode; graphs captured in a warm-up run
that is not timed), decode-only tok/s, and the HBM bound: per decode step the weights (all but the
embedding, which is only gathered) plus the KV cache of the live context are read once, at the
measured copy bandwidth (and at the datasheet 4.8 TB/s).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
import traceback
from functools import partial
from pathlib import Path

import torch
from bench_gpu_common import (
    DEV,
    HBM_NOMINAL,
    SHAPES,
    VOCAB,
    Results,
    decode_bound_tok_s,
    env_info,
    free_cuda,
    hbm_bandwidth,
    logprob_agreement,
    make_model,
    n_params,
    rand_prompts,
    sync,
    timed,
)
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForCausalLM, LlamaConfig

from services.backend.gpu import decode_attention as da
from services.backend.gpu import qwen3, sampling, skinny_gemm
from services.backend.gpu.engine import EngineOptions, StaticEngine
from services.backend.gpu.qwen3 import Qwen3Shape, StaticQwen3
from services.backend.gpu.weights import Qwen3Parts
from services.backend.sampler import SampleSpec, generate

PROMPT, NEW = 512, 256
OLD_CHUNKS = {"TARGET_PROGRAMS": 528, "ONE_CHUNK_PAIRS": 1 << 30}  # the third session's attention chunking
COMPILE = None  # engine default: compile the fused pieces on CUDA


def check_logits(model, shape: Qwen3Shape, R: Results, name: str) -> None:
    """Engine prefill/decode logits vs HF forward (bf16 both), and its float32 log-softmax."""
    m = StaticQwen3(shape, DEV, torch.bfloat16, 2, 512)
    m.load(Qwen3Parts(model))
    ids = torch.tensor(rand_prompts(2, 300, 1), device=DEV)
    with torch.no_grad():
        ref = model(input_ids=ids).logits.float()
        pre = m.logits(m.prefill(ids[:, :292], torch.tensor([0, 1], device=DEV))).float()
        dec = []
        for p in range(292, 300):
            pos = torch.full((2,), p, device=DEV)
            dec.append(m.decode(ids[:, p], pos, 384).float())
        dec = torch.stack(dec, 1)
    r = ref[:, 292:300]

    def rel(a, b):
        return float((a - b).norm() / b.norm())

    lp_a, lp_b = torch.log_softmax(dec, -1), torch.log_softmax(r, -1)
    top = lp_b.argmax(-1)
    R.add(bench="logits_vs_hf", shape=name, prefill_rel_err=rel(pre, ref[:, :292]), decode_rel_err=rel(dec, r),
          decode_logprob_max_abs=float((lp_a - lp_b).abs().max()),
          argmax_agree=float((lp_a.argmax(-1) == top).float().mean()))
    del m


def engine_run(eng: StaticEngine, specs: list[SampleSpec]):
    for k in ("steps", "prefill_s", "decode_s", "tokens"):
        eng.stats[k] = 0 if k in ("steps", "tokens") else 0.0
    res, t = timed(eng.generate, specs, None)
    return res, t, dict(eng.stats)


def bench_engine(model, shape: Qwen3Shape, R: Results, name: str, batches: list[int], bw: float,
                 attention: str = "auto", graphs: bool = True, new: int | None = None, tag: str = "",
                 fuse_layers: bool = True, overlap: bool | None = None, gemm: str = "auto",
                 consts: dict | None = None, pieces: str | None = None, **opts):
    """``consts``: {module: {name: value}}, module constants for this engine's runs (an earlier default, e.g.
    decode_attention's chunking); ``pieces``: a file holding an earlier version of gpu/decode_pieces, which the
    model uses for this engine's runs."""
    if pieces:
        spec = importlib.util.spec_from_file_location("decode_pieces_earlier", pieces)
        earlier = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(earlier)
        saved_pieces, qwen3.decode_pieces = qwen3.decode_pieces, earlier
        try:
            return bench_engine(model, shape, R, name, batches, bw, attention, graphs, new, tag, fuse_layers, overlap,
                                gemm, consts, None, **opts)
        finally:
            qwen3.decode_pieces = saved_pieces
    if consts:
        saved = [(mod, k, getattr(mod, k)) for mod, kv in consts.items() for k in kv]
        for mod, kv in consts.items():
            for k, v in kv.items():
                setattr(mod, k, v)
        try:
            return bench_engine(model, shape, R, name, batches, bw, attention, graphs, new, tag, fuse_layers, overlap,
                                gemm, None, None, **opts)
        finally:
            for mod, k, v in saved:
                setattr(mod, k, v)
    new = new or NEW
    eng = StaticEngine(shape, DEV, torch.bfloat16, EngineOptions(max_slots=max(batches), max_context=PROMPT + NEW + 256,
                                                                 attention=attention, cuda_graphs=graphs,
                                                                 compile=COMPILE, fuse_layers=fuse_layers,
                                                                 overlap=overlap, gemm=gemm, **opts))
    eng.load_weights("base", model)
    w_bytes = shape.weight_bytes() - shape.vocab * shape.hidden * 2  # embedding rows are gathered, not streamed
    out = {}
    for b in batches:
        specs = [SampleSpec(prompt=p, max_tokens=new, seed=i) for i, p in enumerate(rand_prompts(b, PROMPT, 100 + b))]
        t0 = time.perf_counter()
        eng.generate(specs, None)  # warm-up: captures this run's graphs
        warm = time.perf_counter() - t0
        res, t, st = engine_run(eng, specs)
        toks = sum(len(s[0]) for r in res for s in r.sequences)
        dec_tok_s = st["tokens"] / st["decode_s"]
        step_s = st["decode_s"] / max(st["steps"], 1)
        bound = decode_bound_tok_s(shape, b, PROMPT, new, bw)
        bound_w = b / (w_bytes / HBM_NOMINAL)
        R.add(bench="sampling", engine=f"static{tag}", attention=eng.model.attention, gemm=eng.model.gemm,
              attn_one_chunk_pairs=da.ONE_CHUNK_PAIRS,
              fuse_silu=eng.opts.fuse_silu, token_choice=eng.token_choice, triton_pieces=eng.model.triton_pieces,
              choice_fast_math=sampling.FAST_MATH,
              tma_gemm=eng.model.tma_gemm and eng.model.mid_silu is not None, pdl_gemm=eng.model.pdl_gemm,
              graphs=graphs, compiled=eng.model.compiled,
              compile_s=eng.stats.get("compile_s"), shape=name, batch=b, new=new,
              tok_s=toks / t, decode_tok_s=dec_tok_s, step_ms=1e3 * step_s, prefill_s=st["prefill_s"], total_s=t,
              warmup_s=warm, graphs_captured=eng.stats["graph_captures"], hbm_bound_tok_s=bound,
              frac_of_bound=dec_tok_s / bound, weights_only_bound_4p8=bound_w,
              frac_of_weights_bound=dec_tok_s / bound_w)
        out[b] = res
    return eng, out


def hf_generate(model, R: Results, name: str, b: int, new: int) -> None:
    ids = torch.tensor(rand_prompts(b, PROMPT, 7), device=DEV)
    kw = dict(attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, top_p=1.0, temperature=1.0, pad_token_id=0)
    with torch.no_grad():
        model.generate(input_ids=ids, max_new_tokens=4, min_new_tokens=4, **kw)
        out, t = timed(model.generate, input_ids=ids, max_new_tokens=new, min_new_tokens=new, **kw)
    toks = (out.shape[1] - PROMPT) * b
    R.add(bench="sampling", engine="hf_generate", shape=name, batch=b, new=new, tok_s=toks / t, total_s=t)


SWEEP = [  # (block, warps, stages, target programs) of decode_attention.attend; the first is the default
    (64, 4, 2, 528), (64, 4, 3, 528), (128, 4, 2, 528), (128, 8, 3, 528), (64, 4, 2, 1056), (64, 4, 2, 264),
    (32, 4, 2, 528), (64, 2, 2, 528), (128, 4, 3, 1056), (64, 4, 4, 528), (64, 8, 2, 528), (32, 4, 3, 1056),
    (128, 4, 2, 264), (64, 4, 2, 2112)]


def attention_micro(shape: Qwen3Shape, R: Results, name: str, batches: list[int], bw: float, sweep: bool) -> None:
    """One layer's decode attention alone (the Triton split-K kernel with its KV write, and the bmm
    path), rows at random lengths in [PROMPT, PROMPT + NEW), timed as CUDA-graph replays (as in the
    engine): time and the K/V bytes each row must read over that time (against the measured copy
    bandwidth). ``sweep``: also each launch configuration of SWEEP."""
    import triton.testing  # noqa: PLC0415  (CPU installs have no triton)


    D, Hq, Hkv = shape.head_dim, shape.heads, shape.kv_heads
    T = PROMPT + NEW + 256
    for b in batches:
        g = torch.Generator(device="cpu").manual_seed(b)
        kc = torch.randn(b, Hkv, T, D, generator=g).to(DEV, torch.bfloat16)
        vc = torch.randn_like(kc)
        q = torch.randn(b, Hq, D, device=DEV, dtype=torch.bfloat16)
        kn = torch.randn(b, Hkv, D, device=DEV, dtype=torch.bfloat16)
        vn = torch.randn_like(kn)
        pos = torch.randint(PROMPT, PROMPT + NEW, (b,), generator=g).to(DEV)
        ctx = -(-int(pos.max() + 1) // 128) * 128
        m = StaticQwen3(shape, DEV, torch.bfloat16, 1, 1, attention="bmm")  # for its _attend (bmm) only
        m.kc, m.vc = kc[None], vc[None]
        valid = torch.arange(ctx, device=DEV)[None, :] <= pos[:, None]
        bias = torch.zeros(b, 1, 1, ctx, device=DEV).masked_fill(~valid[:, None, None, :], float("-inf"))
        need = float((pos + 1).sum()) * Hkv * D * 2 * 2  # K and V, bf16, each row to its length
        bench = lambda f: triton.testing.do_bench_cudagraph(f, return_mode="median") / 1e3  # noqa: E731
        t_bmm = bench(partial(m._attend, q, 0, b, ctx, bias, valid))
        for cfg in (SWEEP if sweep else SWEEP[:1]):
            blk, w, st, tgt = cfg
            t_tr = bench(partial(da.attend, q, kn, vn, kc, vc, pos, ctx, D ** -0.5, blk, w, st, tgt))
            R.add(bench="attention_micro", shape=name, batch=b, ctx_bucket=ctx, config=list(cfg), triton_us=t_tr * 1e6,
                  bmm_us=t_bmm * 1e6, triton_frac_of_copy_bw=need / t_tr / bw, bmm_frac_of_copy_bw=need / t_bmm / bw,
                  chunk=da.chunk_for(b, Hkv, ctx, blk, tgt))
        del kc, vc, m
        free_cuda()


def decode_profile(model, shape: Qwen3Shape, R: Results, name: str, batches: list[int], bw: float,
                   out_dir: str | None) -> None:
    """Kernels of one decode step (torch.profiler, eager launches of the compiled pieces, rows at
    position ~PROMPT + NEW / 2): count per step and GPU time per kernel family, next to the
    graph-replayed step time of the same engine and of its token choice (unfiltered, temperature 1),
    and each weight matrix's GEMM alone at the step's batch size (CUDA-graph replays: bandwidth
    reached streaming that weight)."""
    import triton.testing  # noqa: PLC0415  (CPU installs have no triton)

    eng = StaticEngine(shape, DEV, torch.bfloat16, EngineOptions(max_slots=max(batches), max_context=PROMPT + NEW + 256,
                                                                 compile=COMPILE))
    eng.load_weights("base", model)
    m = eng.model
    bench = lambda f: triton.testing.do_bench_cudagraph(f, return_mode="median") / 1e3  # noqa: E731
    for b in batches:
        tok = torch.randint(0, shape.vocab, (b,), device=DEV)
        pos = torch.randint(PROMPT, PROMPT + NEW, (b,), device=DEV)
        ctx = -(-int(pos.max() + 1) // 128) * 128
        step = partial(m.decode, tok, pos, ctx)  # rewrites the same KV positions: fine for timing
        for _ in range(3):
            step()
        sync()
        t_graph = bench(step)
        logits = step()
        one = torch.ones(b, device=DEV)
        choose_args = (logits, one, one.long() - 1, one, tok, tok, eng.vidx, False)
        t_choose = bench(partial(eng._choose, *choose_args))
        sampling.FAST_MATH = False  # the kernel with IEEE logarithm and division (same run)
        try:
            t_choose_exact = bench(partial(eng._choose, *choose_args))
        finally:
            sampling.FAST_MATH = True
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            sync()
        fam: dict[str, list[float]] = {}
        n_kernels = 0
        for ev in prof.events():
            if ev.device_type == torch.autograd.DeviceType.CUDA:
                n_kernels += 1
                k = ev.name
                gemm = any(x in k for x in ("gemm", "nvjet", "cutlass", "sm90"))
                key = "gemm" if gemm else "attention" if "split" in k or "merge" in k else k[:60]
                e = fam.setdefault(key, [0, 0.0])
                e[0] += 1
                e[1] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
        rows = sorted(((k, n / 5, us / 5) for k, (n, us) in fam.items()), key=lambda r: -r[2])
        busy = sum(r[2] for r in rows)
        R.add(bench="decode_profile", shape=name, batch=b, ctx_bucket=ctx, graph_step_us=t_graph * 1e6,
              token_choice_us=t_choose * 1e6, token_choice_exact_math_us=t_choose_exact * 1e6,
              kernels_per_step=n_kernels / 5, kernel_busy_us=busy, top=[[k, n, round(us, 1)] for k, n, us in rows[:12]])
        if out_dir:
            with open(f"{out_dir}/decode_profile_{name}_b{b}.txt", "w") as f:
                f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=40))
        mats = {"qkv": m.w_qkv[0], "o": m.w_o[0], "gate_up": m.w_gu[0], "down": m.w_down[0], "lm_head": m.lm_head}
        for wname, w in mats.items():
            x = torch.randn(b, w.shape[1], device=DEV, dtype=torch.bfloat16)
            t = bench(partial(torch.nn.functional.linear, x, w))
            R.add(bench="decode_gemm", shape=name, batch=b, weight=wname, n=w.shape[0], k=w.shape[1], us=t * 1e6,
                  frac_of_copy_bw=w.numel() * 2 / t / bw)
    del eng, m
    free_cuda()


def hf_fallback_other_arch(R: Results, arch: str, runs: list[tuple[int, int]], shape: str = "4b") -> None:
    """The backend's HF sampler (services/backend/sampler.generate: DynamicCache, batched, seeded;
    under no_grad as Runtime.sample calls it), the path of every architecture the static engine does
    not cover, on a random-init model of the given shape in another architecture (Llama: no q/k norm)."""


    if arch != "llama":
        raise ValueError(f"--other-arch: llama only, got {arch!r}")
    d = dict(SHAPES[shape])
    cfg = LlamaConfig(vocab_size=VOCAB, max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                      hidden_act="silu", **d)
    torch.manual_seed(0)
    with torch.device(DEV):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    model.requires_grad_(False)
    for b, new in runs:
        specs = [SampleSpec(prompt=p, max_tokens=new, seed=i) for i, p in enumerate(rand_prompts(b, PROMPT, 9))]
        with torch.no_grad():
            generate(model, None, [SampleSpec(prompt=specs[0].prompt, max_tokens=4, seed=0)], torch.device(DEV))
        free_cuda()
        before = torch.cuda.memory_allocated() / 1e9 if DEV.startswith("cuda") else 0.0
        try:
            with torch.no_grad():
                res, t = timed(generate, model, None, specs, torch.device(DEV))
        except torch.OutOfMemoryError as ex:
            R.add(bench="error", step="other_arch", batch=b, allocated_before_gb=before, error=str(ex)[:200])
            free_cuda()
            continue
        toks = sum(len(sq[0]) for r in res for sq in r.sequences)
        peak = torch.cuda.max_memory_allocated() / 1e9 if DEV.startswith("cuda") else 0.0
        R.add(bench="sampling", engine="hf_fallback_sampler", arch=arch, shape=shape, batch=b, new=new, tok_s=toks / t,
              total_s=t, allocated_before_gb=before, peak_gb=peak)
    del model
    free_cuda()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="0.6b,4b")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--hf", default="1:64,16:64,64:256", help="HF generate runs, batch:new_tokens (empty: none)")
    ap.add_argument("--variants", default="bmm,sdpa,nographs,grpo",
                    help="extra engine runs: bmm/sdpa attention, unfused (issue-20 step), sync (no overlap) at the "
                         "smallest and largest batch; cublas, nosilu (SiLU * up its own kernel), torchchoice (token "
                         "choice compiled from torch), torchpieces (Inductor's qk_rope/add_norm), splitattn (attention "
                         "chunks at every batch), cublasmid (cuBLAS GEMMs at 17-64 "
                         "rows), earlierpieces (--earlier-pieces' decode_pieces), previous (the fourth session's "
                         "default: cublasmid, --earlier-pieces, exact-math token choice), nopdl (pdl_gemm off: the "
                         "17-64-row layer's kernels in plain stream order) at every batch; nographs; grpo")
    ap.add_argument("--other-arch", default="", help="also time the HF fallback sampler on this architecture (llama)")
    ap.add_argument("--other-arch-runs", default="1:32,64:64", help="batch:new_tokens runs of --other-arch")
    ap.add_argument("--other-arch-shape", default="4b")
    ap.add_argument("--attn-sweep", action="store_true", help="time each launch configuration of SWEEP")
    ap.add_argument("--steps", default="attn,logits,engine,variants,hf", help="which parts to run per shape")
    ap.add_argument("--json", default=None)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--profile-dir", default=None, help="write the decode step's profiler tables here (step profile)")
    ap.add_argument("--gemm-configs", default=None, help="skinny_gemm configs (bench_gpu_decode_gemm --write-configs)")
    ap.add_argument("--tma-configs", default=None, help="mm_tma configs (bench_gpu_decode_gemm --write-tma-configs)")
    ap.add_argument("--earlier-pieces", default=None,
                    help="an earlier gpu/decode_pieces.py (git show REV:services/backend/gpu/decode_pieces.py) for "
                         "the previous / earlierpieces variants")
    a = ap.parse_args()
    if a.gemm_configs:
        for bucket, n, k, cfg in json.loads(Path(a.gemm_configs).read_text()):
            skinny_gemm.CONFIGS[(bucket, n, k)] = tuple(cfg)
    if a.tma_configs:
        for n, k, cfg in json.loads(Path(a.tma_configs).read_text()):
            skinny_gemm.TMA_CONFIGS[(n, k)] = tuple(cfg)
    globals().update(PROMPT=a.prompt, NEW=a.new, COMPILE=False if a.no_compile else None)
    R = Results(a.json)
    R.add(bench="env", **env_info())
    bw = hbm_bandwidth()
    R.add(bench="hbm_copy_bandwidth", bytes_per_s=bw)
    batches = [int(x) for x in a.batches.split(",")]
    for name in a.shapes.split(","):
        model = make_model(name)
        shape = Qwen3Shape.from_hf_config(model.config)
        R.add(bench="model", shape=name, params=n_params(model), weight_bytes=shape.weight_bytes(),
              kv_bytes_per_token=shape.kv_bytes_per_token())
        for step in a.steps.split(","):
            try:
                if step == "profile" and DEV.startswith("cuda"):
                    decode_profile(model, shape, R, name, batches, bw, a.profile_dir)
                elif step == "attn" and DEV.startswith("cuda"):
                    attention_micro(shape, R, name, batches, bw, a.attn_sweep)
                elif step == "logits":
                    check_logits(model, shape, R, name)
                elif step == "engine":
                    eng, out = bench_engine(model, shape, R, name, batches, bw)
                    lb = 16 if 16 in out else batches[-1]
                    R.add(bench="logprobs_vs_trainer", shape=name,
                          **logprob_agreement(model, rand_prompts(lb, PROMPT, 100 + lb), out[lb]))
                    del eng, out
                    free_cuda()
                elif step == "variants":
                    B = batches[-1]
                    for v in a.variants.split(","):
                        if v in ("bmm", "sdpa"):
                            e, _ = bench_engine(model, shape, R, name, sorted({batches[0], B}), bw, attention=v)
                        elif v == "sync":  # each step's tokens recorded before the next step starts
                            e, _ = bench_engine(model, shape, R, name, sorted({batches[0], B}), bw, overlap=False,
                                                tag="_sync")
                        elif v == "cublas":  # decode GEMMs by cuBLAS inside the compiled pieces
                            e, _ = bench_engine(model, shape, R, name, batches, bw, gemm="torch", tag="_cublas")
                        elif v == "nosilu":  # SiLU * up in a kernel of its own after the gate/up GEMM
                            e, _ = bench_engine(model, shape, R, name, batches, bw, tag="_nosilu", fuse_silu=False)
                        elif v == "previous":  # the fourth session's default: cuBLAS GEMMs inside compiled pieces
                            # at 17-64 rows (gate/up through mm_silu_tma), its decode_pieces, token choice with IEEE
                            # logarithm and division
                            e, _ = bench_engine(model, shape, R, name, batches, bw, tag="_previous", tma_gemm=False,
                                                pieces=a.earlier_pieces,
                                                consts={sampling: {"FAST_MATH": False}})
                        elif v == "nopdl":  # the 17-64-row layer's kernels launched in plain stream order
                            e, _ = bench_engine(model, shape, R, name, batches, bw, tag="_nopdl", pdl_gemm=False)
                        elif v == "cublasmid":  # cuBLAS GEMMs inside compiled pieces at 17-64 rows
                            e, _ = bench_engine(model, shape, R, name, batches, bw, tag="_cublasmid", tma_gemm=False)
                        elif v == "earlierpieces":  # --earlier-pieces' decode_pieces
                            e, _ = bench_engine(model, shape, R, name, batches, bw, tag="_earlierpieces",
                                                pieces=a.earlier_pieces)
                        elif v == "torchpieces":  # qk_rope / add_norm compiled by Inductor, not decode_pieces
                            e, _ = bench_engine(model, shape, R, name, batches, bw, tag="_torchpieces",
                                                triton_pieces=False)
                        elif v == "splitattn":  # the attention split in chunks at every batch (no one-chunk rule)
                            e, _ = bench_engine(model, shape, R, name, batches, bw, tag="_splitattn",
                                                consts={da: OLD_CHUNKS})
                        elif v == "torchchoice":  # token choice by the compiled torch function, not the kernel
                            e, _ = bench_engine(model, shape, R, name, batches, bw, tag="_torchchoice",
                                                token_choice="torch")
                        elif v == "unfused":  # the issue-20 step: pre + post pieces per layer
                            e, _ = bench_engine(model, shape, R, name, sorted({batches[0], B}), bw, fuse_layers=False,
                                                tag="_unfused")
                        elif v == "nographs":
                            e, _ = bench_engine(model, shape, R, name, [B], bw, graphs=False, new=32)
                        elif v == "grpo":  # 8 prompts x 8 samples: one prefill per prompt, KV copied to 8 slots
                            e = StaticEngine(shape, DEV, torch.bfloat16, EngineOptions(max_slots=64, max_context=1024,
                                                                                        compile=COMPILE))
                            e.load_weights("base", model)
                            specs = [SampleSpec(prompt=p, num_samples=8, max_tokens=NEW, seed=i)
                                     for i, p in enumerate(rand_prompts(8, PROMPT, 5))]
                            e.generate(specs, None)
                            res, t, st = engine_run(e, specs)
                            R.add(bench="sampling", engine="static_grpo_8x8", shape=name, batch=64, new=NEW,
                                  tok_s=64 * NEW / t, prefill_s=st["prefill_s"], total_s=t,
                                  decode_tok_s=st["tokens"] / st["decode_s"])
                        else:
                            continue
                        del e
                        free_cuda()
                elif step == "hf" and a.hf:
                    for spec in a.hf.split(","):
                        b, n = (int(x) for x in spec.split(":"))
                        hf_generate(model, R, name, b, n)
            except Exception as ex:  # noqa: BLE001  (keep the other measurements)
                traceback.print_exc()
                R.add(bench="error", shape=name, step=step, error=f"{type(ex).__name__}: {ex}"[:500])
                free_cuda()
        del model
        free_cuda()
    if a.other_arch:
        try:
            runs = [tuple(int(x) for x in r.split(":")) for r in a.other_arch_runs.split(",")]
            hf_fallback_other_arch(R, a.other_arch, runs, a.other_arch_shape)
        except Exception as ex:  # noqa: BLE001
            traceback.print_exc()
            R.add(bench="error", step="other_arch", error=f"{type(ex).__name__}: {ex}"[:500])
    print("\n== sampling summary ==")
    for r in R.rows:
        if r.get("bench") in ("sampling", "attention_micro", "logprobs_vs_trainer", "logits_vs_hf", "error",
                              "decode_profile", "decode_gemm"):
            print({k: v for k, v in r.items() if k not in ("bench",)})


if __name__ == "__main__":
    main()
