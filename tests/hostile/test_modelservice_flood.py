"""Issue 37, ModelService: what a sandbox can do through its socket. A loop of truncated requests
(headers announce 100 bytes, one arrives, the connection closes) must not grow the log without
bound, and the service must stop in seconds afterwards, with connections still pending; a sandbox
must not reach the TCP clients' implicit ``default`` session."""

from __future__ import annotations

import signal
import socket
import time

import httpx
import pytest

from tests.modelservice.conftest import start_modelservice, stop

FLOOD_S = 15.0


@pytest.fixture()
def ms(backend, tmp_path):
    m = start_modelservice(tmp_path / "ms", backend)
    yield m
    stop(m.proc)


def _unix(path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(path))
    return s


def test_a_flood_of_truncated_requests_keeps_the_log_bounded_and_stop_fast(ms):
    sid = httpx.post(ms.url + "/sessions", headers={"X-Key": ms.key}, json={}).json()["session_id"]
    req = (f"POST /s/{sid}/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           "Content-Length: 100\r\n\r\n{").encode()
    size0 = ms.log.stat().st_size
    n, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < FLOOD_S and n < 16_000:
        try:
            with _unix(ms.socket) as s:
                s.sendall(req)
        except OSError:
            pass
        n += 1
    pending = []
    for _ in range(1000):   # connections that are still waiting for their bodies at shutdown
        try:
            s = _unix(ms.socket)
            s.sendall(req)
            pending.append(s)
        except OSError:
            break
    time.sleep(2)
    grew = ms.log.stat().st_size - size0
    health = httpx.get(ms.url + "/health", timeout=30).json()
    print(f"{n} truncated requests in {FLOOD_S:.0f}s + {len(pending)} pending: log +{grew / 1024:.1f} KB, "
          f"health {health}")
    assert grew < 64 * 1024, (grew, ms.log.read_text()[-2000:])
    assert health.get("log_lines_dropped", 0) > 0, health
    t = time.monotonic()
    ms.proc.send_signal(signal.SIGTERM)
    try:
        rc = ms.proc.wait(60)
    finally:
        for s in pending:
            s.close()
    took = time.monotonic() - t
    print(f"stopped in {took:.1f}s (exit {rc})")
    assert rc == 0 and took < 10, (rc, took)


def test_the_implicit_default_session_is_not_reachable_from_the_socket(ms):
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = httpx.post(ms.url + "/v1/chat/completions", headers={"X-Key": ms.key}, json=chat, timeout=120)
    assert r.status_code == 200, r.text
    transport = httpx.HTTPTransport(uds=str(ms.socket))
    with httpx.Client(transport=transport, base_url="http://sandbox", timeout=120) as c:
        for path in ("/s/default/v1/chat/completions", "/s/default/v1/models"):
            r = c.request("POST" if "chat" in path else "GET", path, json=chat if "chat" in path else None)
            assert r.status_code == 404, (path, r.status_code, r.text[:200])
        r = c.post("/v1/chat/completions", json=chat)   # no key on the socket: refused
        assert r.status_code == 401, r.text[:200]
    turns = httpx.get(ms.url + "/sessions/default", headers={"X-Key": ms.key}).json()["session"]["turns"]
    assert turns == 1, turns
