"""Hostile callers of the Tinker backend: one client's huge sample request must not stall
another's small one (fair sampling rounds), bad values get 4xx, and one bad record never breaks
a listing for everyone."""

from __future__ import annotations

import concurrent.futures as cf
import time

import httpx
import tinker
from tinker import types

PROMPT = [5, 6, 7, 8, 9]


def _sampler(backend):
    return tinker.ServiceClient(base_url=backend.url, api_key=backend.key).create_sampling_client(base_model=backend.model)


def test_a_small_sample_request_is_not_stuck_behind_a_large_one(backend):
    big_client, small_client = _sampler(backend), _sampler(backend)
    big_sp = types.SamplingParams(max_tokens=512, temperature=1.0, stop=[], seed=3)
    t0 = time.monotonic()
    big = big_client.sample(types.ModelInput.from_ints(PROMPT), 96, big_sp)   # 96 x 512 tokens: 3 chunks
    time.sleep(0.5)
    t_small = time.monotonic()
    small = small_client.sample(types.ModelInput.from_ints([1, 2, 3]), 1, types.SamplingParams(max_tokens=2, stop=[]))
    small.result(timeout=300)
    small_wait = time.monotonic() - t_small
    small_done = time.monotonic()
    res = big.result(timeout=600)
    big_s = time.monotonic() - t0
    print(f"small request answered in {small_wait:.2f}s while a 96x512 request ran ({big_s:.1f}s in all)")
    assert len(res.sequences) == 96 and all(len(s.tokens) == 512 for s in res.sequences)
    assert small_wait < big_s / 2, (small_wait, big_s)


def test_chunked_seeded_requests_match_unchunked_ones(backend):
    s = _sampler(backend)
    # 40 x 400 tokens fit one round (no chunks); 40 x 500 are answered in chunks of 32 and 8 sequences
    short = s.sample(types.ModelInput.from_ints(PROMPT), 40, types.SamplingParams(max_tokens=400, stop=[], seed=9)).result(timeout=300)
    long = s.sample(types.ModelInput.from_ints(PROMPT), 40, types.SamplingParams(max_tokens=500, stop=[], seed=9)).result(timeout=300)
    assert [x.tokens[:400] for x in long.sequences] == [x.tokens for x in short.sequences]
    assert len({tuple(x.tokens) for x in long.sequences}) == 40   # every row has its own seeded stream
