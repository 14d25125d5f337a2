"""Sampler vs trainer: the logprobs the backend's sampler reports for the tokens it drew, against the trainer's
forward of the same tokens (issue 41 item 2), for one model and dtype and each sampler side by side.

    .venv-runtime/bin/python bench/bench_numerics.py                          # the tiny model, CPU float32, hf + static
    .venv-runtime/bin/python bench/bench_numerics.py --model DIR --device cuda --dtype bfloat16 --samplers static,hf

Both sides are the backend's own runtime (services/backend/runtime.py): ``Runtime.sample`` through the configured
sampler (``hf``: the HF DynamicCache sampler; ``static``: the static-KV-cache engine; ``vllm`` where installed), then
``Runtime.forward_backward(forward_only=True)`` on prompt + sampled tokens, exactly what an RL step's
forward_backward computes. Figures per sampler, with tinker-cookbook's names (cookbook/mismatch.py, the same
function the RL loop logs every step): mean / p99 / max |sampler - trainer|, mean |ratio - 1|, kl_sample_train_v1
(mean signed difference) and _v2 (half the mean squared difference). Prompts: chat-formatted fix-the-bug requests
of the built-in micro tasks' kind (realistic text, not random ids), ``--prompts`` of them, ``--new-tokens`` each,
temperature 1. The trainer side is a fresh LoRA adapter (B = 0: the base
model's logprobs through peft, the path training takes).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "bench"))
from cookbook.mismatch import mismatch_stats  # noqa: E402
from services.backend import unembed  # noqa: E402
from services.backend.codec import Datum, FwdBwdRequest  # noqa: E402
from services.backend.runtime import Runtime, TrainConfig  # noqa: E402
from services.backend.sampler import SampleSpec  # noqa: E402

FUNCS = ["absolute", "clamp", "mean", "median", "is_palindrome", "fizzbuzz", "flatten", "chunk", "dedupe",
         "word_count", "gcd", "factorial"]


def prompts(tokenizer, n: int) -> list[list[int]]:
    out = []
    for i in range(n):
        fn = FUNCS[i % len(FUNCS)]
        msgs = [{"role": "system", "content": "You are a careful Python programmer."},
                {"role": "user", "content": f"The test test_{fn} fails in src/{fn}.py (variant {i}). Read the file, "
                                            f"find the bug in `{fn}` and write the corrected function."}]
        out.append(list(tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                                      return_dict=False)))
    return out


def measure(model: str, device: str, dtype: str, sampler: str, n: int, new: int, seed: int,
            logits: str = "f32", timed: int = 0) -> dict:
    # read when a model or an engine is built and at every trainer forward
    unembed.ENABLED = logits in ("f32", "r32", "a32", "m32")
    unembed.RESIDUAL_F32 = logits in ("r32", "a32", "m32")
    unembed.ATTENTION_F32 = logits in ("a32", "m32")
    unembed.MATCHED_GEMM = logits == "m32"
    with tempfile.TemporaryDirectory() as tmp:
        rt = Runtime([{"name": "m", "path": model}], Path(tmp), device=device, dtype=dtype, sampler=sampler,
                     merge_lora_sampling=False)
        rt.create_model("t", TrainConfig("m", rank=1, seed=seed))   # a new adapter is the identity (B = 0)
        ps = prompts(rt.base("m").tokenizer, n)
        t0 = time.time()
        res = rt.sample("m", None, [SampleSpec(p, 1, new, 1.0, seed=seed + i) for i, p in enumerate(ps)])
        sample_s = time.time() - t0
        datums, masks = [], []
        for p, r in zip(ps, res):
            toks, lps, _ = r.sequences[0]
            seq = p + list(toks)
            q = np.zeros(len(seq) - 1, np.float32)   # the sampler's logprob of each drawn token, 0 on the prompt
            q[len(p) - 1:] = lps
            m = (np.arange(len(q)) >= len(p) - 1).astype(np.float32)
            datums.append(Datum(np.asarray(seq[:-1]), {"target_tokens": np.asarray(seq[1:]), "weights": m,
                                                       "logprobs": q}))
            masks.append(m)
        # the trainer's forward of the same tokens: what an RL step's forward_backward computes
        outs, _ = rt.forward_backward(FwdBwdRequest("t", 1, "cross_entropy", {}, True,
                                                    [Datum(d.tokens, {k: v for k, v in d.inputs.items()
                                                                      if k != "logprobs"}) for d in datums]))
        stats = mismatch_stats([SimpleNamespace(loss_fn_inputs=d.inputs) for d in datums], outs, masks)
        row = {"sampler": sampler, "device": device, "dtype": dtype, "logits": logits, "prompts": n,
               "sample_s": round(sample_s, 2), **{k: v for k, v in stats.items() if k != "mismatch/staleness"}}
        if timed:   # sampling throughput, warm (compiled, graphs captured): the best of ``timed`` passes
            best = float("inf")
            for _ in range(timed):
                t0 = time.time()
                res = rt.sample("m", None, [SampleSpec(p, 1, new, 1.0, seed=seed + 1000 + i) for i, p in enumerate(ps)])
                best = min(best, time.time() - t0)
            row["sample_tok_s"] = round(sum(len(r.sequences[0][0]) for r in res) / best, 1)
        for eng in getattr(rt.engine, "engines", {}).values():   # the static engine: did it compile and capture?
            row |= {"engine_compiled": eng.model.compiled, "engine_graphs": eng.use_graphs,
                    "engine_graph_captures": eng.stats.get("graph_captures"),
                    "engine_decode_step_ms": round(1e3 * eng.stats["decode_s"] / max(eng.stats["steps"], 1), 3)}
        return row


def random_model(shape: str, tokenizer: str, out: Path) -> str:
    """A random-init model of a bench shape (bench_gpu_common.SHAPES: 4b, 0.6b) saved with ``tokenizer``'s files:
    the kernels and sizes of a real model of that shape (its logprobs are a random model's)."""
    import torch  # noqa: PLC0415
    from bench_gpu_common import make_model  # noqa: PLC0415
    from transformers import AutoTokenizer  # noqa: PLC0415
    make_model(shape, device="cuda" if torch.cuda.is_available() else "cpu").save_pretrained(out)
    AutoTokenizer.from_pretrained(tokenizer).save_pretrained(out)
    return str(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(REPO / "models" / "qwen3-tiny-xs"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--samplers", default="hf,static", help="comma-separated: hf, static, vllm")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--logits", default="f32", help="comma-separated: f32 (the backend's unembedding: float32 logits "
                    "out of the lm_head GEMM on both sides: LTS_LOGITS_F32=1), bf16 (logits rounded to the model's "
                    "dtype: the default), r32 (a float32 residual stream on both sides, every GEMM writing float32, "
                    "and float32 logits: LTS_RESIDUAL_F32=1, services/backend/residual.py), a32 (r32 and float32 "
                    "attention: the probabilities not rounded before P @ V, LTS_ATTENTION_F32=1), m32 (a32 and "
                    "batch-invariant GEMMs on both sides, CUDA: LTS_MATCHED_GEMM=1, invariant_gemm.py)")
    ap.add_argument("--timed", type=int, default=0, help="also time N warm sampling passes (sample_tok_s: the best)")
    ap.add_argument("--shape", help="instead of --model: a random-init model of this bench shape (4b, 0.6b), saved "
                    "with --tokenizer's tokenizer")
    ap.add_argument("--tokenizer", help="the tokenizer directory for --shape")
    ap.add_argument("--json", help="append one JSON line per sampler here")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = random_model(a.shape, a.tokenizer, Path(tmp) / a.shape) if a.shape else a.model
        for s in a.samplers.split(","):
            for lg in a.logits.split(","):
                row = measure(model, a.device, a.dtype, s.strip(), a.prompts, a.new_tokens, a.seed, lg.strip(),
                              a.timed)
                rows.append(row | {"model": a.shape or Path(a.model).name})
                print("RESULT " + json.dumps(rows[-1]), flush=True)
                if a.json:
                    with open(a.json, "a") as f:
                        f.write(json.dumps(rows[-1]) + "\n")
    cols = ["mismatch/abs_diff_mean", "mismatch/abs_diff_p99", "mismatch/abs_diff_max",
            "mismatch/ratio_abs_dev_mean", "optim/kl_sample_train_v1", "optim/kl_sample_train_v2"]
    print(f"model {a.model}, {a.device} {a.dtype}, {a.prompts} prompts x {a.new_tokens} new tokens, temperature 1")
    print(f"{'sampler':8} {'logits':6} {'tokens':>7} " + " ".join(f"{c.split('/')[1]:>20}" for c in cols)
          + (f" {'sample tok/s':>12}" if a.timed else ""))
    for r in rows:
        print(f"{r['sampler']:8} {r['logits']:6} {r['mismatch/tokens']:>7} " + " ".join(f"{r[c]:>20.3g}" for c in cols)
              + (f" {r['sample_tok_s']:>12}" if a.timed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
