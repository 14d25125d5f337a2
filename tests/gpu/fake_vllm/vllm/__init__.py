"""A stand-in for vLLM's offline API, for the CPU contract test of services/backend/engines/vllm.py
(tests/gpu/test_vllm_sampler.py). It is not vLLM and proves nothing about vLLM itself: the real engine is
run on the GPU by bench/bench_gpu_vllm.py and tests/gpu/runtime_static_check.py (docs/performance.md).

What it holds to, as vLLM does: ``load_format="dummy"`` starts from random weights (so a sampler that
never pushes the trainer's weights samples from the wrong model); ``load_weights`` takes HF parameter
names, each once (tied ones may be left out), and refuses unknown names; sampling after a push without
``reset_prefix_cache`` is refused (stale prefix cache); logprobs are the raw model's, one dict per token.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from services.backend.sampler import SampleSpec, generate

__version__ = "0.0-fake"


class SamplingParams:
    FIELDS = ("n", "temperature", "top_p", "top_k", "max_tokens", "seed", "logprobs", "ignore_eos", "stop_token_ids",
              "stop", "skip_special_tokens", "spaces_between_special_tokens", "prompt_logprobs")

    def __init__(self, **kw):
        unknown = set(kw) - set(self.FIELDS)
        if unknown:
            raise TypeError(f"unexpected SamplingParams fields {sorted(unknown)}")
        self.__dict__.update(dict(n=1, temperature=1.0, top_p=1.0, top_k=0, max_tokens=16, seed=None, logprobs=None,
                                  ignore_eos=False, stop_token_ids=[], stop=None, prompt_logprobs=None), **kw)


class _Model:
    def __init__(self, hf):
        self.hf = hf
        self.tied = bool(getattr(hf.config, "tie_word_embeddings", False))
        self.loads = 0

    def load_weights(self, weights):
        own = dict(self.hf.named_parameters())
        seen = set()
        with torch.no_grad():
            for name, t in weights:
                if name not in own:
                    raise KeyError(f"fake vllm: no parameter {name!r}")
                if name in seen:
                    raise KeyError(f"fake vllm: {name!r} loaded twice")
                seen.add(name)
                own[name].copy_(t.to(own[name].dtype))
        missing = set(own) - seen - ({"lm_head.weight"} if self.tied else set())
        if missing:
            raise KeyError(f"fake vllm: weights not loaded: {sorted(missing)[:5]}")
        self.loads += 1
        return seen


class LLM:
    def __init__(self, model: str, tokenizer: str, dtype: str, load_format: str, max_model_len: int,
                 max_num_seqs: int, gpu_memory_utilization: float, seed: int = 0, **kw):
        assert load_format == "dummy", load_format
        cfg = AutoConfig.from_pretrained(model)
        for k, v in kw.pop("hf_overrides", {}).items():
            setattr(cfg, k, v)
        torch.manual_seed(1234)  # not the trainer's weights
        self.model = _Model(AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype)).eval())
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        self.max_model_len, self.max_num_seqs, self.extra = max_model_len, max_num_seqs, kw
        self.stale_cache = False
        self.generated = 0

    def apply_model(self, fn):
        out = fn(self.model)
        self.stale_cache = True
        return [out]

    def reset_prefix_cache(self):
        self.stale_cache = False
        return True

    def generate(self, prompts, params, use_tqdm=True):
        if self.stale_cache:
            raise RuntimeError("fake vllm: weights changed but the prefix cache was not reset")
        specs = []
        for p, sp in zip(prompts, params):
            assert sp.ignore_eos and sp.logprobs == 0, "the runtime's specs carry their stop tokens; logprobs=0"
            ids = list(p["prompt_token_ids"])
            assert len(ids) + sp.max_tokens <= self.max_model_len
            specs.append(SampleSpec(prompt=ids, num_samples=sp.n, max_tokens=sp.max_tokens, temperature=sp.temperature,
                                    top_k=sp.top_k if sp.top_k and sp.top_k > 0 else -1, top_p=sp.top_p, seed=sp.seed,
                                    stop_token_ids=set(sp.stop_token_ids or []), stop_strings=list(sp.stop or []),
                                    prompt_logprobs=sp.prompt_logprobs is not None,
                                    topk_prompt_logprobs=sp.prompt_logprobs or 0))
        with torch.no_grad():
            res = generate(self.model.hf, self.tokenizer, specs, next(self.model.hf.parameters()).device)
        self.generated += len(specs)
        outs = []
        for s, r in zip(specs, res):
            comp = [SimpleNamespace(index=i, token_ids=tuple(t),
                                    logprobs=[{tok: SimpleNamespace(logprob=lp, rank=1)} for tok, lp in zip(t, lps)],
                                    finish_reason="length" if why == "length" else "stop")
                    for i, (t, lps, why) in enumerate(r.sequences)]
            plp = None
            if s.prompt_logprobs:
                plp = [None]
                for j in range(1, len(s.prompt)):
                    d = {}
                    if r.topk_prompt is not None:
                        tids, tlps = r.topk_prompt
                        for c in range(tids.shape[1]):
                            d[int(tids[j, c])] = SimpleNamespace(logprob=float(tlps[j, c]), rank=c + 1)
                    rank = d[s.prompt[j]].rank if s.prompt[j] in d else (1 if r.topk_prompt is None else 10**6)
                    d[s.prompt[j]] = SimpleNamespace(logprob=float(r.prompt_logprobs[j]), rank=rank)
                    plp.append(d)
            outs.append(SimpleNamespace(outputs=comp, prompt_logprobs=plp))
        return outs
