"""Acceptance (issue 2): state survives kill -9; bad input gets a clear 4xx / user error fast."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest
import tinker
from tinker import types

from helpers import BackendProc


def _datum(ids):
    return types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                       loss_fn_inputs={"target_tokens": types.TensorData.from_numpy(np.array(ids[1:], dtype=np.int64)),
                                       "weights": types.TensorData.from_numpy(np.ones(len(ids) - 1, dtype=np.float32))})


def _lps(tc, d):
    out = tc.forward([d], "cross_entropy").result(timeout=60)
    return out.loss_fn_outputs[0]["logprobs"].to_numpy()


def test_kill9_after_save_state_then_resume_with_optimizer(tmp_path, tiny_model):
    b = BackendProc(tmp_path / "state").start()
    try:
        sc = tinker.ServiceClient(base_url=b.url, api_key=b.key)
        tc = sc.create_lora_training_client(base_model=b.model, rank=4, seed=1)
        d = _datum([11, 22, 33, 44, 55, 66, 77, 88])
        adam = types.AdamParams(learning_rate=1e-2)
        for _ in range(2):
            tc.forward_backward([d], "cross_entropy").result(60)
            tc.optim_step(adam).result(60)
        path = tc.save_state("before-crash").result(60).path
        # one more step on the original: what the resumed client must reproduce exactly
        tc.forward_backward([d], "cross_entropy").result(60)
        tc.optim_step(adam).result(60)
        expected_after = _lps(tc, d)
        b.kill9()
        b.start()
        sc2 = tinker.ServiceClient(base_url=b.url, api_key=b.key)
        tc2 = sc2.create_training_client_from_state_with_optimizer(path)
        tc2.forward_backward([d], "cross_entropy").result(60)
        tc2.optim_step(adam).result(60)
        np.testing.assert_allclose(_lps(tc2, d), expected_after, atol=1e-5,
                                   err_msg="resumed optimizer trajectory differs from the uninterrupted one")
        # checkpoint listing survived too
        rc = sc2.create_rest_client()
        listed = rc.list_checkpoints(tc.model_id).result(60)
        assert path in {c.tinker_path for c in listed.checkpoints}
    finally:
        b.stop()


def test_completed_results_survive_restart(tmp_path, tiny_model):
    b = BackendProc(tmp_path / "state").start()
    try:
        h = {"X-API-Key": b.key}
        sid = httpx.post(b.url + "/api/v1/create_session", json={"tags": [], "sdk_version": "t"},
                         headers=h).json()["session_id"]
        r = httpx.post(b.url + "/api/v1/create_model", headers=h, json={
            "session_id": sid, "model_seq_id": 0, "base_model": b.model, "lora_config": {"rank": 2}}).json()
        done = httpx.post(b.url + "/api/v1/retrieve_future", headers=h, json={"request_id": r["request_id"]},
                          timeout=60)
        assert done.status_code == 200 and done.json()["model_id"] == r["model_id"]
        b.kill9()
        b.start()
        again = httpx.post(b.url + "/api/v1/retrieve_future", headers=h, json={"request_id": r["request_id"]},
                           timeout=60)
        assert again.status_code == 200 and again.json() == done.json()
        # the model itself is gone with the process: a clear 404, not a hang
        info = httpx.post(b.url + "/api/v1/get_info", headers=h, json={"model_id": r["model_id"]})
        assert info.status_code == 200  # metadata persists
        fb = httpx.post(b.url + "/api/v1/optim_step", headers=h,
                        json={"model_id": r["model_id"], "seq_id": 1, "adam_params": {}})
        assert fb.status_code == 404 and "checkpoint" in fb.json()["detail"]
    finally:
        b.stop()


def _fails_fast(fn, what):
    t0 = time.time()
    with pytest.raises((tinker.BadRequestError, tinker.NotFoundError, tinker.UnprocessableEntityError,
                        tinker.RequestFailedError, tinker.AuthenticationError)) as ei:
        r = fn()
        if hasattr(r, "result"):
            r.result(timeout=30)
    assert time.time() - t0 < 10, f"{what}: took {time.time() - t0:.1f}s"
    if isinstance(ei.value, tinker.RequestFailedError):
        assert str(ei.value.category) == "user", f"{what}: {ei.value}"
    assert str(ei.value).strip()
    return ei.value


def test_bad_input_gets_clear_errors_and_backend_keeps_serving(backend):
    sc = tinker.ServiceClient(base_url=backend.url, api_key=backend.key)
    e = _fails_fast(lambda: sc.create_lora_training_client(base_model="nope/nope", rank=4), "unknown model")
    assert backend.model in str(e), "the error lists the supported models"
    tc = sc.create_lora_training_client(base_model=backend.model, rank=4)
    ids = [5, 6, 7, 8, 9]
    targets = types.TensorData.from_numpy(np.array(ids[1:], dtype=np.int64))
    bad_len = types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                          loss_fn_inputs={"target_tokens": targets,
                                          "weights": types.TensorData.from_numpy(np.ones(2, dtype=np.float32))})
    assert "length" in str(_fails_fast(lambda: tc.forward([bad_len], "cross_entropy"), "mismatched lengths"))
    assert "vocabulary" in str(_fails_fast(lambda: tc.forward([_datum([5, 6, 10**9])], "cross_entropy"), "oov"))
    assert "unsupported loss_fn" in str(
        _fails_fast(lambda: tc.forward([_datum(ids)], "nope"), "unknown loss"))  # type: ignore[arg-type]
    no_adv = types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                         loss_fn_inputs={"target_tokens": targets,
                                         "logprobs": types.TensorData.from_numpy(np.zeros(4, dtype=np.float32))})
    assert "advantages" in str(_fails_fast(lambda: tc.forward([no_adv], "ppo"), "missing advantages"))
    sampler = sc.create_sampling_client(base_model=backend.model)
    assert "max_tokens" in str(_fails_fast(
        lambda: sampler.sample(types.ModelInput.from_ints(ids), 1, types.SamplingParams(max_tokens=-1)),
        "negative max_tokens"))
    with pytest.raises(tinker.AuthenticationError):
        tinker.ServiceClient(base_url=backend.url,
                             api_key="tml-wrong").create_lora_training_client(base_model=backend.model, rank=2)
    r = httpx.post(backend.url + "/api/v1/create_session", headers={"X-API-Key": backend.key}, content=b"{not json")
    assert r.status_code == 400 and "JSON" in r.json()["detail"]
    # still serving
    out = tc.forward([_datum(ids)], "cross_entropy").result(timeout=30)
    assert len(out.loss_fn_outputs) == 1


def test_a_retried_save_for_sampler_is_the_same_request(backend):
    """The SDK gives each attempt of save_weights_for_sampler a new sampling_session_seq_id (same seq_id): a retry
    after a lost response must get the first attempt's future, not a 400 (seen in CI on a loaded machine). Any other
    difference under the same seq_id is still refused."""
    h, url = {"X-API-Key": backend.key}, backend.url + "/api/v1"
    sid = httpx.post(url + "/create_session", json={"tags": [], "sdk_version": "t"}, headers=h).json()["session_id"]
    r = httpx.post(url + "/create_model", headers=h, json={
        "session_id": sid, "model_seq_id": 0, "base_model": backend.model, "lora_config": {"rank": 2}}).json()
    mid = httpx.post(url + "/retrieve_future", headers=h, json={"request_id": r["request_id"]},
                     timeout=60).json()["model_id"]
    first = httpx.post(url + "/save_weights_for_sampler", headers=h, json={
        "model_id": mid, "seq_id": 1, "sampling_session_seq_id": 0, "kind": "snapshot"})
    retry = httpx.post(url + "/save_weights_for_sampler", headers=h, json={
        "model_id": mid, "seq_id": 1, "sampling_session_seq_id": 1, "kind": "snapshot"})
    assert first.status_code == 200 and retry.status_code == 200, retry.text
    assert retry.json()["request_id"] == first.json()["request_id"]
    done = httpx.post(url + "/retrieve_future", headers=h, json={"request_id": first.json()["request_id"]},
                      timeout=60).json()
    assert done["sampling_session_id"].endswith(":sample:0"), done
    other = httpx.post(url + "/save_weights_for_sampler", headers=h, json={
        "model_id": mid, "seq_id": 1, "path": "elsewhere"})
    assert other.status_code == 400 and "already used" in other.json()["detail"]
