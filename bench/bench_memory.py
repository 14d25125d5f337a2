"""Peak RSS of one forward_backward micro-batch on CPU, per training token, before and after
issue 37's chunked logprobs (same run, each configuration in a fresh process):

    .venv-runtime/bin/python bench/bench_memory.py [--tokens 2048,8192] [--vocab 151669] [--rows 4]
    .venv-runtime/bin/python bench/bench_memory.py --quickstart ppo,ppo-kl,grpo [--num-steps 1]

``--quickstart``: runs the published quick start's lines (``bash run.sh MODE --learning-rate 1e-6 --lora-rank 0
--max-train-transitions 1``, on the configured model: the tiny default after ``configure.py``) one after the
other, each starting its own backend, and prints the backend's peak RSS (VmHWM, read from /proc while it runs;
its PID from ``<state_dir>/backend.lock``) against the 2 GB target.

A Qwen3-shaped model with the tiny default's body (2 layers, hidden 128) and a full Qwen3 vocabulary
(random init; the vocabulary is what the logits scale with). Each configuration runs
``logprobs.microbatch_loss`` + backward on ``rows`` sequences of tokens/rows tokens with the PPO loss:
  dense   every position has an advantage (the dense route: all positions need gradient)
  active  a prompt of half the tokens has weight 0 (the active-positions route)
  prompt  no training: prompt logprobs of one ``tokens``-long sequence through the sampler (compute_logprobs, a
          KL reference), before = the model's full logits (sampler.CHUNKED_PROMPT_LOGPROBS False)
  prefill no training: sampling 4 x ``rows`` prompts of up to ``tokens`` tokens each (different lengths, so
          left-padded) in one wave; before = one prefill pass (sampler.PREFILL_IN_PIECES False), after = groups of
          rows x chunks of queries within sampler.PREFILL_ATTENTION_BYTES. KB/token is per prompt token here
``before`` is the previous CPU path (``model(ids).logits`` over the whole micro-batch; logprobs.CHUNKED =
False), ``after`` the chunked one (lm_head + log-softmax per chunk, recomputed in backward). Printed: peak
RSS above the process's RSS after building the model, in MB and in KB per training token, and the time.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child(tokens: int, vocab: int, rows: int, route: str, chunked: bool) -> dict:
    import numpy as np  # noqa: PLC0415
    import torch  # noqa: PLC0415
    from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: PLC0415

    from services.backend import logprobs, losses, sampler  # noqa: PLC0415
    from services.backend.codec import Datum  # noqa: PLC0415

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)
    model = Qwen3ForCausalLM(cfg).float()
    logprobs.CHUNKED = chunked
    if route in ("prompt", "prefill"):
        rng = np.random.default_rng(0)
        if route == "prompt":   # compute_logprobs / a KL reference: prompt logprobs of one sequence through the sampler
            sampler.CHUNKED_PROMPT_LOGPROBS = chunked
            specs = [sampler.SampleSpec(prompt=rng.integers(0, vocab, tokens).tolist(), max_tokens=1,
                                        prompt_logprobs=True, seed=0)]
        else:   # sampling: 4 x rows prompts of up to `tokens` tokens (different lengths: left-padded) in one wave
            sampler.PREFILL_IN_PIECES = chunked
            specs = [sampler.SampleSpec(prompt=rng.integers(0, vocab, tokens - 29 * i).tolist(), max_tokens=4,
                                        num_samples=2, seed=i) for i in range(4 * rows)]
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t = time.perf_counter()
        with torch.no_grad():
            sampler.generate(model, None, specs, torch.device("cpu"))
        dt = time.perf_counter() - t
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"tokens": tokens, "route": route, "path": "after" if chunked else "before", "base_mb": round(rss0),
                "peak_extra_mb": round(peak - rss0),
                "kb_per_token": round((peak - rss0) * 1024 / sum(len(x.prompt) for x in specs), 1),
                "seconds": round(dt, 2)}
    n = tokens // rows
    rng = np.random.default_rng(0)
    batch = []
    for _ in range(rows):
        adv = rng.standard_normal(n).astype(np.float32)
        w = np.ones(n, dtype=np.float32)
        if route == "active":
            w[: n // 2] = 0
        batch.append(Datum(tokens=rng.integers(0, vocab, n), inputs={
            "target_tokens": rng.integers(0, vocab, n), "logprobs": np.full(n, -3.0, np.float32),
            "advantages": adv, "weights": w}))
    fn, lcfg = losses.loss("ppo", None)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t = time.perf_counter()
    loss, _, _ = logprobs.microbatch_loss(model, batch, "ppo", fn, lcfg, torch.device("cpu"), False)
    loss.backward()
    dt = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"tokens": tokens, "route": route, "path": "after" if chunked else "before", "base_mb": round(rss0),
            "peak_extra_mb": round(peak - rss0), "kb_per_token": round((peak - rss0) * 1024 / tokens, 1),
            "seconds": round(dt, 2)}


def quickstart(modes: list[str], num_steps: int) -> None:
    import yaml  # noqa: PLC0415

    rt = yaml.safe_load((REPO / "config" / "runtime.yaml").read_text())
    state = Path(rt.get("backend", {}).get("state_dir", "state/backend"))
    lock = (state if state.is_absolute() else REPO / state) / "backend.lock"
    for mode in modes:
        cmd = ["bash", "run.sh", mode, "--learning-rate", "1e-6", "--lora-rank", "0", "--max-train-transitions", "1",
               "--num-steps", str(num_steps)]
        t = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        hwm_kb, pid = 0, None
        while proc.poll() is None:
            try:
                pid = int(json.loads(lock.read_text() or "{}").get("pid") or 0) or pid
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        hwm_kb = max(hwm_kb, int(line.split()[1]))
            except (OSError, ValueError, TypeError):
                pass
            time.sleep(0.5)
        gb = hwm_kb / 2**20
        print(f"{' '.join(cmd[2:])}: exit {proc.returncode} in {time.monotonic() - t:.0f}s, backend (PID {pid}) "
              f"peak RSS {gb:.2f} GB ({'<=' if gb <= 2 else '>'} 2 GB target)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="2048,8192", help="training tokens per micro-batch (comma-separated)")
    ap.add_argument("--vocab", type=int, default=151_669)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--routes", default="dense,active,prompt,prefill")
    ap.add_argument("--max-before-tokens", type=int, default=4096,
                    help="skip the 'before' path above this many tokens (it needs ~12 B x vocab per token)")
    ap.add_argument("--quickstart", default=None, help="run.sh modes to run (comma-separated), e.g. ppo,ppo-kl,grpo")
    ap.add_argument("--num-steps", type=int, default=1)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quickstart:
        quickstart(args.quickstart.split(","), args.num_steps)
        return
    if args.child:
        print(json.dumps(child(**json.loads(args.child))))
        return
    print(f"{'tokens':>7} {'route':>6} {'path':>6} {'peak extra MB':>14} {'KB/token':>9} {'seconds':>8}")
    for tokens in map(int, args.tokens.split(",")):
        for route in args.routes.split(","):
            for chunked in (False, True):
                if not chunked and tokens > args.max_before_tokens:
                    need = round(tokens * args.vocab * 12 / 2**30)
                    print(f"{tokens:>7} {route:>6} {'before':>6}  (skipped: would need ~{need} GB)")
                    continue
                spec = dict(tokens=tokens, vocab=args.vocab, rows=args.rows, route=route, chunked=chunked)
                r = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], cwd=REPO,
                                   capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
                                                                        "PATH": "/usr/bin:/bin"})
                if r.returncode != 0:
                    print(r.stderr[-2000:])
                    continue
                x = json.loads(r.stdout.strip().splitlines()[-1])
                print(f"{tokens:>7} {route:>6} {x['path']:>6} {x['peak_extra_mb']:>14} {x['kb_per_token']:>9} "
                      f"{x['seconds']:>8}", flush=True)


if __name__ == "__main__":
    main()
