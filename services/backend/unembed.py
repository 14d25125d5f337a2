"""The unembedding (lm_head) in float32 output, for both the trainer's logprobs and the samplers' logits (issue 41
item 3): opt-in with ``LTS_LOGITS_F32=1`` (default off: the bf16 logits).

A bf16 model's logits rounded to bf16 before the log-softmax carry an error of up to half a bf16 ulp of the logit
(2^-9 relative: 0.03 at a logit of 16), a different one on each side wherever the two sides' hidden states differ by
a rounding. Here the GEMM reads the bf16 hidden states and weights as they are and writes float32 (cuBLAS, float32
accumulation either way): no extra weight copy, only the [N, V] output twice as wide.

Measured on one H100 (docs/performance.md, 2026-12-06, bench/gpu_kit.sh): on SmolLM2-135M-Instruct it cuts the
sampler/trainer mean |logprob diff| by about a third (static engine 0.045 -> 0.031 nats, HF sampler 0.039 -> 0.025)
for 5.5 % of the static engine's decode throughput; on the 4B Qwen3 shape it changes nothing (0.031 both) and costs
36 % of decode. The rest of the gap comes from the transformer body (the two sides' different kernels and shapes),
so it is off by default; float32 models are unaffected either way.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

# batch-invariant GEMMs on both sides (invariant_gemm.py: a row's float32 sums do not depend on the batch it is
# in, so the trainer's prefill and the sampler's decode step compute the same bits); on a CUDA device, implies
# float32 attention (issue 41 item 3)
MATCHED_GEMM = os.environ.get("LTS_MATCHED_GEMM", "0") == "1"
# float32 attention on both sides: q, k, v rounded to the model dtype (the KV cache's), then softmax and P @ V in
# float32 (no bf16 rounding of the probabilities); implies the float32 residual stream (issue 41 item 3)
ATTENTION_F32 = os.environ.get("LTS_ATTENTION_F32", "0") == "1" or MATCHED_GEMM
# a float32 residual stream on both sides (services/backend/residual.py; implies float32 logits)
RESIDUAL_F32 = os.environ.get("LTS_RESIDUAL_F32", "0") == "1" or ATTENTION_F32
ENABLED = os.environ.get("LTS_LOGITS_F32", "0") == "1" or RESIDUAL_F32
HALF = (torch.bfloat16, torch.float16)


def mm_f32(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """h [N, H] @ w[V, H]^T -> float32 [N, V], no autograd (half-precision operands read as they are); with
    MATCHED_GEMM on a CUDA device the batch-invariant kernel (invariant_gemm.py)."""
    if torch.is_autocast_enabled(h.device.type):   # the trainer's CUDA LoRA forward (gpu/logprobs.bf16_lora):
        with torch.autocast(h.device.type, enabled=False):   # autocast would round the float32 output to bf16
            return mm_f32(h, w)
    if h.is_cuda:
        if MATCHED_GEMM:
            from . import invariant_gemm  # noqa: PLC0415 - Triton only where the mode is on
            if invariant_gemm.available(h.device):
                return invariant_gemm.mm_f32(h, w)
        return torch.mm(h, w.t(), out_dtype=torch.float32)
    return F.linear(h.float(), w.float())   # a bf16 model on the CPU (rare): exact products, float32 sums


class _LinearF32(torch.autograd.Function):
    """y = h w^T in float32 from half-precision h, w; the backward casts the float32 gradient to their dtype,
    as autocast's bf16 linear followed by ``.float()`` would."""

    @staticmethod
    def forward(ctx, h, w):
        ctx.save_for_backward(h, w)
        return mm_f32(h, w)

    @staticmethod
    def backward(ctx, g):
        h, w = ctx.saved_tensors
        g = g.to(h.dtype)
        gh = g @ w if ctx.needs_input_grad[0] else None
        gw = g.t() @ h if ctx.needs_input_grad[1] else None
        return gh, gw


def matmul_f32(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """h [..., H] @ w [V, H]^T -> float32 [..., V] from half-precision operands, with autograd (the backward in
    their dtype): the unembedding's GEMM, and every decoder GEMM of a float32 residual stream (residual.py)."""
    shape = h.shape
    return _LinearF32.apply(h.reshape(-1, shape[-1]), w).view(*shape[:-1], w.shape[0])


def linear_f32(h: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """float32 logits of ``h`` [..., H] under ``w`` [V, H] (+ ``bias``): half-precision operands are read as they are
    and the output is float32; a float32 model (or LTS_LOGITS_F32=0) takes the plain linear (then ``.float()``)."""
    if RESIDUAL_F32 and h.dtype == torch.float32 and w.dtype in HALF:
        h = h.to(w.dtype)   # a float32 residual stream's hidden states: the GEMM reads them in the model dtype
    half = h.dtype in HALF and w.dtype == h.dtype
    if not (ENABLED and half):
        return F.linear(h, w.to(h.dtype), None if bias is None else bias.to(h.dtype)).float()
    y = matmul_f32(h, w)
    return y if bias is None else y + bias.float()


def head_logits(head: torch.nn.Module, h: torch.Tensor) -> torch.Tensor:
    """float32 logits through an lm_head module (a Linear, or a peft LoRA layer wrapping one: its active adapters'
    low-rank terms added in float32, with their gradients)."""
    base = getattr(head, "base_layer", None)
    if not ENABLED or (base or head).weight.dtype not in HALF:   # a float32 model: the module itself, as before
        return head(h).float()
    if base is None:
        return linear_f32(h.to(head.weight.dtype), head.weight, head.bias)
    y = linear_f32(h.to(base.weight.dtype), base.weight, base.bias)
    if getattr(head, "disable_adapters", False) or getattr(head, "merged", False):
        return y
    for name in getattr(head, "active_adapters", []):
        if name in getattr(head, "lora_A", {}):
            a, b = head.lora_A[name], head.lora_B[name]
            y = y + (b(a(h.to(a.weight.dtype))) * head.scaling[name]).float()
    return y
