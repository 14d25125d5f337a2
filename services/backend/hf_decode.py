"""The HF sampler's decode step without its two copies of the whole KV cache per step.

* ``GrowingCache``: transformers' ``DynamicCache`` appends each step's keys/values with
  ``torch.cat``, copying every row's whole cache once per decode step. Its layers here keep
  buffers with spare capacity (a quarter more, at least 64 positions) and write in place.
* ``gqa_sdpa`` (attention implementation ``lts_sdpa``): with a padding mask, transformers'
  ``sdpa`` repeats each K/V head for its query heads (``repeat_kv``: another full copy per layer and
  step). A one-token decode query is regrouped instead: [B, kv_heads, q_per_kv, D] against the
  unrepeated [B, kv_heads, S, D] keys (the same attention, one kernel call). Queries longer than one
  token (prefill, training) go to transformers' own ``sdpa``.

Measured on the embedded tiny model, 64 rows of 56 new tokens after 650 shared + 30-200 own prompt
tokens, 1 CPU thread (bench/bench_cpu_sampler.py): docs/recipes.md "Where a multi-turn step's time goes".
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, Cache, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

ATTENTION = "lts_sdpa"


def gqa_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
             attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
             is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: [B, H, L, D] queries, [B, H_kv, S, D] keys and
    values, a [B, 1, L, S] mask; returns [B, L, H, D]."""
    groups = getattr(module, "num_key_value_groups", 1)
    if query.shape[2] != 1 or groups == 1 or (dropout and module.training):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    B, H, _, D = query.shape
    q = query.view(B, H // groups, groups, D)  # query head h = kv head h // groups (repeat_kv's order)
    out = F.scaled_dot_product_attention(q, key, value, attn_mask=attention_mask, scale=scaling)
    return out.reshape(B, H, 1, D).transpose(1, 2), None


AttentionInterface.register(ATTENTION, gqa_sdpa)
AttentionMaskInterface.register(ATTENTION, sdpa_mask)

# a float32 residual stream's attention (services/backend/residual.py): float32 q, k, v (and cache) rounded to the
# model dtype first, as the static engine's KV cache and attention read them
ATTENTION_BF16_IN = "lts_sdpa_bf16_in"


def bf16_in_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, **kwargs) -> tuple[torch.Tensor, None]:
    dt = module.o_proj.weight.dtype
    return gqa_sdpa(module, query.to(dt), key.to(dt), value.to(dt), attention_mask, **kwargs)


AttentionInterface.register(ATTENTION_BF16_IN, bf16_in_sdpa)
AttentionMaskInterface.register(ATTENTION_BF16_IN, sdpa_mask)

# float32 attention (``unembed.ATTENTION_F32``): q, k, v rounded to the model dtype as above, then the scores,
# the softmax and P @ V in float32 (the static engine's decode kernel with ``p32`` computes the same)
ATTENTION_F32 = "lts_sdpa_f32"


def f32_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
             attention_mask: torch.Tensor | None, **kwargs) -> tuple[torch.Tensor, None]:
    dt = module.o_proj.weight.dtype
    q, k, v = (t.to(dt).float() for t in (query, key, value))
    # autocast off: the trainer's CUDA forward of a LoRA model runs under bf16 autocast (gpu/logprobs.bf16_lora),
    # which would cast these float32 inputs back to bf16 and run bf16 attention (issue 41: a32 measured no better
    # than r32 on the GPU until this)
    with torch.autocast(q.device.type, enabled=False):
        return gqa_sdpa(module, q, k, v, attention_mask, **kwargs)


AttentionInterface.register(ATTENTION_F32, f32_sdpa)
AttentionMaskInterface.register(ATTENTION_F32, sdpa_mask)


def use_gqa_decode(module: torch.nn.Module) -> None:
    """Switch a model that uses transformers' ``sdpa`` to ``gqa_sdpa`` (the same results; shared by
    the trainer's forward, whose multi-token queries take the ``sdpa`` path unchanged)."""
    cfg = getattr(module, "config", None)
    if cfg is not None and getattr(cfg, "_attn_implementation", None) == "sdpa":
        cfg._attn_implementation = ATTENTION


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys/values are views of buffers with spare capacity."""

    keys: torch.Tensor
    values: torch.Tensor

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.length = 0
        self.key_buf: torch.Tensor | None = None
        self.value_buf: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, new, rows = self.length, key_states.shape[-2], key_states.shape[0]
        buf = self.key_buf
        # a new buffer when full, or when the rows changed (sampler.broadcast_cache expands a shared prefix)
        if buf is None or n + new > buf.shape[2] or buf.shape[0] != rows:
            cap = n + new + max(64, (n + new) // 4)
            kb = key_states.new_empty((rows, key_states.shape[1], cap, key_states.shape[3]))
            vb = value_states.new_empty((rows, value_states.shape[1], cap, value_states.shape[3]))
            if n:
                kb[:, :, :n] = self.keys
                vb[:, :, :n] = self.values
            self.key_buf, self.value_buf = kb, vb
        assert self.key_buf is not None and self.value_buf is not None
        self.key_buf[:, :, n:n + new] = key_states
        self.value_buf[:, :, n:n + new] = value_states
        self.length = n + new
        self.keys, self.values = self.key_buf[:, :, :self.length], self.value_buf[:, :, :self.length]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.get_seq_length() > 0 and self.key_buf is not None and self.value_buf is not None:
            if self.key_buf.shape[0] != self.keys.shape[0]:   # broadcast, not yet grown: select from the views
                super().reorder_cache(beam_idx)
                self.key_buf, self.value_buf = self.keys, self.values
                return
            self.key_buf = self.key_buf.index_select(0, beam_idx.to(self.key_buf.device))
            self.value_buf = self.value_buf.index_select(0, beam_idx.to(self.value_buf.device))
            self.keys, self.values = self.key_buf[:, :, :self.length], self.value_buf[:, :, :self.length]


class GrowingCache(DynamicCache):
    """``DynamicCache`` with ``GrowingLayer`` layers (created as the model's layers first write)."""

    def __init__(self) -> None:
        Cache.__init__(self, layer_class_to_replicate=GrowingLayer)
