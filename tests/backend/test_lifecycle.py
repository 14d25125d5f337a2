"""The backend stays bounded (services/backend/lifecycle.py, docs/backend.md "Lifecycle"): a finished
session's models and sampler snapshots are unloaded, a session that misses its heartbeats expires (and
is unloaded too), retrieved future results are deleted after their TTL, and sampler snapshots beyond
the byte bound are evicted to disk and reload from there when asked for."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
import tinker
from tinker import types

from helpers import REPO, BackendProc
from services.backend.runtime import Runtime

SESSION_TIMEOUT_S = 12  # above the SDK's 10 s heartbeat period
FUTURE_TTL_S = 1


@pytest.fixture(scope="module")
def b(tmp_path_factory, tiny_model):
    p = BackendProc(tmp_path_factory.mktemp("lifecycle") / "state",
                    extra={"backend": {"session_timeout_s": SESSION_TIMEOUT_S, "reap_every_s": 0.3,
                                       "future_ttl_s": FUTURE_TTL_S},
                           # a 0-byte bound: only the newest snapshot in memory
                           "runtime": {"max_sampler_gb": 0}}).start()
    yield p
    p.stop()


def _post(b, route: str, body: dict) -> httpx.Response:
    return httpx.post(f"{b.url}/api/v1/{route}", headers={"X-API-Key": b.key}, json=body, timeout=30)


def _datum(ids):
    return types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                       loss_fn_inputs={"target_tokens": types.TensorData.from_numpy(np.array(ids[1:], dtype=np.int64)),
                                       "weights": types.TensorData.from_numpy(np.ones(len(ids) - 1, dtype=np.float32))})


def _train_step(tc):
    tc.forward_backward([_datum([11, 22, 33, 44, 55, 66, 77, 88])], "cross_entropy").result(60)
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result(60)


def _sample(sampler) -> list[int]:
    r = sampler.sample(types.ModelInput.from_ints([5, 6, 7, 8]), 1,
                       types.SamplingParams(max_tokens=12, seed=7)).result(60)
    return list(r.sequences[0].tokens)


def _loaded(tc) -> bool:
    """Whether the backend still holds the training model (a forward pass works, or 404 'not loaded')."""
    try:
        tc.forward([_datum([1, 2, 3, 4])], "cross_entropy").result(60)
        return True
    except tinker.NotFoundError as e:
        assert "not loaded" in str(e), e
        return False


def test_finished_session_unloads_its_models_and_snapshots(b):
    sc = tinker.ServiceClient(base_url=b.url, api_key=b.key)
    tc = sc.create_lora_training_client(base_model=b.model, rank=4).result(60)
    _train_step(tc)
    sampler = tc.save_weights_and_get_sampling_client().result(60)
    _sample(sampler)
    assert _loaded(tc)
    assert _post(b, f"sessions/{tc.model_id.split(':')[0]}/finish", {}).status_code == 200
    assert not _loaded(tc)
    with pytest.raises(tinker.NotFoundError, match="no longer loaded"):
        _sample(sampler)
    assert "unloaded 1 model(s) and 1 sampler snapshot(s)" in (b.state_dir / "backend.log").read_text()


def test_session_without_heartbeats_expires_and_is_unloaded(b):
    """A client killed -9 stops heartbeating: after session_timeout_s its session is 'expired' and its
    model unloaded."""
    code = ("import tinker; sc = tinker.ServiceClient(base_url=%r, api_key=%r); "
            "tc = sc.create_lora_training_client(base_model=%r, rank=4).result(60); print(tc.model_id, flush=True); "
            "import time; time.sleep(600)") % (b.url, b.key, b.model)
    p = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        model_id = p.stdout.readline().strip()
        assert model_id, "the client did not create its model"
    finally:
        p.kill()
        p.wait()
    t_kill, sid = time.time(), model_id.split(":")[0]
    log = b.state_dir / "backend.log"
    while f"session {sid} expired" not in log.read_text():  # (polling its heartbeat would keep it alive)
        assert time.time() - t_kill < SESSION_TIMEOUT_S + 15, "the silent session was never expired"
        time.sleep(0.5)
    assert time.time() - t_kill > 2  # not before its heartbeats were due
    time.sleep(1)
    assert f"session {sid} ended: unloaded 1 model(s)" in log.read_text()
    assert _post(b, "session_heartbeat", {"session_id": sid}).status_code == 410  # what the SDK hears


def test_retrieved_future_results_are_deleted_after_their_ttl(b):
    sc = tinker.ServiceClient(base_url=b.url, api_key=b.key)
    tc = sc.create_lora_training_client(base_model=b.model, rank=4).result(60)
    rid = _post(b, "unload_model", {"model_id": tc.model_id}).json()["request_id"]
    first = _post(b, "retrieve_future", {"request_id": rid})
    assert first.status_code == 200 and first.json()["type"] == "unload_model", first.text
    assert _post(b, "retrieve_future", {"request_id": rid}).status_code == 200  # within the TTL: still there
    time.sleep(FUTURE_TTL_S + 1.5)
    r = _post(b, "retrieve_future", {"request_id": rid})
    assert r.status_code == 404 and "unknown request_id" in r.text, r.text


def test_snapshots_over_the_byte_bound_spill_to_disk_and_reload(b):
    sc = tinker.ServiceClient(base_url=b.url, api_key=b.key)
    tc = sc.create_lora_training_client(base_model=b.model, rank=4).result(60)
    _train_step(tc)
    s1 = tc.save_weights_and_get_sampling_client().result(60)
    before = _sample(s1)
    _train_step(tc)
    s2 = tc.save_weights_and_get_sampling_client().result(60)  # the bound keeps only this one in memory: s1 is spilled
    _sample(s2)
    log = (b.state_dir / "backend.log").read_text()
    assert "evicted to" in log
    assert _sample(s1) == before  # reloaded from disk, the same weights
    assert "reloading evicted sampler weights" in (b.state_dir / "backend.log").read_text()


def test_spilled_snapshots_are_bounded_by_disk_bytes():
    """max_spill_gb: the oldest spilled copies go first, and a snapshot larger than the bound alone
    (a 4B full-FT copy) is dropped on eviction instead of costing ~10 s of disk writes per step."""

    rt = Runtime.__new__(Runtime)
    rt.max_spill_bytes, rt.spilled, rt._spill_sizes = 100, {}, {}
    sizes = {"snap:a": 60, "snap:b": 50, "snap:c": 150}
    rt._snapshot_bytes = lambda sw: sizes[sw.key]
    rt._spill = lambda sw: rt.spilled.__setitem__(sw.key, Path("/nonexistent-spill") / sw.key)
    for key in ("snap:a", "snap:b", "snap:c"):
        rt._spill_within_bound(SimpleNamespace(key=key))
    assert list(rt.spilled) == ["snap:b"] and rt._spill_sizes == {"snap:b": 50}
