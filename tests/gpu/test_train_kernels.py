"""services/backend/gpu/train_kernels.unbind_instance_methods on CPU: Liger patches a model by binding
its forward to each module object (a reference cycle per module), which kept every full-FT sampler
snapshot's MLP weights alive until the cyclic garbage collector ran (+5.4 GB per 4B GRPO step on the
H200, docs/performance.md). Liger itself is GPU-only; the test binds methods the way it does
(``liger_kernel.transformers.monkey_patch._bind_method_to_module``)."""

from __future__ import annotations

import gc
import weakref

import torch
from transformers import AutoModelForCausalLM

from helpers import TINY_PATH
from services.backend.gpu.train_kernels import unbind_instance_methods
from services.backend.models import frozen_copy


def _liger_like_patch(model: torch.nn.Module) -> None:
    def mlp_forward(self, x):  # Liger's SwiGLU forward, in torch
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    for layer in model.model.layers:
        layer.mlp.__dict__["forward"] = mlp_forward.__get__(layer.mlp, type(layer.mlp))


def _copy_freed_without_gc(model: torch.nn.Module) -> bool:
    gc.collect()
    gc.disable()
    try:
        copy = frozen_copy(model)
        refs = [weakref.ref(p) for p in copy.model.layers[0].mlp.parameters()]
        del copy
        return all(r() is None for r in refs)
    finally:
        gc.enable()


def test_unbound_methods_leave_no_cycle_and_same_outputs(tiny_model):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(TINY_PATH), dtype=torch.float32).eval()
    ids = torch.randint(0, 1000, (2, 12))
    with torch.no_grad():
        ref = model(input_ids=ids).logits
    _liger_like_patch(model)
    assert not _copy_freed_without_gc(model)  # the patched model's copies wait for the cyclic collector
    assert unbind_instance_methods(model) == len(model.model.layers)
    assert not any(isinstance(v, type(model.forward)) for m in model.modules() for v in vars(m).values())
    assert len({type(layer.mlp) for layer in model.model.layers}) == 1  # one subclass for all layers
    assert _copy_freed_without_gc(model)
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, ref, atol=1e-5)
        assert torch.allclose(frozen_copy(model)(input_ids=ids).logits, ref, atol=1e-5)
