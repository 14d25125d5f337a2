"""A float32 residual stream for a half-precision HF model (issue 41 item 3): opt-in with ``LTS_RESIDUAL_F32=1``
(which implies the float32 unembedding of ``unembed.py``), on the trainer's side; the static engine computes the
same (``gpu/qwen3.py`` ``f32_residual``).

In a bf16 model every layer rounds the residual stream to bf16 after each add (2^-9 relative), and the trainer (one
prefill over the whole sequence) and the sampler (one token at a time from a KV cache) round at different places,
because their GEMMs have different shapes and accumulation orders: their hidden states drift apart by a few bf16
ulps per layer, which is the 0.03-0.04 nats of sampler/trainer logprob gap left after float32 logits
(docs/performance.md). Here the weights stay bf16 and every GEMM still reads bf16 operands on the tensor cores,
but it *writes float32*; the residual adds, the RMSNorms (HF's: float32 in, float32 out for a float32 input), the
q/k norms, the rotary and SiLU * up stay float32, and values are rounded to bf16 only where a GEMM or the
attention reads them (and for the KV cache). Two sides whose float32 sums differ in the last bits then round to
the same bf16 input almost always, so the gap shrinks to what the attention kernels differ by.

``apply(model)``: every ``nn.Linear`` of the decoder (not the lm_head, which ``unembed.head_logits`` serves) becomes
``F32OutLinear`` (a class swap: no per-instance methods, so copies and peft's LoRA wrappers keep it), the lm_head
``RoundInLinear`` (bf16 in, as before: for callers of the whole HF model); the
attention reads q, k, v in the model dtype (``hf_decode.ATTENTION_BF16_IN``). Costs: the activations between
layers are float32 (twice the bytes of the residual stream in training), the GEMMs are the same bf16 GEMMs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import unembed
from .hf_decode import ATTENTION_BF16_IN, ATTENTION_F32

HALF = unembed.HALF


class F32OutLinear(nn.Linear):
    """An ``nn.Linear`` of a half-precision model whose output is float32: its input rounded to the weight's dtype
    (a float32 hidden state: the one rounding), the product accumulated and written in float32 (no autocast)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if w.dtype not in HALF:
            return F.linear(x, w, self.bias)
        with torch.autocast(x.device.type, enabled=False):
            y = unembed.matmul_f32(x.to(w.dtype), w)
        return y if self.bias is None else y + self.bias.float()


class RoundInLinear(nn.Linear):
    """The lm_head of a float32 stream where something calls the HF model as a whole (``unembed.head_logits``
    serves the backend's own logits): its input rounded to the weight's dtype, as the GEMM reads it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(self.weight.dtype), self.weight, self.bias)


def apply(model: nn.Module) -> bool:
    """Give a half-precision HF causal LM (before peft wraps it) a float32 residual stream; True if changed. A
    float32 model, or ``unembed.RESIDUAL_F32`` off, is left as it is."""
    if not unembed.RESIDUAL_F32:
        return False
    decoder = getattr(model, "model", None)
    params = next(model.parameters(), None)
    if decoder is None or params is None or params.dtype not in HALF:
        return False
    n = 0
    for m in decoder.modules():
        if type(m) is nn.Linear:
            m.__class__ = F32OutLinear
            n += 1
    head = getattr(model, "lm_head", None)
    if type(head) is nn.Linear:
        head.__class__ = RoundInLinear
    cfg = getattr(model, "config", None)
    if cfg is not None:
        cfg._attn_implementation = ATTENTION_F32 if unembed.ATTENTION_F32 else ATTENTION_BF16_IN
    model._lts_residual_f32 = n > 0
    return n > 0


def enabled(model: nn.Module) -> bool:
    """Whether ``apply`` gave this model a float32 residual stream (its activations are float32)."""
    return bool(getattr(model, "_lts_residual_f32", False))
