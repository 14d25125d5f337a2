"""Hostile callers of the Tinker backend: one client's huge sample request must not stall
another's small one (fair sampling rounds), bad values get 4xx, and one bad record never breaks
a listing for everyone."""

from __future__ import annotations

import json
import subprocess
import time

import httpx
import pytest
import tinker
from tinker import types

from helpers import RUNTIME_PY, BackendProc

PROMPT = [5, 6, 7, 8, 9]
ALICE, BOB = "tml-alice-key", "tml-bob-key"


def _sampler(backend):
    return tinker.ServiceClient(base_url=backend.url,
                                api_key=backend.key).create_sampling_client(base_model=backend.model)


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
    res = big.result(timeout=600)
    big_s = time.monotonic() - t0
    print(f"small request answered in {small_wait:.2f}s while a 96x512 request ran ({big_s:.1f}s in all)")
    assert len(res.sequences) == 96 and all(len(s.tokens) == 512 for s in res.sequences)
    assert small_wait < big_s / 2, (small_wait, big_s)
    # the rows preempted for the small request resumed with their own seeded streams: the same
    # request again, uninterrupted, gives the same sequences (up to float noise of re-prefilling)
    again = big_client.sample(types.ModelInput.from_ints(PROMPT), 96, big_sp).result(timeout=600)
    same = sum(a.tokens == b.tokens for a, b in zip(res.sequences, again.sequences))
    print(f"{same}/96 sequences identical to an uninterrupted run")
    assert same >= 95, same


def test_chunked_seeded_requests_match_unchunked_ones(backend):
    s = _sampler(backend)
    # 40 x 400 tokens fit one round (no chunks); 40 x 500 are answered in chunks of 32 and 8 sequences
    short = s.sample(types.ModelInput.from_ints(PROMPT), 40,
                     types.SamplingParams(max_tokens=400, stop=[], seed=9)).result(timeout=300)
    long = s.sample(types.ModelInput.from_ints(PROMPT), 40,
                    types.SamplingParams(max_tokens=500, stop=[], seed=9)).result(timeout=300)
    assert [x.tokens[:400] for x in long.sequences] == [x.tokens for x in short.sequences]
    assert len({tuple(x.tokens) for x in long.sequences}) == 40   # every row has its own seeded stream


@pytest.fixture(scope="module")
def tight(tmp_path_factory, tiny_model):
    """A backend with small limits: 1 MB bodies, LoRA rank <= 64, 4096 sampled tokens per request."""
    b = BackendProc(tmp_path_factory.mktemp("tight-backend"))
    b.extra = {"backend": {"max_body_mb": 1, "max_lora_rank": 64, "max_sample_tokens": 4096, "max_batch_tokens": 4096,
                           "api_keys": [b.key, {"key": ALICE, "owner": "alice"}, {"key": BOB, "owner": "bob"}]}}
    b.start()
    yield b
    b.stop()


def _post(b, path: str, body: str | bytes | dict, **headers) -> httpx.Response:
    h = {"X-API-Key": b.key, "content-type": "application/json", **headers}
    content = (body if isinstance(body, bytes) else json.dumps(body) if isinstance(body, dict)
               else body.encode("utf-8", "surrogatepass"))
    return httpx.post(b.url + "/api/v1" + path, content=content, headers=h, timeout=60)


def test_bad_input_gets_4xx_stores_nothing_and_listings_keep_working(tight):
    sc = tinker.ServiceClient(base_url=tight.url, api_key=tight.key)
    tc = sc.create_lora_training_client(base_model=tight.model, rank=8)
    saved = tc.save_state("before-the-attack").result(timeout=120).path   # must still load afterwards
    sid = _post(tight, "/create_session", {"tags": [], "user_metadata": {}, "sdk_version": "x"}).json()["session_id"]
    lora = {"rank": 8}
    bad = [
        ("/create_model", {"session_id": sid, "model_seq_id": 90, "base_model": tight.model, "lora_config": lora,
                           "user_metadata": "a string"}),
        ("/create_model", {"session_id": sid, "model_seq_id": 91, "base_model": tight.model, "lora_config": lora,
                           "user_metadata": {"k": {"nested": 1}}}),
        ("/create_model", {"session_id": sid, "model_seq_id": 92, "base_model": tight.model,
                           "lora_config": {"rank": 20000}}),
        ("/create_model", {"session_id": sid, "model_seq_id": 93, "base_model": tight.model, "lora_config": "big"}),
        ("/create_model", {"session_id": sid, "model_seq_id": "x", "base_model": tight.model, "lora_config": lora}),
        ("/create_session", {"tags": "not-a-list"}),
        ("/create_session", {"user_metadata": {"k": "v" * 20000}}),
        ("/create_session", '{"user_metadata": {"k": NaN}}'),
        ("/create_session", '{"user_metadata": {"k": "\\u0000"}}'),
        ("/create_session", '{"user_metadata": {"k": "\\ud800"}}'),
        ("/create_session", '{"tags": ' + "[" * 5000 + "]" * 5000 + "}"),
        ("/create_session", "[1]"),
        ("/create_session", b"\xff\xfe not json"),
        ("/create_session", b'{"tags": []}' + b" " * (2 * 1024 * 1024)),               # over max_body_mb
        ("/asample", {"base_model": tight.model, "num_samples": 8, "prompt": {"chunks": [{"tokens": [1, 2]}]},
                      "sampling_params": {"max_tokens": 1024}}),                          # 8 x 1024 > 4096
        ("/asample", {"base_model": tight.model, "num_samples": True, "prompt": {"chunks": [{"tokens": [1, 2]}]}}),
        ("/asample", {"base_model": tight.model, "prompt": {"chunks": [{"tokens": [1, 2]}]},
                      "sampling_params": {"temperature": "hot"}}),
        ("/asample", {"base_model": tight.model, "prompt": "hi"}),
        ("/asample", {"base_model": tight.model, "prompt": {"chunks": ["hi"]}}),
        ("/asample",
         '{"base_model": "%s", "prompt": {"chunks": [{"tokens": [1]}]}, "sampling_params": {"top_p": Infinity}}'
         % tight.model),
        ("/forward_backward", zstd_bomb()),
    ]
    for path, body in bad:
        headers = {"content-encoding": "zstd",
                   "content-type": "application/x-protobuf"} if path == "/forward_backward" else {}
        r = _post(tight, path, body, **headers)
        assert 400 <= r.status_code < 500, (path, str(body)[:80], r.status_code, r.text[:300])
    for path in ("/training_runs", "/sessions", "/checkpoints", "/training_runs?limit=-5&offset=-1"):
        r = httpx.get(tight.url + "/api/v1" + path, headers={"X-API-Key": tight.key}, timeout=60)
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
    runs = httpx.get(tight.url + "/api/v1/training_runs?limit=1000",
                     headers={"X-API-Key": tight.key}).json()["training_runs"]
    assert not any(r["training_run_id"].endswith((":90", ":91", ":92", ":93")) for r in runs)
    again = sc.create_training_client_from_state(saved)         # the earlier checkpoint still loads
    assert again.get_info().model_id


def zstd_bomb() -> bytes:
    # the runtime venv has zstandard; 64 MB of zeros compress to a few KB and claim 64 MB
    code = "import sys, zstandard; sys.stdout.buffer.write(zstandard.ZstdCompressor().compress(bytes(64 << 20)))"
    return subprocess.run([RUNTIME_PY, "-c", code], capture_output=True, check=True).stdout


def test_a_tenant_sees_loads_and_deletes_only_its_own(tight):
    alice = tinker.ServiceClient(base_url=tight.url, api_key=ALICE)
    tc = alice.create_lora_training_client(base_model=tight.model, rank=8)
    run = tc.get_info().model_id
    path = tc.save_state("alice-ckpt").result(timeout=120).path
    name = path.split("/", 3)[3]

    def get(key: str, path_: str) -> httpx.Response:
        return httpx.get(tight.url + "/api/v1" + path_, headers={"X-API-Key": key}, timeout=60)

    def runs(key: str) -> set[str]:
        return {r["training_run_id"] for r in get(key, "/training_runs?limit=1000").json()["training_runs"]}

    assert run in runs(ALICE) and run in runs(tight.key) and run not in runs(BOB)
    assert get(BOB, f"/training_runs/{run}").status_code == 404
    assert get(BOB, f"/training_runs/{run}/checkpoints").status_code == 404
    bobs = get(BOB, "/checkpoints?limit=1000").json()["checkpoints"]
    assert all(not c["tinker_path"].startswith(f"tinker://{run}/") for c in bobs)
    assert get(BOB, f"/sessions/{run.split(':')[0]}").status_code == 404
    assert run.split(":")[0] not in get(BOB, "/sessions?limit=1000").json()["sessions"]
    bob = tinker.ServiceClient(base_url=tight.url, api_key=BOB)
    with pytest.raises(Exception):  # noqa: B017 (whichever SDK error: bob must not load alice's state)
        bob.create_training_client_from_state(path).get_info()
    for key, status in ((BOB, 404), (ALICE, 200)):   # bob cannot read alice's futures, alice can
        r = _post(tight, "/weights_info", {"tinker_path": path}, **{"X-API-Key": key})
        assert r.status_code == status, (key, r.text)
    rid = _post(tight, "/save_weights", {"model_id": run, "path": "alice-2"},
                **{"X-API-Key": ALICE}).json()["request_id"]
    assert _post(tight, "/retrieve_future", {"request_id": rid}, **{"X-API-Key": BOB}).status_code == 404
    assert _post(tight, "/retrieve_future", {"request_id": rid}, **{"X-API-Key": ALICE}).status_code == 200
    r = httpx.delete(tight.url + f"/api/v1/training_runs/{run}/checkpoints/{name}", headers={"X-API-Key": BOB})
    assert r.status_code == 404, r.text
    alices = get(ALICE, f"/training_runs/{run}/checkpoints").json()["checkpoints"]
    assert f"tinker://{run}/weights/alice-ckpt" in {c["tinker_path"] for c in alices}
    assert alice.create_training_client_from_state(path).get_info().model_id   # still loads for its owner
