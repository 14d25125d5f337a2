"""The HF sampler's decode path on CPU (services/backend/hf_decode.py) against transformers' own
(``DynamicCache`` + ``sdpa``), same process, same model, same seeded requests.

Two batch shapes of the embedded agent preset: 64 rows of 56 new tokens after a 650-token shared
prefix (the system prompt and tool schemas), either 8 prompts x 8 samples with 30 own tokens (a
first turn: GRPO groups) or 64 prompts with 30-200 own tokens each (later turns: every rollout's
own history, left-padded, so the attention has a padding mask). Prints seconds per batch, tokens
per second, the speed-up and how many sampled sequences are identical under both paths.

    .venv-runtime/bin/python bench/bench_cpu_sampler.py [--model models/qwen3-tiny-xs] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.backend import sampler  # noqa: E402


def requests(seed: int, shape: str) -> list[sampler.SampleSpec]:
    rng = random.Random(seed)
    head = [rng.randrange(100, 8000) for _ in range(650)]
    if shape == "first turn":
        prompts = [head + [rng.randrange(100, 8000) for _ in range(30)] for _ in range(8)]
        return [sampler.SampleSpec(prompt=prompts[i // 8], max_tokens=56, seed=i) for i in range(64)]
    return [sampler.SampleSpec(prompt=head + [rng.randrange(100, 8000) for _ in range(rng.randrange(30, 200))],
                               max_tokens=56, seed=i) for i in range(64)]


def timed(model, tok, shape: str, repeats: int, new_path: bool) -> tuple[float, list]:
    """Seconds per batch and the results; ``new_path`` False: transformers' DynamicCache and sdpa
    attention, what the sampler used before hf_decode (patched in for this run only)."""
    saved = sampler.GrowingCache, sampler.use_gqa_decode
    if not new_path:
        sampler.GrowingCache, sampler.use_gqa_decode = DynamicCache, lambda m: None
    model.config._attn_implementation = "sdpa"   # generate() switches it to lts_sdpa on the new path
    try:
        with torch.no_grad():
            sampler.generate(model, tok, requests(99, shape), torch.device("cpu"))
            t0 = time.perf_counter()
            outs = [sampler.generate(model, tok, requests(s, shape), torch.device("cpu")) for s in range(repeats)]
        return (time.perf_counter() - t0) / repeats, outs
    finally:
        sampler.GrowingCache, sampler.use_gqa_decode = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "qwen3-tiny-xs"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the backend's default: 1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(args.model)
    print(f"{args.model}, {args.threads} thread(s), 64 rows x 56 new tokens, {args.repeats} batches each")
    for shape in ("first turn", "later turns"):
        t_old, o_old = timed(model, tok, shape, args.repeats, new_path=False)
        t_new, o_new = timed(model, tok, shape, args.repeats, new_path=True)
        pairs = [(a.sequences[0], b.sequences[0]) for x, y in zip(o_old, o_new) for a, b in zip(x, y)]
        same = sum(a[0] == b[0] for a, b in pairs)
        dlp = max((abs(p - q) for a, b in pairs if a[0] == b[0] for p, q in zip(a[1], b[1])), default=0.0)
        ntok = sum(len(b[0]) for _, b in pairs) / args.repeats
        print(f"{shape:12s}: transformers' path {t_old:.2f} s/batch ({ntok / t_old:,.0f} tok/s), "
              f"hf_decode {t_new:.2f} s/batch ({ntok / t_new:,.0f} tok/s): x{t_old / t_new:.2f}; "
              f"identical sequences {same}/{len(pairs)}, max |logprob difference| {dlp:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
