"""The HF sampler's decode path (services/backend/hf_decode.py: KV buffers with capacity, GQA decode
attention without repeated K/V) gives what transformers' DynamicCache + sdpa give: the same logits
step by step, and the same sampled tokens and logprobs through sampler.generate with a shared
prefix, left padding, rows that stop early (the cache reordered) and seeded streams."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from helpers import TINY_PATH
from services.backend import sampler
from services.backend.hf_decode import ATTENTION, GrowingCache


@pytest.fixture(scope="module")
def hf(tiny_model):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(str(TINY_PATH), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tok(tiny_model):
    return AutoTokenizer.from_pretrained(str(TINY_PATH))


def _decode(hf, attention: str, cache, ids: torch.Tensor, mask: torch.Tensor, steps: int) -> list[torch.Tensor]:
    hf.config._attn_implementation = attention
    out, logits = hf(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True), []
    for step in range(steps):
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        logits.append(out.logits[:, -1])
        if step == 2:   # a row leaves the batch, as sampler.generate drops finished rows
            keep = torch.tensor([0, 2])
            cache.reorder_cache(keep)
            nxt, mask = nxt[keep], mask[keep]
        mask = torch.cat([mask, torch.ones((len(mask), 1), dtype=mask.dtype)], 1)
        out = hf(input_ids=nxt, attention_mask=mask, past_key_values=cache, use_cache=True)
    return logits


def test_decode_logits_match_transformers(hf):
    assert hf.config.num_attention_heads > hf.config.num_key_value_heads   # the model has GQA
    ids = torch.randint(100, 8000, (3, 40))
    mask = torch.ones_like(ids)
    mask[1, :7] = 0   # a left-padded row
    with torch.no_grad():
        ref = _decode(hf, "sdpa", DynamicCache(), ids, mask, 80)   # 80 steps: the buffers grow (64 spare)
        new = _decode(hf, ATTENTION, GrowingCache(), ids, mask, 80)
    hf.config._attn_implementation = "sdpa"
    for a, b in zip(ref, new):
        assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()


def _generate(hf, tok, specs, new_path: bool, monkeypatch):
    hf.config._attn_implementation = "sdpa"
    with monkeypatch.context() as m:
        if not new_path:
            m.setattr(sampler, "GrowingCache", DynamicCache)
            m.setattr(sampler, "use_gqa_decode", lambda module: None)
        with torch.no_grad():
            out = sampler.generate(hf, tok, specs, torch.device("cpu"))
    assert hf.config._attn_implementation == (ATTENTION if new_path else "sdpa")
    hf.config._attn_implementation = "sdpa"
    return out


def test_generate_matches_transformers_path(hf, tok, monkeypatch):
    rng = random.Random(0)
    head = [rng.randrange(100, 8000) for _ in range(60)]   # a shared prefix (>= sampler.MIN_SHARED_PREFIX)
    specs = []
    for i in range(6):
        prompt = head + [rng.randrange(100, 8000) for _ in range(3 + 5 * i)]   # left padding
        specs.append(sampler.SampleSpec(prompt=prompt, num_samples=2, max_tokens=12 + 6 * i, seed=i,
                                        temperature=0.0 if i % 2 else 1.0))
    ref = _generate(hf, tok, specs, False, monkeypatch)
    new = _generate(hf, tok, specs, True, monkeypatch)
    ends = set()
    for r, n in zip(ref, new):
        for (t1, l1, e1), (t2, l2, e2) in zip(r.sequences, n.sequences):
            assert t1 == t2 and e1 == e2
            assert max(abs(a - b) for a, b in zip(l1, l2)) < 1e-4
            ends.add(len(t1))
    assert len(ends) > 3   # rows stopped at different steps: the cache was reordered several times


def test_prompt_logprobs_are_chunked_and_exact(hf, tok, monkeypatch):
    """Prompt logprobs and top-k prompt logprobs (compute_logprobs, a KL reference) through sampler.generate,
    prompts of different lengths in one wave: the same values as log_softmax over the model's full logits,
    while lm_head never sees more positions at once than one chunk (issue 37: the full [rows, L, vocab] logits of
    an 11k-token prompt are 6.7 GB). Planted: the whole prompt through lm_head at once -> the chunk check fails."""
    monkeypatch.setitem(sampler.PROMPT_LOGITS_CHUNK_BYTES, "cpu", 16 * 4 * hf.config.vocab_size)   # 16 positions
    assert sampler._logits_chunk(hf.config.vocab_size, torch.device("cpu")) == 16
    seen: list[int] = []
    hook = hf.lm_head.register_forward_hook(lambda m, a, o: seen.append(a[0].reshape(-1, a[0].shape[-1]).shape[0]))
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(100, 8000, (n,), generator=g).tolist() for n in (70, 45)]
    specs = [sampler.SampleSpec(prompt=p, max_tokens=1, prompt_logprobs=True, topk_prompt_logprobs=3, seed=1)
             for p in prompts]
    try:
        with torch.no_grad():
            res = sampler.generate(hf, tok, specs, torch.device("cpu"))
    finally:
        hook.remove()
    assert seen and max(seen) <= 16, seen
    for p, r in zip(prompts, res):
        with torch.no_grad():
            lsm = torch.log_softmax(hf(input_ids=torch.tensor([p])).logits[0].float(), -1)
        want = lsm[:-1].gather(-1, torch.tensor(p[1:])[:, None])[:, 0]
        assert torch.isnan(torch.tensor(r.prompt_logprobs[0]))
        assert torch.allclose(torch.tensor(r.prompt_logprobs[1:]), want, atol=1e-4)
        v, t = torch.topk(lsm[:-1], 3, dim=-1)
        tids, tlps = r.topk_prompt
        assert (torch.tensor(tids[1:]) == t).all() and torch.allclose(torch.tensor(tlps[1:]), v, atol=1e-4)


def test_prefill_in_pieces_is_exact_and_bounded(hf, tok, monkeypatch):
    """A wave's left-padded prefill runs in groups of rows and chunks of query positions within
    PREFILL_ATTENTION_BYTES (issue 37: one pass over 16 prompts x 3000 tokens held ~1 GB of attention scores on the
    tiny model): sampled tokens, logprobs and prompt logprobs equal one pass, with a shared prefix and without, and
    no attention call sees more queries x keys x rows than the budget allows. Planted: one pass whatever the budget
    -> the size check fails."""
    rng = random.Random(3)
    head = [rng.randrange(100, 8000) for _ in range(40)]
    prefixed = [sampler.SampleSpec(prompt=head + [rng.randrange(100, 8000) for _ in range(150 + 37 * i)],
                                   num_samples=2, max_tokens=6, seed=i) for i in range(5)]
    scored = [sampler.SampleSpec(prompt=[rng.randrange(100, 8000) for _ in range(120 + 41 * i)], max_tokens=3,
                                 seed=i, prompt_logprobs=True) for i in range(3)]
    heads = hf.config.num_attention_heads
    budget = 2 * 128 * heads * 400 * 4 * 3          # 2 rows x 128 queries x 400 keys
    sizes: list[int] = []

    def run(pieces: bool, specs):
        monkeypatch.setattr(sampler, "PREFILL_IN_PIECES", pieces)
        monkeypatch.setitem(sampler.PREFILL_ATTENTION_BYTES, "cpu", budget)
        layer = hf.model.layers[0].self_attn
        hook = layer.register_forward_hook(
            lambda m, a, kw, o: sizes.append(kw["hidden_states"].shape[0] * kw["hidden_states"].shape[1]
                                             * kw["past_key_values"].get_seq_length(0)), with_kwargs=True)
        try:
            with torch.no_grad():
                return sampler.generate(hf, tok, specs, torch.device("cpu"))
        finally:
            hook.remove()
            hf.config._attn_implementation = "sdpa"

    for specs in (prefixed, scored):
        ref = run(False, specs)
        sizes.clear()
        new = run(True, specs)
        prefill = [s for s in sizes if s > 64 * 400]        # decode steps: one query per row
        assert prefill and max(prefill) <= budget // (heads * 4 * 3), (max(sizes), budget // (heads * 12))
        for r, n in zip(ref, new):
            for (t1, l1, _), (t2, l2, _) in zip(r.sequences, n.sequences):
                assert t1 == t2 and max(abs(a - b) for a, b in zip(l1, l2)) < 1e-4
            if r.prompt_logprobs is not None:
                assert torch.allclose(torch.tensor(r.prompt_logprobs[1:]), torch.tensor(n.prompt_logprobs[1:]),
                                      atol=1e-4)
