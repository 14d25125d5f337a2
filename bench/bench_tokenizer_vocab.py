"""Why the tiny default uses the small vocabulary: tiny-model throughput, small vs full Qwen vocab.

Creates the xs tiny model twice (vocab small = 8,256 rows, full = 151,936 rows; identical
otherwise), then measures on CPU, fp32:

* train: forward + backward (cross-entropy on all positions) + Adam step, B x T tokens per step;
  also with logits/loss only on the last 64 positions (``logits_to_keep``; RL on short answers);
* sample: batched KV-cache sampling (multinomial, T=1) of N new tokens for B sequences after a
  short prompt - the per-step work of an RL rollout.

Prints tokens/s per configuration and the full/small slow-down.  Figures only, no assertions.

    python bench/bench_tokenizer_vocab.py [--threads 1] [--size xs] [--batch 8 --seq 256]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from services.models.loading import load_model_and_tokenizer
from services.models.tiny import make_tiny

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def bench_train(model, vocab_rows: int, batch: int, seq: int, steps: int, keep: int = 0) -> float:
    """Tokens/s of fwd+bwd+Adam; ``keep`` > 0: logits/loss only on the last ``keep`` positions."""

    g = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    model.train()
    x = torch.randint(0, 8192, (batch, seq), generator=g)
    labels = x.roll(-1, dims=1)
    labels[:, -1] = -100
    if keep:
        labels = labels[:, -keep:].contiguous()

    def step():
        logits = model(input_ids=x, logits_to_keep=keep).logits  # (B, T or keep, V) fp32: no copies below
        loss = torch.nn.functional.cross_entropy(logits.view(-1, vocab_rows), labels.view(-1), ignore_index=-100)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return batch * seq * steps / (time.perf_counter() - t)


def bench_sample(model, batch: int, prompt_len: int, new_tokens: int, reps: int) -> float:
    model.eval()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 8192, (batch, prompt_len), generator=g)

    @torch.no_grad()
    def run():
        out = model(input_ids=prompt, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1]
        for _ in range(new_tokens):
            nxt = torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=g)
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1]

    run()  # warm-up
    t = time.perf_counter()
    for _ in range(reps):
        run()
    return batch * new_tokens * reps / (time.perf_counter() - t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: see docs/models.md)")
    ap.add_argument("--size", default="xs", choices=["xs", "s"])
    ap.add_argument("--batch", type=int, default=8, help="train batch (default 8)")
    ap.add_argument("--seq", type=int, default=256, help="train sequence length (default 256)")
    ap.add_argument("--train-steps", type=int, default=3)
    ap.add_argument("--sample-batch", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON line instead of a table")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for vocab in ("small", "full"):
            t = time.perf_counter()
            meta = make_tiny(Path(tmp) / vocab, size=a.size, vocab=vocab, seed=0)
            created = time.perf_counter() - t
            model, _ = load_model_and_tokenizer(Path(tmp) / vocab, "cpu", "float32")
            rows = meta["model_vocab_size"]
            results[vocab] = {
                "vocab_rows": rows,
                "params": meta["parameters"],
                "create_s": round(created, 2),
                "train_tok_s": round(bench_train(model, rows, a.batch, a.seq, a.train_steps)),
                "train_last64_tok_s": round(bench_train(model, rows, a.batch, a.seq, a.train_steps, keep=64)),
                "sample_tok_s": round(bench_sample(model, a.sample_batch, 16, a.new_tokens, a.reps)),
            }
            del model
    s, f = results["small"], results["full"]
    summary = {
        "threads": a.threads, "size": a.size, "train_batch": f"{a.batch}x{a.seq}",
        "sample": f"B={a.sample_batch}, {a.new_tokens} new tokens", **{f"{k}": v for k, v in results.items()},
        "slowdown_train": round(s["train_tok_s"] / f["train_tok_s"], 1),
        "slowdown_train_last64": round(s["train_last64_tok_s"] / f["train_last64_tok_s"], 1),
        "slowdown_sample": round(s["sample_tok_s"] / f["sample_tok_s"], 1),
    }
    if a.json:
        print(json.dumps(summary))
        return 0
    print(f"tiny Qwen3 '{a.size}', fp32, {a.threads} torch thread(s); train B x T = {a.batch} x {a.seq} "
          f"(fwd+bwd+Adam), sampling B = {a.sample_batch}, {a.new_tokens} new tokens with KV cache")
    print(f"{'vocab':<6} {'rows':>8} {'params':>11} {'create s':>9} {'train tok/s':>12} {'train(last64)':>14} "
          f"{'sample tok/s':>13}")
    for v, r in results.items():
        print(f"{v:<6} {r['vocab_rows']:>8} {r['params']:>11,} {r['create_s']:>9} {r['train_tok_s']:>12,} "
              f"{r['train_last64_tok_s']:>14,} {r['sample_tok_s']:>13,}")
    print(f"full vocab is {summary['slowdown_train']}x slower to train (all positions), "
          f"{summary['slowdown_train_last64']}x with the head on the last 64 positions, "
          f"{summary['slowdown_sample']}x slower to sample")
    return 0


if __name__ == "__main__":
    sys.exit(main())
