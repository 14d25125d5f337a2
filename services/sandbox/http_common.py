"""HTTP pieces shared by the admin and worker APIs: key check, ROCK-style response envelope,
error handlers, and a request-body size cap."""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from .errors import SandboxError, Unauthorized

log = logging.getLogger(__name__)


def ok(result: Any = None, message: str | None = None) -> dict[str, Any]:
    """ROCK's envelope: {"status", "message", "error", "result"}."""
    return {"status": "Success", "message": message, "error": None, "result": result}


def failed(error: str, message: str = "request failed", result: Any = None, status_code: int = 200) -> JSONResponse:
    return JSONResponse(status_code=status_code,
                        content={"status": "Failed", "message": message, "error": error, "result": result})


def make_key_check(key: str, header: str):
    """FastAPI dependency: the key in ``header`` or as ``Authorization: Bearer <key>``."""
    expected = key.encode()

    async def check(request: Request) -> None:
        given = request.headers.get(header)
        if given is None:
            auth = request.headers.get("authorization", "")
            if auth.lower().startswith("bearer "):
                given = auth[7:].strip()
        if given is None or not hmac.compare_digest(given.encode(), expected):
            raise Unauthorized(f"missing or wrong key (send header {header}: <key> or Authorization: Bearer <key>)")
    return check


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(SandboxError)
    async def _sandbox_error(request: Request, exc: SandboxError) -> JSONResponse:
        if exc.status_code >= 500:
            log.error("%s %s: %s", request.method, request.url.path, exc)
        return failed(str(exc), type(exc).__name__, status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        msg = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return failed(msg, "invalid parameter", status_code=422)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return failed(f"{type(exc).__name__}: {exc}", "internal error", status_code=500)


class BodySizeLimit:
    """ASGI middleware: 413 for request bodies above ``max_bytes`` (by Content-Length, or while
    streaming a chunked body), before the app reads them into memory."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                return await self._reject(send)
        seen = 0

        async def limited_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge()
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _TooLarge:
            await self._reject(send)

    async def _reject(self, send) -> None:
        body = json.dumps({"status": "Failed", "message": "PayloadTooLarge", "result": None,
                           "error": f"request body larger than {self.max_bytes} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass
