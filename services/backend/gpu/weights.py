"""Weights for the static engine, read from an HF Qwen3 or Llama causal LM (tied embeddings: lm_head is
the embedding's weight, as HF ties them).

The module may carry peft LoRA layers (peft injects them into the HF model in place, so the
runtime's ``BaseModel.hf`` is the structure to walk either way). With ``adapter`` given, each
LoRA-wrapped linear yields ``W + scale * B @ A`` (peft's ``get_delta_weight``) computed in
float32 and rounded once to the engine's dtype; without it, the base weight (adapters ignored).
"""

from __future__ import annotations

import torch


def engine_weights(base, weights_key: str | None, sw) -> tuple[tuple, torch.nn.Module, str | None]:
    """(weights id, module, LoRA adapter) a sampling engine copies for ``weights_key``: the base model, a
    full fine-tuned snapshot's own module, or the base model with the snapshot's adapter merged in."""
    wid = ("base",) if weights_key is None else ("snapshot", weights_key)
    if sw is None:
        return wid, base.hf, None
    if sw.module is not None:
        return wid, sw.module, None
    return wid, base.hf, sw.adapter


def linear_weight(mod: torch.nn.Module, adapter: str | None) -> torch.Tensor:
    base = getattr(mod, "base_layer", None)
    if base is None:
        return mod.weight
    w = base.weight
    lora_a = getattr(mod, "lora_A", None)
    if adapter is not None and lora_a is not None and adapter in lora_a:
        delta = mod.get_delta_weight(adapter)
        return (w.float() + delta.float()).to(w.dtype)
    return w


class Qwen3Parts:
    """Accessors the engine copies from (one layer at a time, so merges stay small)."""

    def __init__(self, model: torch.nn.Module, adapter: str | None = None):
        self.model, self.adapter = model, adapter
        self.inner = model.model
        emb = self.inner.embed_tokens
        self._embed = getattr(emb, "base_layer", emb).weight

    def embed(self) -> torch.Tensor:
        return self._embed

    def lm_head(self) -> torch.Tensor:
        return linear_weight(self.model.lm_head, self.adapter)

    def norm(self) -> torch.Tensor:
        return self.inner.norm.weight

    def layer(self, l: int):
        layer = self.inner.layers[l]
        a, m, W = layer.self_attn, layer.mlp, lambda mod: linear_weight(mod, self.adapter)
        return (W(a.q_proj), W(a.k_proj), W(a.v_proj), W(a.o_proj), W(m.gate_proj), W(m.up_proj), W(m.down_proj),
                layer.input_layernorm.weight, layer.post_attention_layernorm.weight, _weight(a, "q_norm"),
                _weight(a, "k_norm"))


def _weight(mod: torch.nn.Module, name: str) -> torch.Tensor | None:
    """A Qwen3 attention's q_norm / k_norm weight; None for a Llama's (it has none)."""
    sub = getattr(mod, name, None)
    return None if sub is None else sub.weight
