"""Per-token logprobs for training with memory bounded independently of the vocabulary.

The plain route (``model(ids).logits`` then float32 log-softmax) holds the whole ``[B, T, V]``
logits in bf16 plus, under autograd, every float32 chunk that ``logsumexp`` saves for backward:
with V = 151936 and 16k tokens that is ~5 GB of bf16 logits and ~10 GB of float32 copies, and
as much again for their gradients. Here the model runs up to its final norm, and ``lm_head`` +
float32 log-softmax + gather run per chunk of tokens under activation checkpointing: only the
chunk's hidden states are kept, the chunk's logits are recomputed in backward. Peak extra memory
is a few ``[chunk, V]`` float32 buffers. The math is the trainer's (bf16 logits from ``lm_head``,
then float32 log-softmax); the result is identical to ``runtime._gather_logprobs``.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch.utils.checkpoint import checkpoint

from ..unembed import head_logits

# peft keeps LoRA adapters in float32 and casts every adapted layer's input to float32, so on a bf16
# model each LoRA branch runs float32 GEMMs (no tensor cores) plus casts and float32 adds of the full
# layer output (the [tokens, 151936] lm_head output too): 55 % of a 0.6B LoRA training step's GPU time
# (docs/performance.md). ``bf16_lora`` runs the branches in bf16 instead (the adapters stay float32
# master weights with float32 gradients). The GPU training bench sets this False for its baseline.
LORA_BF16 = True


@contextlib.contextmanager
def bf16_lora(module: torch.nn.Module) -> Iterator[None]:
    """Around a CUDA forward (+ backward) of a peft model over a bf16 base: LoRA branches in bf16
    (autocast, peft's float32 input casts off). Elsewhere nothing changes."""
    base = _hf_causal_lm(module)
    on = (LORA_BF16 and hasattr(module, "peft_config") and getattr(base, "dtype", None) == torch.bfloat16
          and next(base.parameters()).is_cuda)
    if not on:
        yield
        return
    from peft.helpers import disable_input_dtype_casting  # noqa: PLC0415  (peft: not in the control venv)

    with torch.autocast("cuda", dtype=torch.bfloat16), disable_input_dtype_casting(module):
        yield


def _hf_causal_lm(module: torch.nn.Module) -> torch.nn.Module:
    return module.get_base_model() if hasattr(module, "get_base_model") else module


def chunk_logprobs(lm_head: torch.nn.Module, h: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    logits = head_logits(lm_head, h)   # float32 out of the GEMM (services/backend/unembed.py)
    return logits.gather(-1, tgt[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)


def fused_token_logprobs(module: torch.nn.Module, ids: torch.Tensor, tgt: torch.Tensor,
                         chunk_tokens: int = 2048) -> torch.Tensor:
    """ids, tgt: [B, T] -> float32 [B, T] log p(tgt | prefix)."""
    hf = _hf_causal_lm(module)
    hidden = hf.model(input_ids=ids, use_cache=False).last_hidden_state
    B, T, H = hidden.shape
    h = hidden.reshape(B * T, H)
    t = tgt.reshape(B * T)
    head = hf.lm_head
    outs = []
    grad = torch.is_grad_enabled()
    for s in range(0, B * T, chunk_tokens):
        hs, ts = h[s : s + chunk_tokens], t[s : s + chunk_tokens]
        if grad:
            outs.append(checkpoint(chunk_logprobs, head, hs, ts, use_reentrant=False))
        else:
            outs.append(chunk_logprobs(head, hs, ts))
    return torch.cat(outs).view(B, T)
