"""forward_backward of one GRPO-shaped batch on CPU, before and after sharing each group's prompt (issue 33: the
quickstart's training half of a step). The batch: G prompts (a shared head, the system prompt, plus each task's own
part) x K sampled completions of 15-45 tokens, the importance-sampling loss with an advantage per rollout, LoRA r16
on the embedded tiny model, micro-batches of max_tokens_per_microbatch (8192). ``before``: rows ordered longest
first and only the prefix that every row of a micro-batch shares computed once (the previous path); ``after``: a
GRPO group's rows kept together and their prompt computed once (logprobs.prefix_clusters). Same run, each in a fresh
process, 1 thread:

    .venv-runtime/bin/python bench/bench_train_prefix.py [--groups 8] [--group-size 8] [--prompt 280] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child(mode: str, groups: int, group_size: int, prompt: int, repeats: int) -> dict:
    import numpy as np  # noqa: PLC0415
    import torch  # noqa: PLC0415
    from peft import LoraConfig, get_peft_model  # noqa: PLC0415
    from transformers import AutoModelForCausalLM  # noqa: PLC0415

    from services.backend import logprobs as R  # noqa: PLC0415
    from services.backend import losses  # noqa: PLC0415
    from services.backend.codec import Datum  # noqa: PLC0415

    torch.set_num_threads(1)
    m = get_peft_model(AutoModelForCausalLM.from_pretrained(str(REPO / "models" / "qwen3-tiny-xs")),
                       LoraConfig(r=16, target_modules="all-linear"))
    rng = np.random.default_rng(0)
    head = rng.integers(0, 8000, 100)
    data = []
    for _ in range(groups):
        p = np.concatenate([head, rng.integers(0, 8000, prompt - 100)])
        for _ in range(group_size):
            seq = np.concatenate([p, rng.integers(0, 8000, int(rng.integers(15, 45)))])
            adv = np.zeros(len(seq) - 1, np.float32)
            adv[len(p) - 1:] = rng.standard_normal()
            data.append(Datum(seq[:-1], {"target_tokens": seq[1:], "advantages": adv,
                                         "logprobs": np.full(len(seq) - 1, -3.0, np.float32)}))
    if mode == "before":
        def whole_batch_prefix(rows: list[list[int]], k: int) -> list[tuple[list[int], int]]:
            n, p = min(len(r) for r in rows) - 1, 0
            while p < n and all(r[p] == rows[0][p] for r in rows):
                p += 1
            return [(list(range(len(rows))), p if p >= k and len(rows) > 1 else 0)]
        R.prefix_clusters = whole_batch_prefix
        order = sorted(range(len(data)), key=lambda i: -len(data[i].tokens))
    else:
        order = R.shared_prefix_order([d.tokens.tolist() for d in data])
    fn, cfg = losses.loss("importance_sampling", None)
    mbs = R.microbatches(order, [len(d.tokens) for d in data], 8192)
    times = []
    for _ in range(repeats + 1):   # the first is a warm-up
        t = time.perf_counter()
        for mb in mbs:
            loss, _, _ = R.microbatch_loss(m, [data[i] for i in mb], "importance_sampling", fn, cfg,
                                           torch.device("cpu"), False)
            loss.backward()
        times.append(time.perf_counter() - t)
    return {"mode": mode, "rows": len(data), "tokens": sum(len(d.tokens) for d in data), "microbatches": len(mbs),
            "seconds": round(min(times[1:]), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=280, help="prompt tokens (100 of them shared by every group)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(**json.loads(args.child))))
        return
    out = {}
    for mode in ("before", "after"):
        spec = dict(mode=mode, groups=args.groups, group_size=args.group_size, prompt=args.prompt,
                    repeats=args.repeats)
        r = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], cwd=REPO, capture_output=True,
                           text=True, env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
        if r.returncode != 0:
            raise SystemExit(r.stderr[-3000:])
        out[mode] = json.loads(r.stdout.strip().splitlines()[-1])
        x = out[mode]
        print(f"{mode:>6}: {x['rows']} rows, {x['tokens']} tokens, {x['microbatches']} micro-batches, "
              f"forward_backward {x['seconds']} s", flush=True)
    print(f"speed-up x{out['before']['seconds'] / out['after']['seconds']:.2f}")


if __name__ == "__main__":
    main()
