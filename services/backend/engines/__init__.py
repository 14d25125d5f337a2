"""Sampling engines: one module per engine over ``base.SamplingEngine``, and the registry ``engine.sampler`` reads.

* ``hf.py``      the HF sampler (services/backend/sampler.py): any architecture, on CPU and GPU; every engine's fallback
* ``static.py``  the static-KV-cache CUDA-graph engine (its kernels and decode loop: services/backend/gpu/)
* ``vllm.py``    vLLM's offline engine in this process (requirements/vllm.txt; imported only when chosen)

Adding an engine = one module with a ``SamplingEngine`` subclass + its entry in ``ENGINES`` (docs/backend.md
"Sampling engines").
"""

from __future__ import annotations

from typing import Any

from .base import Fallback, SamplingEngine, SelectedWeights, serve_fitting
from .hf import HFSampling
from .static import StaticSampling
from .vllm import VllmSampling

ENGINES: dict[str, type[SamplingEngine]] = {e.name: e for e in (StaticSampling, HFSampling, VllmSampling)}

__all__ = ["ENGINES", "Fallback", "HFSampling", "SamplingEngine", "SelectedWeights", "StaticSampling",
           "VllmSampling", "engine_name", "make_engine", "serve_fitting"]


def engine_name(mode: str | None, device: str) -> str:
    """The registered engine ``engine.sampler`` names (any case); ``auto`` (or unset): the static engine on CUDA,
    the HF sampler elsewhere. ValueError for a name that is not registered."""
    name = (mode or "auto").lower()
    if name == "auto":
        return "static" if str(device).startswith("cuda") else "hf"
    if name not in ENGINES:
        known = ["auto", *ENGINES]
        raise ValueError(f"engine.sampler must be {', '.join(known[:-1])} or {known[-1]}, got {name!r}")
    return name


def make_engine(mode: str | None, device: str, options: dict[str, Any] | None, default_slots: int) -> SamplingEngine:
    """The runtime's sampling engine for ``engine.sampler`` (``mode``) and ``engine.sampler_options``."""
    return ENGINES[engine_name(mode, device)](options, default_slots)
