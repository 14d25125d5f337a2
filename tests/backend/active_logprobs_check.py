"""Run with the runtime venv (needs peft): the trainer's fast logprob path (shared prefix once,
padding skipped, unembedding without autograd except at active positions) against the plain
batched forward, values and LoRA gradients; and the ppo loss's clip count over the sampled
positions only (a prompt's zero logprobs are not clipped tokens). Prints OK. Used by
test_active_logprobs.py."""

from __future__ import annotations

import sys

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from services.backend import logprobs as R
from services.backend import losses
from services.backend.codec import Datum


def batch(prefix: int, rows: int, rng: np.random.Generator):
    head = rng.integers(0, 8000, size=prefix)
    inputs, targets, active = [], [], []
    for b in range(rows):
        seq = np.concatenate([head, rng.integers(0, 8000, size=10 + 7 * b)])  # rows of different lengths: padding
        inputs.append(seq[:-1])
        targets.append(seq[1:].copy())
        a = np.zeros(len(seq) - 1, bool)
        a[-(5 + b):] = True  # a few active (sampled) tokens per row
        active.append(a)
    if prefix:
        targets[1][prefix - 1] = 7  # a target that parts at the last shared position
    return inputs, targets, active


def clustered_batch(rng: np.random.Generator):
    """GRPO-shaped rows: 3 prompts (of 60, 45 and 90 tokens) x 3 sampled completions each, one of them twice (an
    identical row), and one row of its own; a global shared head (the system prompt) before every prompt."""
    head = rng.integers(0, 8000, size=35)
    inputs, targets, active = [], [], []
    for plen in (60, 45, 90):
        prompt = np.concatenate([head, rng.integers(0, 8000, size=plen)])
        comps = [rng.integers(0, 8000, size=n) for n in (12, 5, 20)]
        comps.append(comps[0].copy())   # an identical rollout
        for c in comps:
            seq = np.concatenate([prompt, c])
            inputs.append(seq[:-1])
            targets.append(seq[1:].copy())
            a = np.zeros(len(seq) - 1, bool)
            a[len(prompt) - 1:] = True
            active.append(a)
    seq = rng.integers(0, 8000, size=70)
    inputs.append(seq[:-1])
    targets.append(seq[1:].copy())
    a = np.zeros(69, bool)
    a[-9:] = True
    active.append(a)
    return inputs, targets, active


def grads(m, lps, active) -> dict[str, torch.Tensor]:
    m.zero_grad()
    loss = sum((lp * torch.as_tensor(a, dtype=torch.float32)).sum() for lp, a in zip(lps, active))
    loss.backward()
    return {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


def main(model_dir: str) -> None:
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj", "down_proj", "lm_head"], init_lora_weights=False)
    m = get_peft_model(m, lora)
    rng = np.random.default_rng(0)
    clusters = R.prefix_clusters([x.tolist() for x in clustered_batch(np.random.default_rng(1))[0]], 32)
    assert sorted(len(rows) for rows, _ in clusters) == [1, 4, 4, 4], clusters   # three groups and a loner
    for prefix in (0, 40, "groups"):  # no shared prefix; a 40-token one (>= MIN_SHARED_PREFIX); GRPO groups
        inputs, targets, active = clustered_batch(rng) if prefix == "groups" else batch(prefix, 5, rng)
        fast = R.token_logprobs(m, inputs, targets, torch.device("cpu"), active)   # the active path
        g_fast = grads(m, fast, active)
        lens = [len(x) for x in inputs]
        ids = torch.zeros(len(inputs), max(lens), dtype=torch.long)
        tgt = torch.zeros_like(ids)
        for i, (x, y) in enumerate(zip(inputs, targets)):
            ids[i, : len(x)], tgt[i, : len(y)] = torch.as_tensor(x), torch.as_tensor(y)
        ref_all = R.gather_logprobs(m(input_ids=ids, use_cache=False).logits, tgt)
        ref = [ref_all[i, :n] for i, n in enumerate(lens)]
        g_ref = grads(m, ref, active)
        dv = max((f - r).abs().max().item() for f, r in zip(fast, ref))
        dg = max((g_fast[k] - g_ref[k]).abs().max().item() / (g_ref[k].abs().max().item() + 1e-12) for k in g_ref)
        assert g_fast.keys() == g_ref.keys() and len(g_ref) > 0
        assert dv < 1e-4, f"prefix {prefix}: logprobs differ by {dv}"
        assert dg < 1e-3, f"prefix {prefix}: gradients differ by {dg} (relative)"
        print(f"prefix {prefix}: max |dlogprob| {dv:.2e}, max relative |dgrad| {dg:.2e}")
        clip_count(m, inputs, targets, active, [r.detach().numpy() for r in ref])
    print("OK")


def clip_count(m, inputs, targets, active, lps) -> None:
    """On-policy ppo data as a client sends it (behaviour logprobs and advantages at the sampled
    positions, zeros at the prompt's): nothing is clipped, and the count covers the sampled tokens."""
    data = [Datum(np.asarray(x), {"target_tokens": np.asarray(y), "logprobs": np.where(a, lp, 0.0),
                                  "advantages": a * 1.0}) for x, y, a, lp in zip(inputs, targets, active, lps)]
    fn, cfg = losses.loss("ppo", None)
    _, _, (clipped, counted) = R.microbatch_loss(m, data, "ppo", fn, cfg, torch.device("cpu"), False)
    assert counted == sum(int(a.sum()) for a in active), counted
    assert clipped == 0, f"{clipped} of {counted} on-policy tokens counted as clipped"


if __name__ == "__main__":
    main(sys.argv[1])
