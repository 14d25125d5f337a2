"""Shared helpers of the GPU benchmarks: Qwen3-shaped random-init models, timing, HBM bandwidth."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from pathlib import Path

import transformers
from transformers import AutoModelForCausalLM, Qwen3Config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from services.backend.gpu.logprobs import fused_token_logprobs  # noqa: E402

# Qwen3-0.6B: tied embeddings (0.60 B params); the "4B-like" shape of docs/gpu-notes (4.41 B params:
# untied lm_head) so that figures compare with the baselines measured there.
SHAPES = {
    "0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                 intermediate_size=3072, tie_word_embeddings=True),
    "4b": dict(hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
               intermediate_size=9728, tie_word_embeddings=False),
}
SHAPES["tiny"] = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                      intermediate_size=384, tie_word_embeddings=True)  # CPU smoke runs of the scripts
VOCAB = 151936
DEV = os.environ.get("BENCH_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
PEAK_BF16 = 989e12          # dense bf16 FLOP/s (datasheet), the MFU denominator
HBM_NOMINAL = 4.8e12        # bytes/s (datasheet)


def qwen3_config(shape: str):
    return Qwen3Config(vocab_size=VOCAB, max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                       attention_bias=False, hidden_act="silu", initializer_range=0.02, use_cache=True,
                       bos_token_id=151643, eos_token_id=151645, pad_token_id=151643, **SHAPES[shape])


def make_model(shape: str, device=None, dtype=torch.bfloat16, seed: int = 0):
    device = device or DEV

    torch.manual_seed(seed)
    with torch.device(device):
        m = AutoModelForCausalLM.from_config(qwen3_config(shape), dtype=dtype)
    return m.eval()


def n_params(model) -> int:
    seen, n = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            n += p.numel()
    return n


def rand_prompts(n: int, length: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 150000, (n, length), generator=g).tolist()


def decode_bound_tok_s(shape, b: int, prompt: int, new: int, bw: float) -> float:
    """Decode tok/s if each step read the weights (less the embedding, whose rows are gathered, not streamed)
    and each of the ``b`` rows' KV (at its mean length) once, at ``bw`` bytes/s."""
    w_bytes = shape.weight_bytes() - shape.vocab * shape.hidden * 2
    return b / ((w_bytes + b * (prompt + new / 2) * shape.kv_bytes_per_token()) / bw)


def logprob_agreement(model, prompts: list[list[int]], res) -> dict:
    """Sampled logprobs (each result's first sequence) against the trainer's for the same tokens."""
    P = len(prompts[0])
    seqs = [(p, r.sequences[0][0], r.sequences[0][1]) for p, r in zip(prompts, res)]
    ids = torch.tensor([p + t[:-1] for p, t, _ in seqs], device=DEV)
    tgt = torch.tensor([p[1:] + t for p, t, _ in seqs], device=DEV)
    with torch.no_grad():
        lp = fused_token_logprobs(model, ids, tgt)[:, P - 1:].float().cpu()
    samp = torch.tensor([l for _, _, l in seqs])
    d = lp - samp
    return dict(batch=len(seqs), tokens=d.numel(), mean_abs=float(d.abs().mean()), max_abs=float(d.abs().max()),
                mse=float((d**2).mean()), mean_logprob=float(samp.mean()))


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, *a, **kw):
    sync()
    t0 = time.perf_counter()
    out = fn(*a, **kw)
    sync()
    return out, time.perf_counter() - t0


def hbm_bandwidth(gb: float = 4.0) -> float:
    """Device-to-device copy, bytes read + written per second (median of 10)."""
    if not torch.cuda.is_available():
        return HBM_NOMINAL
    n = int(gb * 2**30) // 2
    a = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.empty_like(a)
    ts = []
    for _ in range(12):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    del a, b
    ts = sorted(ts[2:])
    return 2 * n * 2 / ts[len(ts) // 2]


def free_cuda():
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


class Results:
    """Append-only JSON lines + a printed table (the device call's tail shows the table)."""

    def __init__(self, path: str | None):
        self.path = path
        self.rows: list[dict] = []

    def add(self, **row) -> None:
        row = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
        self.rows.append(row)
        print("RESULT", json.dumps(row), flush=True)
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps(row) + "\n")


def env_info() -> dict:
    d = {"torch": torch.__version__, "transformers": transformers.__version__}
    if torch.cuda.is_available():
        d["gpu"] = torch.cuda.get_device_name()
    d["host"] = os.uname().nodename
    return d
