"""The FastAPI application of the Tinker-compatible backend (tinker SDK 0.38 contract).

Layers, one direction (docs/backend.md): routes.py / external_routes.py (API: state checks,
futures) -> wire.py (typed requests, validation, response encoding) -> scheduler.py (one typed job
and one handler per request kind) -> runtime_api.RuntimeAPI (runtime.Runtime in process, or
ray_runtime.RayRuntime). This module wires them together: body cap, API keys, error bodies, and the
error boundary (services/common/boundary.py: an unexpected exception is a 500 on a connection that stays usable).
Synchronous endpoints answer 4xx with a JSON ``detail`` for bad input (never 5xx: the SDK retries
those forever).
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError

from services.common.boundary import ErrorBoundary
from services.common.limits import BodySizeLimit

from . import anthropic_api, compat, external_routes, lifecycle, oai, routes, tenants
from .errors import TinkerError
from .routes import json_response
from .state import BackendState

log = logging.getLogger("backend.api")


def create_app(state: BackendState) -> FastAPI:
    app = FastAPI(title="local-tinker backend", docs_url=None, redoc_url=None)
    app.state.backend = state
    app.add_middleware(BodySizeLimit, max_bytes=state.limits.max_body_bytes,
                       error_body=lambda n: {"detail": f"request body larger than {n} bytes (backend.max_body_mb)"})

    @app.middleware("http")
    async def auth(request: Request, call_next):
        caller: tenants.Caller | None = tenants.ADMIN
        path = request.url.path
        if state.tenants.keys and path.startswith(("/api/", *compat.PREFIXES)) and path != "/api/v1/healthz":
            caller = state.tenants.caller(compat.api_key(request))   # X-API-Key, or Authorization: Bearer
        if caller is None:
            msg = "invalid or missing API key (send it in the X-API-Key header or as Authorization: Bearer)"
            if path.startswith(compat.PREFIXES):
                return json_response((oai if path.startswith("/oai/") else anthropic_api).error_body(msg, 401), 401)
            return json_response({"detail": msg}, 401)
        token = tenants.current.set(caller)
        try:
            return await call_next(request)
        finally:
            tenants.current.reset(token)

    @app.exception_handler(TinkerError)
    async def tinker_error(_: Request, e: TinkerError):
        return json_response({"detail": e.message}, e.status_code if e.status_code < 500 else 400)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, e: RequestValidationError):
        return json_response({"detail": str(e.errors())[:2000]}, 422)

    # outermost: a bug's exception is one 500, logged, and the kept-alive connection stays usable
    app.add_middleware(ErrorBoundary, error_body=lambda e: {"detail": f"internal error: {type(e).__name__}"},
                       logger=log)

    @app.on_event("startup")
    async def _startup():
        state.loop = asyncio.get_running_loop()
        state.reaper = state.loop.create_task(lifecycle.reaper(state))  # session expiry, old futures

    # exports, download URLs, TTLs and clean 400s for unserved SDK routes first (/sessions/search is no session id)
    app.include_router(external_routes.router)
    app.include_router(routes.router)
    app.include_router(oai.router)            # /oai/api/v1: OpenAI-compatible (chat) completions
    app.include_router(anthropic_api.router)  # /anthropic/api/v1: Anthropic-compatible messages
    return app
