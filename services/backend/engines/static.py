"""``engine.sampler: static`` (and ``auto`` on CUDA): the static-KV-cache engine of services/backend/gpu.

``StaticSampling.sample(base, weights, specs, fallback)`` loads the weights into the engine (base model, a LoRA
snapshot merged into the engine's bf16 buffers, or a full fine-tuned copy), serves every spec
that fits the static cache, and hands the rest (prompt + max_tokens longer than the cache's
context) to the HF sampler. One engine per base model, created at first use and sized from the
options (``engine.sampler_options`` in engine.yaml):

  max_slots        sequences decoded together (default: the runtime's max_batch_sequences)
  max_context      tokens per slot (default: min(model context, 8192))
  kv_cache_gb      KV-cache budget; slots are reduced to fit it (default: 25 % of free GPU memory,
                   1 GB on CPU)
  prefill_tokens   padded prompt tokens per prefill forward (default 16384)
  cuda_graphs      capture the decode step (default: on CUDA)
  compile          torch.compile the elementwise pieces (default: on CUDA; eager fallback on failure)
  attention        decode attention: auto (default: triton on CUDA, bmm elsewhere) | triton | bmm | sdpa
  fuse_layers      one compiled piece across each layer boundary in decode (default true)
  gemm             decode GEMMs: auto (default: the Triton split-K kernel on CUDA for batches up to 16) |
                   triton | torch (cuBLAS inside the compiled pieces)
  fuse_silu        gemm triton: the gate/up GEMM computes SiLU * up in its epilogue, up to 64 rows (Hopper's
                   TMA kernel above 16) (default true)
  triton_pieces    gemm triton: the split-GEMM layer's q/k norm + rotary and residual add + RMSNorm as single
                   Triton launches (decode_pieces) instead of Inductor's kernels (default true)
  tma_gemm         gemm triton, 17-64 rows on Hopper: the q/k/v, o, down and lm_head GEMMs through TMA too
                   (skinny_gemm.mm_tma, split-K, between the pieces of triton_pieces) instead of cuBLAS inside
                   compiled pieces (default true)
  pdl_gemm         gemm triton, 17-64 rows on Hopper with Triton's Gluon: the layer's TMA GEMMs and pieces launched
                   as programmatic dependents, each GEMM requesting its first weight tiles before it waits for the
                   previous kernel (default true)
  token_choice     auto (default: the two-launch Triton kernel on CUDA for batches without top-k/top-p) |
                   kernel | torch (compiled with the pieces)
  overlap          launch decode step k+1 before recording step k's tokens (default: with cuda_graphs)
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from ..gpu.engine import EngineOptions, StaticEngine
from ..gpu.qwen3 import Qwen3Shape
from ..gpu.weights import engine_weights
from .base import SamplingEngine, SelectedWeights, serve_fitting

log = logging.getLogger("backend.gpu")


def size_options(shape: Qwen3Shape, device: torch.device, dtype: torch.dtype, model_context: int,
                 opts: dict[str, Any] | None, default_slots: int) -> EngineOptions:
    o = dict(opts or {})
    budget_gb = o.pop("kv_cache_gb", None)
    o.setdefault("max_slots", default_slots)
    o.setdefault("max_context", min(int(model_context), 8192))
    eo = EngineOptions.from_dict(o)
    per_tok = shape.kv_bytes_per_token(torch.tensor([], dtype=dtype).element_size())
    if budget_gb is None:
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            budget = 0.25 * free
        else:
            budget = 1 << 30
    else:
        budget = float(budget_gb) * (1 << 30)
    fit = int(budget // (per_tok * eo.max_context))
    if fit < 1:
        raise ValueError(f"sampler KV-cache budget {budget / 2**30:.1f} GB holds no sequence of {eo.max_context} "
                         "tokens "
                         f"({per_tok * eo.max_context / 2**30:.2f} GB each): raise kv_cache_gb or lower max_context")
    if fit < eo.max_slots:
        log.info("static sampler: %d slots of %d tokens fit the %.1f GB KV budget (asked %d)", fit, eo.max_context,
                 budget / 2**30, eo.max_slots)
        eo.max_slots = fit
    return eo


def unsupported(config) -> str | None:
    """Why the static engine cannot serve a model of this HF config (None: it can)."""
    try:
        Qwen3Shape.from_hf_config(config)
    except (ValueError, AttributeError) as e:
        return f"{e} (engine.sampler: vllm serves other architectures fast)"
    return None


class StaticSampling(SamplingEngine):
    name = "static"

    def __init__(self, options: dict[str, Any] | None, default_slots: int):
        super().__init__(options, default_slots)
        self.engines: dict[str, StaticEngine] = {}
        self.unsupported: dict[str, str | None] = {}  # base model -> why the HF sampler serves it (None: served)

    def engine(self, base) -> StaticEngine:
        eng = self.engines.get(base.name)
        if eng is None:
            shape = Qwen3Shape.from_hf_config(base.hf.config)
            eo = size_options(shape, base.device, base.dtype, base.info.max_context, self.options, self.default_slots)
            eng = StaticEngine(shape, base.device, base.dtype, eo)
            log.info("static sampler for %s: %d slots x %d tokens, %.2f GB (weights + KV), graphs %s", base.name,
                     eo.max_slots, eo.max_context, eng.model.memory_bytes() / 2**30, eng.use_graphs)
            self.engines[base.name] = eng
        return eng

    def sample(self, base, weights: SelectedWeights, specs, fallback, poll=None):
        if base.name not in self.unsupported:
            self.unsupported[base.name] = why = unsupported(base.hf.config)
            if why:
                log.warning("static sampler: %s samples with the HF sampler (%s)", base.name, why)
        if self.unsupported[base.name]:
            return fallback(specs)
        eng = self.engine(base)
        eng.load_weights(*engine_weights(base, weights.key, weights.sampler))
        if poll is not None:
            outer = poll

            def poll():  # requests that do not fit the static cache are served by the fallback at once
                out = []
                for spec, cb in outer() or []:
                    if eng.fits(spec):
                        out.append((spec, cb))
                    else:
                        cb(fallback([spec])[0])
                return out

        return serve_fitting(specs, eng.fits, lambda sp: eng.generate(sp, base.tokenizer, poll=poll), fallback)
