"""HTTP pieces shared by the admin and worker APIs: key check, ROCK-style response envelope,
error handlers, and a request-body size cap."""

from __future__ import annotations

import hmac
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from services.common.boundary import ErrorBoundary
from services.common.limits import BodySizeLimit as CommonBodySizeLimit

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

    # an unexpected exception: one 500 (logged), on a connection that stays usable (no reset)
    app.add_middleware(ErrorBoundary, logger=log, error_body=lambda exc: {
        "status": "Failed", "message": "internal error", "error": f"{type(exc).__name__}: {str(exc)[:500]}",
        "result": None})


class BodySizeLimit(CommonBodySizeLimit):
    """413 (ROCK envelope) for request bodies above ``max_bytes``, before they are read."""

    def __init__(self, app, max_bytes: int):
        super().__init__(app, max_bytes, lambda n: {"status": "Failed", "message": "PayloadTooLarge", "result": None,
                                                    "error": f"request body larger than {n} bytes"})
