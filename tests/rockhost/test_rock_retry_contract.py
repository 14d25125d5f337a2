"""Contract test (a fake ROCK admin: the transient proxy error cannot be provoked on demand): the
``flavor="rock"`` client sends a call again after ROCK's "Upstream server is not reachable", and
gives up with that error after UPSTREAM_RETRIES."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from services.sandbox import client as client_mod
from services.sandbox.client import CommandFailed, SandboxManagerClient


def fake_rock(failures: int) -> tuple[httpx.MockTransport, list[int]]:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) <= failures:
            return httpx.Response(200, json={"status": "Failed", "message": "proxy",
                                             "error": "Service unavailable: Upstream server is not reachable."})
        return httpx.Response(200, json={"status": "Success",
                                         "result": {"stdout": "ok\n", "stderr": "", "exit_code": 0}})
    return httpx.MockTransport(handler), calls


def call_execute(transport: httpx.MockTransport, flavor: str = "rock"):
    async def main():
        c = SandboxManagerClient("http://rock.invalid", flavor=flavor)
        c._http = httpx.AsyncClient(base_url="http://rock.invalid" + client_mod.PREFIX, transport=transport)
        async with c:
            return await c.call("POST", "/execute", json={"sandbox_id": "x", "command": "echo ok"})
    return asyncio.run(main())


def test_transient_upstream_error_is_retried():
    transport, calls = fake_rock(failures=2)
    assert call_execute(transport)["stdout"] == "ok\n" and len(calls) == 3


def test_persistent_upstream_error_gives_up():
    transport, calls = fake_rock(failures=99)
    with pytest.raises(CommandFailed, match="Upstream server is not reachable"):
        call_execute(transport)
    assert len(calls) == client_mod.UPSTREAM_RETRIES + 1


def test_our_admin_flavor_is_not_retried():
    transport, calls = fake_rock(failures=1)
    with pytest.raises(CommandFailed):
        call_execute(transport, flavor="local")
    assert len(calls) == 1
