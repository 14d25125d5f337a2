"""The verifier's mirror on the host side, offline: raw files over CONNECT + TLS with the mirror's
own CA, a miss logged (the verifier's infra signal), other hosts refused, cached index pages
served with their file links pointing back at the mirror."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl

import services.sandbox.mirror as mirror_mod
from services.sandbox.mirror import Mirror, store_raw

RAW = "raw.githubusercontent.com"


async def _request(sock: str, data: bytes, tls_host: str | None = None, ca: str | None = None) -> bytes:
    r, w = await asyncio.open_unix_connection(sock)
    try:
        if tls_host:
            w.write(f"CONNECT {tls_host}:443 HTTP/1.1\r\nHost: {tls_host}:443\r\n\r\n".encode())
            await w.drain()
            head = await r.readuntil(b"\r\n\r\n")
            if b" 200 " not in head:
                return head + await r.read()
            await w.start_tls(ssl.create_default_context(cafile=ca), server_hostname=tls_host)
        w.write(data)
        await w.drain()
        return await r.read()
    finally:
        w.close()


def test_mirror_serves_the_store_and_nothing_else(tmp_path):
    async def main():
        m = Mirror(tmp_path / "mirror", index_url="http://127.0.0.1:9/simple", raw_online=False)
        net = tmp_path / "net" / "sb"
        await m.open("sb", net)
        sock, ca = str(net / "mirror.sock"), str(net / "ca.pem")
        try:
            store_raw(m.raw_dir, "org/repo", "a" * 40, {"requirements/dev.txt": b"pytest\n"})
            get = f"GET /org/repo/{'a' * 40}/requirements/dev.txt HTTP/1.1\r\nHost: {RAW}\r\n\r\n".encode()
            ok = await _request(sock, get, RAW, ca)
            missing = await _request(sock, get.replace(b"dev.txt", b"test.txt"), RAW, ca)
            other = await _request(sock, b"", "example.com")
            absolute = await _request(sock, b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
            page = m.dir / "pypi" / "pages" / "six" / "index.html"
            page.parent.mkdir(parents=True)
            page.write_text(m._rewrite('<a href="https://files.pythonhosted.org/packages/x/six-1.whl#sha256=00">'
                                       '<a href="https://evil.example/six-2.whl">'))
            index = await _request(sock, b"GET /simple/six/ HTTP/1.1\r\nHost: x\r\n\r\n")
            down = await _request(sock, b"GET /simple/nosuch/ HTTP/1.1\r\nHost: x\r\n\r\n")   # upstream down
            bad = await _request(sock, b"GET /files/evil.example/six-2.whl HTTP/1.1\r\nHost: x\r\n\r\n")
            return ok, missing, other, absolute, index, down, bad, net
        finally:
            await m.aclose()
    ok, missing, other, absolute, index, down, bad, net = asyncio.run(main())
    assert ok.startswith(b"HTTP/1.1 200") and ok.endswith(b"\r\n\r\npytest\n"), ok
    assert missing.startswith(b"HTTP/1.1 404"), missing
    assert other.startswith(b"HTTP/1.1 403") and absolute.startswith(b"HTTP/1.1 403")
    assert b'href="/files/files.pythonhosted.org/packages/x/six-1.whl#sha256=00"' in index
    assert b'href="https://evil.example/six-2.whl"' in index   # not an allowed host: left alone, unreachable
    assert down.startswith(b"HTTP/1.1 502") and bad.startswith(b"HTTP/1.1 403")
    misses = [json.loads(line) for line in (net / "misses.log").read_text().splitlines()] \
        if (net / "misses.log").exists() else []
    assert [m["url"] for m in misses] == [f"https://{RAW}/org/repo/{'a' * 40}/requirements/test.txt",
                                          "http://127.0.0.1:9/simple/nosuch/"], misses
    denied = (net / "denied.log").read_text()
    assert "example.com:443" in denied and "http://example.com/" in denied and "evil.example" in denied


def test_mirror_serves_a_socket_in_a_deep_state_dir(tmp_path):
    """A manager whose state dir is deep (a socket path over sun_path's 107 bytes, as under pytest's
    tmp_path) still serves its sandboxes: it failed with `OSError: AF_UNIX path too long`."""
    async def main():
        m = Mirror(tmp_path / "mirror", index_url="http://127.0.0.1:9/simple", raw_online=False)
        net = tmp_path / ("state-" * 12) / "net" / ("sandbox-" * 5)
        assert len(str(net / "mirror.sock")) > 107
        await m.open("sb", net)
        try:
            r, w = await asyncio.open_unix_connection(sock=_connect(net / "mirror.sock"))
            w.write(b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
            await w.drain()
            answer = await r.read()
            w.close()
            return answer
        finally:
            await m.aclose()
    assert asyncio.run(main()).startswith(b"HTTP/1.1 403")


def _connect(path):
    """A connected AF_UNIX socket to a path of any length (through an O_PATH descriptor of its dir)."""
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(f"/proc/self/fd/{fd}/{path.name}")
        return s
    finally:
        os.close(fd)


def test_upstream_fetches_share_a_few_connections_and_retry_a_failed_connect(tmp_path, monkeypatch):
    """60 wheels asked at once (uv in a few verifier sandboxes) reach the registry over at most
    UPSTREAM_CONNECTIONS connections (60 new TLS connections at once timed out connecting on a NATed host),
    every one answered; a connection refused once is tried again instead of becoming a verifier infra failure.
    Planted: no connection limit -> 60 open at once -> fails."""
    state = {"open": 0, "peak": 0, "refuse": 1}

    async def handle(r, w):
        state["open"] += 1
        state["peak"] = max(state["peak"], state["open"])
        try:
            while True:
                try:
                    await r.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                await asyncio.sleep(0.02)
                w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok")
                await w.drain()
        finally:
            state["open"] -= 1
            w.close()

    async def main():
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        m = Mirror(tmp_path / "m")
        try:
            got = await asyncio.gather(*[m._fetch(f"http://127.0.0.1:{port}/w{i}.whl") for i in range(60)])
            assert [g[:2] for g in got] == [(200, b"ok")] * 60
            assert 1 <= state["peak"] <= mirror_mod.UPSTREAM_CONNECTIONS, state
            real = m.http().get

            async def flaky(url, **kw):   # the first connect fails, as a NATed host's connect timeout does
                if state["refuse"]:
                    state["refuse"] -= 1
                    raise mirror_mod.httpx.ConnectTimeout("")
                return await real(url, **kw)

            monkeypatch.setattr(m._http, "get", flaky)
            assert (await m._fetch(f"http://127.0.0.1:{port}/again.whl"))[:2] == (200, b"ok")
            assert state["refuse"] == 0
        finally:
            await m.aclose()
            srv.close()

    asyncio.run(main())
