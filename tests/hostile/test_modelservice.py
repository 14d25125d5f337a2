"""Hostile callers of the ModelService (what an agent inside a sandbox can send through its
socket): oversized bodies and prompts are refused before they are read or tokenised, half-sent
requests are logged once and quietly, bad values get 400, and the service stays up."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.modelservice.conftest import start_modelservice, stop


@pytest.fixture(scope="module")
def ms(backend, tmp_path_factory):
    m = start_modelservice(tmp_path_factory.mktemp("hostile-ms"), backend)
    yield m
    assert stop(m.proc) == 0


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _chat(content: str) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 2}


def test_oversized_bodies_and_prompts_are_refused_within_a_memory_bound(ms):
    rss0 = _rss_mb(ms.proc.pid)
    with ms.client() as c:
        big = json.dumps(_chat("x" * (64 * 1024 * 1024))).encode()
        r = c.post("/v1/chat/completions", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413, r.text[:300]

        def chunks():
            for _ in range(64):
                yield b" " * (1024 * 1024)
        r = c.post("/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413, r.text[:300]
        t = time.monotonic()
        r = c.post("/v1/chat/completions", json=_chat("lorem ipsum " * 600_000))   # 7 MB: under the body cap
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text[:300]
        assert "characters" in r.json()["error"]["message"]
        assert time.monotonic() - t < 5
        assert c.post("/v1/chat/completions", json=_chat("hi")).status_code == 200
    grew = _rss_mb(ms.proc.pid) - rss0
    print(f"ModelService RSS {rss0:.0f} MB, +{grew:.0f} MB after a 64 MB body, a 64 MB chunked body and a 7 MB prompt")
    assert grew < 150, grew


def test_half_sent_requests_are_logged_once_and_quietly(ms):
    port = int(ms.url.rsplit(":", 1)[1])
    size0 = ms.log.stat().st_size
    for _ in range(40):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Authorization: Bearer " + ms.key.encode() + b"\r\nContent-Length: 100000\r\n\r\n{\"messages\": "
                                                                    b"[")
    time.sleep(1.0)
    added = ms.log.read_bytes()[size0:].decode(errors="replace")
    assert added.count("Traceback") <= 5, added[-3000:]
    assert len(added) < 40 * 400, len(added)
    assert httpx.get(ms.url + "/health").status_code == 200


@pytest.mark.parametrize("body", [
    '{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
    '{"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}',
    '{"messages": [{"role": "user", "content": "hi"}], "top_p": Infinity}',
    '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}',
    '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1.5}',
    '{"messages": [{"role": "user", "content": "hi"}], "seed": "s"}',
    '{"messages": [{"role": "user", "content": "hi"}], "n": "x"}',
    '{"messages": [{"role": "user", "content": "hi"}], "stream": true, "stream_options": 3}',
    '{"messages": [{"role": "user", "content": "\\ud800"}]}',
    '{"messages": "hi"}',
    '{"messages": [{"role": "user", "content": ' + "[" * 5000 + "]" * 5000 + "}]}",
    '[1]',
])
def test_bad_values_get_400(ms, body):
    with ms.client() as c:
        r = c.post("/v1/chat/completions", content=body.encode("utf-8", "surrogatepass"),
                   headers={"content-type": "application/json"})
        assert r.status_code == 400, (r.status_code, r.text[:300])
        r = c.post("/sessions", content=body.encode("utf-8", "surrogatepass"),
                   headers={"content-type": "application/json"})
        assert r.status_code < 500, (r.status_code, r.text[:300])
    assert httpx.get(ms.url + "/health").status_code == 200
