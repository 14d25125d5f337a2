"""A client for the issue-37 tests: one kept-alive HTTP connection (http.client), so a test sees
whether the service answered and kept the connection, or reset it after an error."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import urlsplit


class Reset(AssertionError):
    pass


class KeptAlive:
    """Requests on ONE connection; ``post`` raises Reset if the service closed it (a 5xx's reset)."""

    def __init__(self, url: str, headers: dict[str, str], timeout: float = 30.0):
        u = urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        self.headers = headers
        self.conn.connect()
        self.sock = self.conn.sock

    def request(self, method: str, path: str, body: bytes | str | dict | list | None = None) -> tuple[int, Any, float]:
        """(status, decoded JSON or text, seconds); Reset if the connection did not survive."""
        if self.conn.sock is not self.sock:
            raise Reset("the service closed the kept-alive connection after the previous answer")
        data = (body if isinstance(body, bytes) or body is None
                else body.encode("utf-8", "surrogatepass") if isinstance(body, str) else json.dumps(body).encode())
        t = time.monotonic()
        try:
            self.conn.request(method, path, body=data, headers={"content-type": "application/json", **self.headers})
            r = self.conn.getresponse()
            raw = r.read()
        except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine) as e:
            raise Reset(f"{method} {path}: connection reset ({e!r})") from e
        dt = time.monotonic() - t
        if r.will_close or (r.getheader("connection") or "").lower() == "close":
            self.conn.close()
            raise Reset(f"{method} {path}: answered {r.status} {raw[:200]!r} and closed the connection")
        try:
            return r.status, json.loads(raw), dt
        except ValueError:
            return r.status, raw.decode(errors="replace"), dt

    def post(self, path: str, body: Any) -> tuple[int, Any, float]:
        return self.request("POST", path, body)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "KeptAlive":
        return self

    def __exit__(self, *a: object) -> None:
        self.close()
