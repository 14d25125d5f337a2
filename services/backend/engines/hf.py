"""``engine.sampler: hf`` (and ``auto`` off CUDA): the HF sampler, services/backend/sampler.py.

Batched DynamicCache decoding through the runtime's own torch module (any architecture transformers loads, with
peft adapters), per-row parameters, stop strings, prompt logprobs, shared-prefix prefill; a running chunk yields to
newly arrived small requests. It is also every other engine's fallback (``Runtime.sample``).
"""

from __future__ import annotations

from typing import Any

import torch

from .. import sampler
from ..sampler import SampleResult, SampleSpec
from .base import Fallback, SamplingEngine, SelectedWeights


class HFSampling(SamplingEngine):
    name = "hf"
    yields = True
    folds_lora = True

    def sample(self, base: Any, weights: SelectedWeights, specs: list[SampleSpec], fallback: Fallback | None,
               poll: Any = None) -> list[SampleResult]:
        """Every spec, in waves of at most ``default_slots`` sequences (``fallback`` and ``poll`` unused)."""
        with torch.no_grad():
            if weights.context is not None:
                with weights.context():
                    return sampler.generate(weights.module, base.tokenizer, specs, base.device, self.default_slots)
            return sampler.generate(weights.module, base.tokenizer, specs, base.device, self.default_slots)
