"""Sampling semantics the conformance suite cannot check on the tiny model (its greedy output
repeats one token, so the suite skips its stop-string test): stop strings end generation at the
first match with the matching tokens included; stop token ids; seeds; continuous batching of
many concurrent one-sample requests (the cookbook's pattern)."""

from __future__ import annotations

import tinker
from tinker import types
from transformers import AutoTokenizer


def _greedy(sampler, prompt, n, **kw):
    sp = types.SamplingParams(max_tokens=n, temperature=0.0, **kw)
    return sampler.sample(types.ModelInput.from_ints(prompt), 1, sp).result(timeout=60).sequences[0]


def test_stop_strings_end_at_first_match_and_include_it(backend):
    tok = AutoTokenizer.from_pretrained(str(backend.model_path))
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    sampler = sc.create_sampling_client(base_model=backend.model)
    for prompt in ([1, 2, 3, 4], tok.encode("def add(a, b):\n    return")):
        g = _greedy(sampler, prompt, 12, stop=[]).tokens
        text = tok.decode(g)
        stop = text[2:5] if len(text) >= 5 else text[-2:]
        j = next(j for j in range(1, len(g) + 1) if stop in tok.decode(g[:j]))
        out = _greedy(sampler, prompt, 12, stop=[stop])
        assert out.stop_reason == "stop" and out.tokens == g[:j], (stop, g, out.tokens)
        assert stop in tok.decode(out.tokens) and stop not in tok.decode(out.tokens[:-1])
        ids = _greedy(sampler, prompt, 12, stop=[g[2]])
        first = g.index(g[2])
        assert ids.tokens == g[: first + 1] and ids.stop_reason == "stop"


def test_many_concurrent_one_sample_requests_batch_and_stay_reproducible(backend):
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    sampler = sc.create_sampling_client(base_model=backend.model)
    sp = types.SamplingParams(max_tokens=8, temperature=1.0, stop=[], seed=11)
    prompts = [[5 + i, 6, 7, 8 + i % 3] for i in range(48)]
    futs = [sampler.sample(types.ModelInput.from_ints(p), 1, sp) for p in prompts]
    a = [f.result(timeout=120).sequences[0].tokens for f in futs]
    b = [sampler.sample(types.ModelInput.from_ints(p), 1,
                        sp).result(timeout=60).sequences[0].tokens for p in prompts[:6]]
    assert all(len(t) == 8 for t in a)
    assert a[:6] == b, "a seeded request gives the same tokens whatever it was batched with"
