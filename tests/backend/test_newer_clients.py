"""Acceptance (issue 22): newer cookbook clients work, unserved SDK routes fail fast and clearly.

tinker-cookbook 0.6.1 (which does not install here: it needs the unpublished tml-renderers>=0.4.1) samples
through clients made with ``record_stability_info=True`` and sends datums carrying provenance spans
(``Datum.with_provenance``). These tests replay exactly those SDK 0.38 calls.
"""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest
import tinker
from tinker import types

PROMPT = [8193, 31, 42, 53, 64, 75, 86]


def test_stability_info_sampling_and_provenance_spans_train(backend):
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    tc = sc.create_lora_training_client(base_model=backend.model, rank=4, seed=7)
    sampler = tc.save_weights_and_get_sampling_client(record_stability_info=True)
    res = sampler.sample(types.ModelInput.from_ints(PROMPT), num_samples=2,
                         sampling_params=types.SamplingParams(max_tokens=6, temperature=1.0, seed=3)).result(60)
    assert len(res.sequences) == 2
    datums = []
    for adv, seq in zip((1.0, -1.0), res.sequences):
        assert seq.logprobs and len(seq.logprobs) == len(seq.tokens) and seq.sequence_id
        toks = PROMPT + list(seq.tokens)
        n_in = len(toks) - 1
        d = types.Datum(model_input=types.ModelInput.from_ints(toks[:-1]), loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(np.array(toks[1:], dtype=np.int64)),
            "logprobs": types.TensorData.from_numpy(np.array([0.0] * (len(PROMPT) - 1) + list(seq.logprobs),
                                                             dtype=np.float32)),
            "advantages": types.TensorData.from_numpy(np.array([0.0] * (len(PROMPT) - 1) + [adv] * len(seq.tokens),
                                                               dtype=np.float32))})
        sid = seq.sequence_id
        d = d.with_provenance(
            model_input=[types.PromptProvenanceSpan(sequence_id=sid, offset=0, length=len(PROMPT)),
                         types.SampledProvenanceSpan(sequence_id=sid, offset=0, length=n_in - len(PROMPT))],
            loss_fn_inputs=[types.PromptProvenanceSpan(sequence_id=sid, offset=1, length=len(PROMPT) - 1),
                            types.SampledProvenanceSpan(sequence_id=sid, offset=0, length=len(seq.tokens))])
        datums.append(d)
    out = tc.forward_backward(datums, "importance_sampling").result(60)
    before = [o["logprobs"].to_numpy() for o in out.loss_fn_outputs]
    np.testing.assert_allclose(before[0][len(PROMPT) - 1:], res.sequences[0].logprobs, atol=1e-3)
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result(60)
    after = [o["logprobs"].to_numpy() for o in tc.forward(datums, "importance_sampling").result(60).loss_fn_outputs]
    assert max(np.abs(a - b).max() for a, b in zip(after, before)) > 1e-3, "the step did not move the weights"

    with pytest.raises(tinker.BadRequestError, match="stable_reinforce.*importance_sampling"):
        tc.forward_backward(datums, "stable_reinforce").result(30)


def test_stability_info_raw_request(backend):
    """The JSON body the SDK sends for such a client, replayed without the SDK."""
    h = {"X-API-Key": backend.key}
    with httpx.Client(base_url=backend.url, headers=h, timeout=60) as c:
        sid = c.post("/api/v1/create_session",
                     json={"tags": [], "user_metadata": {}, "sdk_version": "0.38.0"}).json()["session_id"]
        body = {"base_model": backend.model, "num_samples": 1,
                "prompt": {"chunks": [{"tokens": PROMPT, "type": "encoded_text"}]},
                "sampling_params": {"max_tokens": 4, "temperature": 1.0, "seed": 1}, "prompt_logprobs": False,
                "topk_prompt_logprobs": 0, "record_stability_info": True, "type": "sample", "session_id": sid}
        r = c.post("/api/v1/asample", json=body)
        assert r.status_code == 200, r.text
        for _ in range(10):
            f = c.post("/api/v1/retrieve_future", json={"request_id": r.json()["request_id"]})
            if f.status_code != 408:
                break
        assert f.status_code == 200 and f.headers["content-type"].startswith("application/x-protobuf"), f.text[:300]


def test_unserved_sdk_routes_fail_fast_with_a_clear_error(backend):
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    rc = sc.create_rest_client()
    t0 = time.time()
    with pytest.raises(tinker.BadRequestError, match="copy_weights is not supported"):
        rc.copy_weights("tinker://x:train:0/weights/a", "other-project").result(30)
    with pytest.raises(tinker.BadRequestError, match="sessions/search is not supported"):
        rc.search_sessions(types.SessionSearchRequest()).result(30)
    assert time.time() - t0 < 10, "an unserved route must fail at once, not be retried"
    with httpx.Client(base_url=backend.url, headers={"X-API-Key": backend.key}, timeout=10) as c:
        for method, path in (("POST", "/api/v1/cancel_future"), ("POST", "/api/v1/retrieve_futures"),
                             ("POST", "/api/v1/training_runs/a:train:0/checkpoints/weights/x/publish")):
            r = c.request(method, path, json={})
            assert r.status_code == 400 and "not supported" in r.json()["detail"], (path, r.text)
