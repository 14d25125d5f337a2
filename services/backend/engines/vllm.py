"""``engine.sampler: vllm``: vLLM's offline engine as the runtime's sampler, in the backend's process.

For architectures the static engine does not cover (it is Qwen3-dense only; Llama, Qwen2.5-Coder, MoE
models fall back to HF ``generate`` there), and as a second engine to compare against. One ``vllm.LLM``
per base model, created at first use from the base model's local directory with ``load_format="dummy"``:
its weights always come from the runtime's own modules, pushed through the model's ``load_weights`` (HF
names; vLLM stacks q/k/v and gate/up itself) whenever the sampler weights change, so a snapshot taken
after ``optim_step`` is what vLLM samples from. LoRA snapshots are merged (``W + scale * B @ A``, as the
static engine does) before they are pushed. The prefix cache is reset after every push.

vLLM runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so the push reads the trainer's tensors
directly. Options (``engine.sampler_options``):

  gpu_memory_utilization  fraction of the GPU vLLM may take, weights and KV cache (default 0.3)
  max_context             tokens per sequence, vLLM's max_model_len (default min(model context, 8192))
  max_slots               sequences decoded together, vLLM's max_num_seqs (default the runtime's
                          max_batch_sequences)
  kv_cache_gb             KV-cache size, vLLM's kv_cache_memory_bytes (then gpu_memory_utilization is not
                          used for it); configure.py writes it for GPUs
  any other key           passed to ``vllm.LLM`` as is (enforce_eager, enable_prefix_caching, ...), except the
                          static engine's own options (cuda_graphs, attention, ...), which are left out

What vLLM is not asked for (the request goes to the HF sampler, as with the static engine): prompts plus
max_tokens longer than max_context, and resumed (preempted) rows. Returned logprobs are vLLM's
``raw_logprobs``: log p under the model's own distribution, before temperature and truncation, which is
what the trainer's ``forward`` computes (the same convention as services/backend/sampler.py).

vLLM is not a dependency of the project: it is imported only when this sampler is chosen. Its wheel pins
torch (vllm 0.20-0.26 pin torch 2.11.0); docs/performance.md says what was run and how it was carried.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from typing import Any, Callable, Iterator

import numpy as np
import torch

from ..gpu.engine import EngineOptions
from ..gpu.weights import engine_weights, linear_weight
from ..sampler import SampleResult, SampleSpec
from .base import SamplingEngine, SelectedWeights, serve_fitting

log = logging.getLogger("backend.gpu")

_OWN_OPTIONS = ("gpu_memory_utilization", "max_context", "max_slots", "kv_cache_gb")


def named_weights(module: torch.nn.Module, adapter: str | None) -> Iterator[tuple[str, torch.Tensor]]:
    """The module's parameters under their HF names, LoRA-wrapped layers merged with ``adapter`` (or their
    base weight without it); peft's ``lora_*`` tensors are not yielded. Tied parameters come under each of
    their names: with LoRA, a tied lm_head and embedding differ once merged (vLLM is started untied)."""
    for name, p in module.named_parameters(remove_duplicate=False):
        if ".lora_" in name:
            continue
        if ".base_layer." in name:
            owner, leaf = name.split(".base_layer.", 1)
            if leaf == "weight":
                yield owner + ".weight", linear_weight(module.get_submodule(owner), adapter)
            else:
                yield owner + "." + leaf, p
            continue
        yield name, p


def _seed(spec: SampleSpec) -> int | None:
    if spec.seed is None:
        return None
    # A chunk of a larger request (row_offset > 0) must not repeat the first chunk's rows.
    return (int(spec.seed) * 1_000_003 + spec.row_offset) % (2**63) if spec.row_offset else int(spec.seed)


def sampling_params(spec: SampleSpec, params_cls: Any) -> Any:
    """vLLM ``SamplingParams`` for a spec. The runtime's specs carry every stop token (EOS included, added
    by wire.py), so vLLM's own EOS check is off."""
    kw: dict[str, Any] = dict(n=spec.num_samples, temperature=float(spec.temperature), top_p=float(spec.top_p),
                              max_tokens=int(spec.max_tokens), seed=_seed(spec), logprobs=0, ignore_eos=True,
                              stop_token_ids=sorted(spec.stop_token_ids), stop=list(spec.stop_strings) or None,
                              skip_special_tokens=False, spaces_between_special_tokens=False)
    if spec.top_k and spec.top_k > 0:
        kw["top_k"] = int(spec.top_k)
    if spec.prompt_logprobs or spec.topk_prompt_logprobs:
        kw["prompt_logprobs"] = int(spec.topk_prompt_logprobs or 0)
    return params_cls(**kw)


def _token_logprob(entry: Any, token: int) -> float:
    lp = entry[token]
    return float(getattr(lp, "logprob", lp))


def to_result(spec: SampleSpec, out: Any) -> SampleResult:
    """A vLLM ``RequestOutput`` as the runtime's ``SampleResult``."""
    seqs = []
    for o in sorted(out.outputs, key=lambda o: o.index):
        toks = [int(t) for t in o.token_ids]
        lps = [_token_logprob(d, t) for d, t in zip(o.logprobs or [], toks)]
        if len(lps) != len(toks):
            raise RuntimeError(f"vLLM returned {len(lps)} logprobs for {len(toks)} tokens")
        seqs.append((toks, lps, "stop" if o.finish_reason == "stop" else "length"))
    res = SampleResult(sequences=seqs)
    if spec.prompt_logprobs or spec.topk_prompt_logprobs:
        P = len(spec.prompt)
        per_pos = list(out.prompt_logprobs or [])  # [P], None at position 0
        first_scored = 1 if not spec.prompt_logprobs_last_n else max(1, P - spec.prompt_logprobs_last_n)
        if spec.prompt_logprobs:
            pl = np.full(P, np.nan, dtype=np.float32)
            for j in range(first_scored, min(P, len(per_pos))):
                if per_pos[j] is not None:
                    pl[j] = _token_logprob(per_pos[j], spec.prompt[j])
            res.prompt_logprobs = pl
        if spec.topk_prompt_logprobs:
            k = spec.topk_prompt_logprobs
            tids = np.zeros((P, k), dtype=np.int32)
            tlps = np.full((P, k), -99999.0, dtype=np.float32)
            for j in range(first_scored, min(P, len(per_pos))):
                d = per_pos[j]
                if d is None:
                    continue
                ranked = sorted(((getattr(v, "rank", None) or 10**9, float(getattr(v, "logprob", v)), int(t))
                                 for t, v in d.items()), key=lambda x: (x[0], -x[1]))
                ranked = [r for r in ranked if r[0] <= k] or ranked  # the prompt token itself may rank below k
                for c, (_, lp, t) in enumerate(ranked[:k]):
                    tids[j, c], tlps[j, c] = t, lp
            res.topk_prompt = (tids, tlps)
    return res


class VllmSampling(SamplingEngine):
    """What ``Runtime.sample`` calls when ``engine.sampler`` is ``vllm``."""

    name = "vllm"

    def __init__(self, options: dict[str, Any] | None, default_slots: int, llm_factory: Callable | None = None):
        super().__init__(options, default_slots)
        self.llm_factory = llm_factory  # tests: a stand-in for vllm.LLM
        self.engines: dict[str, Any] = {}
        self.loaded: dict[str, Any] = {}
        self.stats = {"weight_pushes": 0, "weight_push_s": 0.0, "requests": 0, "fallback_requests": 0}
        self._params_cls: Any = None

    def _vllm(self):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the push reads this process's tensors
        if importlib.util.find_spec("flashinfer") is None:  # vLLM's sampler would import it
            os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
        try:
            import vllm  # noqa: PLC0415 (optional: only this sampler needs it)
        except ImportError as e:
            raise RuntimeError("engine.sampler is 'vllm' but vllm cannot be imported "
                               f"({type(e).__name__}: {e}); install a vllm wheel whose torch pin matches "
                               f"this torch {torch.__version__}, or set engine.sampler to auto") from e
        return vllm

    def max_context(self, base) -> int:
        return int(self.options.get("max_context") or min(int(base.info.max_context), 8192))

    def engine(self, base) -> Any:
        llm = self.engines.get(base.name)
        if llm is not None:
            return llm
        static_only = sorted(k for k in self.options
                             if k in EngineOptions.__dataclass_fields__ and k not in _OWN_OPTIONS)
        if static_only:
            log.warning("vllm sampler: ignoring the static engine's options %s", static_only)
        kw = {k: v for k, v in self.options.items() if k not in _OWN_OPTIONS and k not in static_only}
        if self.options.get("kv_cache_gb") is not None:
            kw.setdefault("kv_cache_memory_bytes", int(float(self.options["kv_cache_gb"]) * 2**30))
        kw.update(model=str(base.path), tokenizer=str(base.path), dtype=str(base.dtype).removeprefix("torch."),
                  load_format="dummy", max_model_len=self.max_context(base),
                  max_num_seqs=int(self.options.get("max_slots") or self.default_slots),
                  gpu_memory_utilization=float(self.options.get("gpu_memory_utilization", 0.3)))
        kw.setdefault("seed", 0)
        kw.setdefault("runner", "generate")  # a config without "architectures" would not be taken as a causal LM
        if getattr(base.hf.config, "tie_word_embeddings", False):
            # A LoRA snapshot's merged lm_head differs from its merged embedding: vLLM keeps both.
            kw["hf_overrides"] = {**kw.get("hf_overrides", {}), "tie_word_embeddings": False}
        t0 = time.perf_counter()
        if self.llm_factory is not None:
            llm = self.llm_factory(**kw)
        else:
            vllm = self._vllm()
            self._params_cls = vllm.SamplingParams
            llm = vllm.LLM(**kw)
        log.info("vllm sampler for %s: max_model_len %d, max_num_seqs %d, started in %.1fs", base.name,
                 kw["max_model_len"], kw["max_num_seqs"], time.perf_counter() - t0)
        self.engines[base.name] = llm
        return llm

    def params_cls(self):
        if self._params_cls is None:
            self._params_cls = self._vllm().SamplingParams
        return self._params_cls

    def push(self, base, llm, wid: Any, module: torch.nn.Module, adapter: str | None) -> None:
        """Copy the weights into vLLM's model (when they are not the ones it holds), then drop its prefix cache."""
        if self.loaded.get(base.name) == wid:
            return
        self.loaded.pop(base.name, None)
        t0 = time.perf_counter()
        with torch.no_grad():  # one merged LoRA weight alive at a time, not a second copy of the model
            llm.apply_model(lambda model: model.load_weights(named_weights(module, adapter)))
        llm.reset_prefix_cache()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        self.loaded[base.name] = wid
        self.stats["weight_pushes"] += 1
        self.stats["weight_push_s"] += dt
        log.info("vllm sampler: weights %s pushed%s in %.3fs", wid, " (LoRA merged)" if adapter else "", dt)

    def fits(self, base, spec: SampleSpec) -> bool:
        return (spec.prefix is None and 0 < len(spec.prompt)
                and len(spec.prompt) + spec.max_tokens <= self.max_context(base))

    def sample(self, base, weights: SelectedWeights, specs: list[SampleSpec], fallback, poll=None):
        """``poll`` is not used: requests that arrive while vLLM runs are served by the next round."""
        llm = self.engine(base)
        self.push(base, llm, *engine_weights(base, weights.key, weights.sampler))

        def serve(sp: list[SampleSpec]) -> list[SampleResult]:
            self.stats["requests"] += len(sp)
            cls = self.params_cls()
            outs = llm.generate([{"prompt_token_ids": list(s.prompt)} for s in sp],
                                [sampling_params(s, cls) for s in sp], use_tqdm=False)
            return [to_result(s, o) for s, o in zip(sp, outs)]

        def to_hf(sp: list[SampleSpec]) -> list[SampleResult]:
            self.stats["fallback_requests"] += len(sp)
            return fallback(sp)

        return serve_fitting(specs, lambda s: self.fits(base, s), serve, to_hf)
