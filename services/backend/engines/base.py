"""The sampling-engine interface: what ``Runtime.sample`` calls for one round of requests on one set of weights.

An engine is a ``SamplingEngine`` subclass registered by its ``name`` in ``engines/__init__.py`` ``ENGINES``;
``engine.sampler`` in engine.yaml names the one a runtime uses (``auto``: the static engine on CUDA, the HF
sampler elsewhere). The runtime picks the weights (``SelectedWeights``: the base model, a LoRA snapshot, a
full-weights copy) and hands the engine the round's specs and a fallback: the HF sampler over the same weights,
for the specs the engine does not serve (longer than its context, resumed rows). An engine returns one
``SampleResult`` per spec, in the specs' order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..runtime_api import Poll
from ..sampler import SampleResult, SampleSpec

if TYPE_CHECKING:
    import torch

    from ..models import BaseModel, SamplerWeights

Fallback = Callable[[list[SampleSpec]], list[SampleResult]]


@dataclass
class SelectedWeights:
    """The weights of one sampling round, as the runtime chose them."""

    key: str | None                        # the sampler weights' key; None: the base model
    sampler: SamplerWeights | Any | None   # their SamplerWeights (adapter or module); None: the base model
    module: torch.nn.Module | None = None  # the torch module a forward samples with (the base model, peft with the
                                           # adapter active, a copy with the LoRA folded in, a full-weights copy)
    context: Callable[[], Any] | None = None  # entered around that forward (peft's disable_adapter for the base)


class SamplingEngine(ABC):
    """One way of sampling. ``__init__(options, default_slots)``: ``engine.sampler_options`` as written, and the
    runtime's ``max_batch_sequences``; an engine builds its per-model state (caches, graphs) at first use."""

    name: ClassVar[str]                 # engine.sampler's value that selects it
    yields: ClassVar[bool] = False      # a running chunk stops when a spec's should_yield() says so: the scheduler
                                        # then pauses large requests for small ones (RuntimeAPI.pauses_sampling)
    folds_lora: ClassVar[bool] = False  # it samples through ``SelectedWeights.module``, so a LoRA snapshot may come
                                        # as a plain copy with the adapter folded in (engine.merge_lora_sampling)

    def __init__(self, options: dict[str, Any] | None, default_slots: int) -> None:
        self.options = dict(options or {})
        self.default_slots = default_slots

    @abstractmethod
    def sample(self, base: BaseModel, weights: SelectedWeights, specs: list[SampleSpec], fallback: Fallback,
               poll: Poll | None = None) -> list[SampleResult]:
        """One result per spec (same order). Specs the engine does not serve go to ``fallback`` (one call).
        ``poll`` (continuous batching): requests that arrived meanwhile, each answered through its callback."""


def serve_fitting(specs: list[SampleSpec], fits: Callable[[SampleSpec], bool],
                  serve: Callable[[list[SampleSpec]], list[SampleResult]],
                  fallback: Fallback) -> list[SampleResult]:
    """An engine's round: the specs ``fits`` accepts go to ``serve`` (one call), the rest to ``fallback``
    (the HF sampler); results in the specs' order."""
    fit = [i for i, s in enumerate(specs) if fits(s)]
    results: list[Any] = [None] * len(specs)
    if fit:
        for i, r in zip(fit, serve([specs[i] for i in fit])):
            results[i] = r
    rest = [i for i in range(len(specs)) if results[i] is None]
    if rest:
        for i, r in zip(rest, fallback([specs[i] for i in rest])):
            results[i] = r
    return results
