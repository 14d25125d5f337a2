"""Fused training kernels for the HF models the trainer runs: Liger Kernel's Triton RMSNorm, rotary and
SwiGLU (``liger-kernel``, requirements/gpu.txt, a GPU-only optional install).

HF's eager Qwen3 layers spend ~45 % of a 4B training step's GPU time in unfused elementwise work
(RMSNorm's float32 round trips, rotary, SiLU * mul; docs/performance.md). Liger replaces those modules
in place with one Triton kernel each (forward and backward), numerically the HF ones (RMSNorm in
float32, cast before the weight). The trainer keeps its own chunked lm_head + log-softmax (the loss
functions need per-token logprobs), so Liger's fused linear cross-entropy is not used.

``engine.training_kernels``: ``auto`` (default: Liger on CUDA where it is installed and supports the
architecture), ``liger`` (required: an error if it cannot be applied), ``none``.
"""

from __future__ import annotations

import logging
import types

import torch

log = logging.getLogger("backend.gpu")

_KW = dict(rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=False)


def resolve(mode: str | None, device: str) -> str:
    mode = (mode or "auto").lower()
    if mode not in ("auto", "liger", "none"):
        raise ValueError(f"engine.training_kernels must be auto, liger or none, got {mode!r}")
    if mode == "auto":
        return "liger" if str(device).startswith("cuda") and _liger() is not None else "none"
    return mode


def _liger():
    try:
        from liger_kernel.transformers import monkey_patch  # noqa: PLC0415  (optional GPU install, gpu.txt)
    except ImportError:
        return None
    return monkey_patch


def apply(module: torch.nn.Module, mode: str, strict: bool) -> bool:
    """Patch ``module`` (a transformers causal LM, before peft wraps it) in place; True if patched.
    ``mode`` as returned by ``resolve``; ``strict``: fail (instead of leaving HF's modules) where Liger
    does not cover the architecture."""
    if mode == "none":
        return False
    mp = _liger()
    model_type = getattr(getattr(module, "config", None), "model_type", None)
    if mp is None or model_type not in mp.MODEL_TYPE_TO_APPLY_LIGER_FN:
        why = "liger-kernel is not installed" if mp is None else f"Liger has no kernels for {model_type!r}"
        if strict:
            raise ValueError(f"engine.training_kernels: liger: {why}")
        log.info("training kernels: %s; HF's modules", why)
        return False
    mp._apply_liger_kernel_to_instance(model=module, **_KW)
    n = unbind_instance_methods(module)
    log.info("training kernels: Liger RMSNorm/rotary/SwiGLU applied to a %s model (%d modules)", model_type, n)
    return True


def unbind_instance_methods(module: torch.nn.Module) -> int:
    """Move methods bound to single module objects (``m.__dict__['forward'] = f.__get__(m)``, how Liger
    patches an instance) onto a subclass of the module's class; returns how many modules changed.

    A method bound in the instance's own dict is a reference cycle (module -> bound method -> module),
    so a copy of the model (a full-FT sampler snapshot, ``runtime._frozen_copy``) is not freed when its
    last reference goes but only when the cyclic garbage collector runs: measured on the H200, +5.4 GB
    of MLP weights per 4B full-FT GRPO step (docs/performance.md). As class attributes the same
    functions make no cycle; the behaviour is unchanged."""
    classes: dict[tuple, type] = {}
    n = 0
    for m in module.modules():
        bound = {k: v.__func__ for k, v in vars(m).items() if isinstance(v, types.MethodType) and v.__self__ is m}
        if not bound:
            continue
        key = (type(m), *sorted(bound.items(), key=lambda kv: kv[0]))
        cls = classes.get(key)
        if cls is None:
            cls = classes[key] = type(type(m).__name__, (type(m),), dict(bound))
        for k in bound:
            del m.__dict__[k]
        m.__class__ = cls
        n += 1
    return n
