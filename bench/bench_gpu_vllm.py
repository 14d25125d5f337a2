"""``engine.sampler: vllm`` on the GPU: decode speed against the static engine in the same run, logprobs
against the trainer, weight sync after an optimizer step, and an architecture the static engine does not
cover (Llama) against the HF fallback sampler.

Runs the runtime's own ``VllmSampling`` (services/backend/engines/vllm.py) on a random-init model of
the 4B shape (bench_gpu_common.SHAPES), weights pushed from the HF module as the runtime pushes them.

  python3 bench_gpu_vllm.py --tokenizer-dir ../.carry/tok --arch qwen3 --json out.jsonl
  python3 bench_gpu_vllm.py --tokenizer-dir ../.carry/tok --arch llama --json out.jsonl

Decode figures: vLLM's ``generate`` is timed whole (``max_tokens`` new tokens) and with ``max_tokens=1``
(prefill and the first token); decode tok/s = rows x (new - 1) / the difference. The static engine's
figures (``--static``) come from its own decode clock, as in bench_gpu_sampling.py. Both are compared with
the same bound: the weights (less the embedding) plus each row's KV read once a step at the copy bandwidth
measured in this run.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch  # noqa: E402
from bench_gpu_common import (  # noqa: E402
    DEV,
    SHAPES,
    VOCAB,
    Results,
    decode_bound_tok_s,
    env_info,
    free_cuda,
    hbm_bandwidth,
    logprob_agreement,
    qwen3_config,
    rand_prompts,
    timed,
)
from transformers import AutoModelForCausalLM, LlamaConfig  # noqa: E402

from services.backend.engines import SelectedWeights  # noqa: E402
from services.backend.engines.vllm import VllmSampling, to_result  # noqa: E402
from services.backend.gpu.qwen3 import Qwen3Shape  # noqa: E402
from services.backend.sampler import SampleSpec, generate  # noqa: E402

PROMPT, NEW = 512, 256
BASE_WEIGHTS = SelectedWeights(None, None)  # the base model's weights


def llama_config(shape: str) -> LlamaConfig:
    s = SHAPES[shape]
    return LlamaConfig(vocab_size=VOCAB, hidden_size=s["hidden_size"], num_hidden_layers=s["num_hidden_layers"],
                       num_attention_heads=s["num_attention_heads"], num_key_value_heads=s["num_key_value_heads"],
                       head_dim=s["head_dim"], intermediate_size=s["intermediate_size"],
                       tie_word_embeddings=s["tie_word_embeddings"], max_position_embeddings=32768,
                       rope_theta=500000.0, rms_norm_eps=1e-5, bos_token_id=151643, eos_token_id=151645,
                       pad_token_id=151643)


def model_dir(cfg, tok_dir: Path) -> Path:
    out = Path(tempfile.mkdtemp(prefix="vllm-bench-"))
    cfg.architectures = ["Qwen3ForCausalLM" if cfg.model_type == "qwen3" else "LlamaForCausalLM"]
    cfg.save_pretrained(str(out))
    for f in ("tokenizer_config.json", "chat_template.jinja"):
        if (tok_dir / f).exists():
            shutil.copy(tok_dir / f, out / f)
    (out / "tokenizer.json").write_bytes(gzip.decompress((tok_dir / "tokenizer.json.gz").read_bytes()))
    return out


def vllm_decode(vs: VllmSampling, base, R: Results, arch: str, shape: Qwen3Shape, batches: list[int], bw: float,
                new: int, seeded: bool) -> dict:
    out = {}

    def fallback(sp):
        raise AssertionError(f"{len(sp)} requests fell back to HF")

    for b in batches:
        prompts = rand_prompts(b, PROMPT, 100 + b)
        specs = [SampleSpec(prompt=p, max_tokens=new, seed=i if seeded else None) for i, p in enumerate(prompts)]
        first = [SampleSpec(prompt=p, max_tokens=1, seed=i if seeded else None) for i, p in enumerate(prompts)]
        vs.sample(base, BASE_WEIGHTS, specs, fallback)  # warm-up
        t_full = min(timed(vs.sample, base, BASE_WEIGHTS, specs, fallback)[1] for _ in range(2))
        t_one = min(timed(vs.sample, base, BASE_WEIGHTS, first, fallback)[1] for _ in range(2))
        res = vs.sample(base, BASE_WEIGHTS, specs, fallback)
        toks = sum(len(s[0]) for r in res for s in r.sequences)
        dec = b * (new - 1) / max(t_full - t_one, 1e-9)
        bound = decode_bound_tok_s(shape, b, PROMPT, new, bw)
        R.add(bench="sampling", engine="vllm" + ("_seeded" if seeded else ""), arch=arch, batch=b, new=new,
              tokens=toks, tok_s=toks / t_full, decode_tok_s=dec, step_ms=1e3 * (t_full - t_one) / (new - 1),
              prefill_s=t_one, total_s=t_full, hbm_bound_tok_s=bound, frac_of_bound=dec / bound)
        out[b] = (prompts, res)
    return out


def agreement(model, prompts, res, R: Results, tag: str) -> float:
    row = logprob_agreement(model, prompts, res)
    R.add(bench="logprobs_vs_trainer", engine="vllm", check=tag, **row)
    return row["mse"]


def optimizer_step(model, lr: float) -> None:
    """One AdamW step of next-token cross-entropy on random tokens (the trainer's weights move)."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=False)
    ids = torch.tensor(rand_prompts(4, 256, 5), device=DEV)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del opt
    model.eval()
    free_cuda()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--arch", default="qwen3", choices=["qwen3", "llama"])
    ap.add_argument("--shape", default="4b")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--new", type=int, default=NEW)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    ap.add_argument("--static", action="store_true", help="qwen3: the static engine's figures in the same run")
    ap.add_argument("--seeded", action="store_true", help="also time vLLM with a seed per request")
    ap.add_argument("--hf-runs", default="16:64,64:64", help="llama: HF fallback batch:new_tokens runs")
    ap.add_argument("--enforce-eager", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    R = Results(a.json)
    import vllm  # noqa: PLC0415 (on the device only)

    R.add(bench="env", vllm=vllm.__version__, **env_info())
    bw = hbm_bandwidth()
    R.add(bench="hbm_copy_bandwidth", bytes_per_s=bw)
    batches = [int(x) for x in a.batches.split(",")]
    cfg = qwen3_config(a.shape) if a.arch == "qwen3" else llama_config(a.shape)
    torch.manual_seed(0)
    with torch.device(DEV):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    shape = Qwen3Shape.from_hf_config(qwen3_config(a.shape))  # same sizes for llama (no q/k norm: 2 vectors/layer)
    path = model_dir(cfg, Path(a.tokenizer_dir))
    base = SimpleNamespace(name=f"bench/{a.arch}-{a.shape}", path=path, dtype=torch.bfloat16, hf=model,
                           info=SimpleNamespace(max_context=4096))
    opts = {"gpu_memory_utilization": a.gpu_memory_utilization, "max_context": PROMPT + a.new + 256,
            "max_slots": max(batches)}
    if a.enforce_eager:
        opts["enforce_eager"] = True
    vs = VllmSampling(opts, max(batches))
    t0 = time.perf_counter()
    vs.engine(base)
    R.add(bench="vllm_start", arch=a.arch, start_s=time.perf_counter() - t0)
    t0 = time.perf_counter()
    vs.push(base, vs.engine(base), ("base",), model, None)
    R.add(bench="vllm_push", arch=a.arch, push_s=time.perf_counter() - t0,
          params=sum(p.numel() for p in model.parameters()))

    runs = vllm_decode(vs, base, R, a.arch, shape, batches, bw, a.new, False)
    if a.seeded:
        try:
            vllm_decode(vs, base, R, a.arch, shape, batches, bw, a.new, True)
        except Exception:  # noqa: BLE001
            R.add(bench="error", where="seeded", tb=traceback.format_exc()[-1500:])
    b_ag = 16 if 16 in runs else batches[-1]
    mse0 = agreement(model, *runs[b_ag], R, "base")

    # Weight sync: the trainer takes an optimizer step; vLLM still holding the old weights must disagree,
    # and after the push (what save_weights_for_sampler + sample do) it must agree again.
    try:
        optimizer_step(model, 1e-3)
        prompts = runs[b_ag][0]
        specs = [SampleSpec(prompt=p, max_tokens=a.new) for p in prompts]
        params = vllm.SamplingParams(max_tokens=a.new, logprobs=0, ignore_eos=True)
        stale = vs.engines[base.name].generate([{"prompt_token_ids": p} for p in prompts], [params] * len(prompts),
                                               use_tqdm=False)
        mse_stale = agreement(model, prompts, [to_result(s, o) for s, o in zip(specs, stale)], R, "stale_weights")
        t0 = time.perf_counter()
        res = vs.sample(base, SelectedWeights("step1", SimpleNamespace(module=model, adapter=None)), specs, None)
        R.add(bench="vllm_push", arch=a.arch, check="after_optimizer_step", push_and_sample_s=time.perf_counter() - t0)
        mse1 = agreement(model, prompts, res, R, "after_push")
        R.add(bench="weight_sync", arch=a.arch, mse_base=mse0, mse_stale=mse_stale, mse_after_push=mse1,
              synced=bool(mse1 < 0.01 and mse_stale > 10 * mse1))
    except Exception:  # noqa: BLE001
        R.add(bench="error", where="weight_sync", tb=traceback.format_exc()[-1500:])

    R.add(bench="vllm_stats", **vs.stats)
    if a.arch == "qwen3" and a.static:
        try:
            import bench_gpu_sampling as bgs  # noqa: PLC0415 (heavy: only with --static)

            bgs.bench_engine(model, shape, R, a.shape, batches, bw, new=a.new)
        except Exception:  # noqa: BLE001
            R.add(bench="error", where="static", tb=traceback.format_exc()[-1500:])
    if a.arch == "llama" and a.hf_runs:
        for run in a.hf_runs.split(","):
            b, new = (int(x) for x in run.split(":"))
            try:
                specs = [SampleSpec(prompt=p, max_tokens=new, seed=i) for i, p in enumerate(rand_prompts(b, PROMPT, 7))]
                with torch.no_grad():
                    res, t = timed(generate, model, None, specs, torch.device(DEV), 256)
                R.add(bench="sampling", engine="hf_fallback", arch=a.arch, batch=b, new=new,
                      tok_s=sum(len(s[0]) for r in res for s in r.sequences) / t, total_s=t)
            except Exception:  # noqa: BLE001
                R.add(bench="error", where=f"hf {run}", tb=traceback.format_exc()[-1500:])
    del vs
    gc.collect()


if __name__ == "__main__":
    main()
