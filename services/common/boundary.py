"""The last line of every service's validation layer: an ASGI middleware that turns an exception
no handler answered into the service's 500 body *without re-raising it*.

Starlette's own 500 handler re-raises after answering, and uvicorn then closes the connection: a
kept-alive client sees its next request reset. Bad input must never get that far (each service's
edge answers 4xx), but if a bug lets one through, the caller gets one 500 and a usable connection.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ErrorBoundary:
    """``error_body(exc)`` builds the JSON 500 body in the service's own format."""

    def __init__(self, app: ASGIApp, error_body: Callable[[BaseException], Any], logger: logging.Logger) -> None:
        self.app, self.error_body, self.log = app, error_body, logger

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as e:  # noqa: BLE001 - the boundary: logged with its traceback, answered as a 500
            self.log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if started:
                raise
            body = json.dumps(self.error_body(e)).encode()
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
