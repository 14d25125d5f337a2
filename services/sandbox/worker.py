"""The worker's internal HTTP API: the ``SandboxBackend`` interface over HTTP, for an admin that runs
with ``backend: worker`` (backends/worker_client.py). Key-protected like the admin. Bytes
travel base64-encoded in JSON."""

from __future__ import annotations

import base64
from typing import Any

from fastapi import APIRouter, Depends, FastAPI
from pydantic import BaseModel

from .backends.base import ExecRequest, SandboxBackend, SandboxSpec
from .config import base_sources
from .http_common import BodySizeLimit, install_error_handlers, make_key_check, ok
from .limits import Limits
from .paths import host_dir_under

PREFIX = "/worker/v1"


class CreateBody(BaseModel):
    sandbox_id: str
    image: str | None = None
    base_dir: str | None = None
    limits: dict[str, Any] = {}
    env: dict[str, str] = {}
    binds: list[dict[str, str]] = []
    network: str = "none"


class IdBody(BaseModel):
    sandbox_id: str


class ExecBody(BaseModel):
    sandbox_id: str
    argv: list[str]
    stdin_b64: str | None = None
    timeout: float
    max_output: int
    cwd: str = "/workspace"
    env: dict[str, str] = {}
    merge_stderr: bool = False


class SessionBody(BaseModel):
    sandbox_id: str
    session: str
    env: dict[str, str] | None = None
    startup_source: list[str] | None = None
    command: str | None = None
    timeout: float = 60.0
    max_output: int = 1_000_000


def build_worker_app(backend: SandboxBackend, cfg: dict[str, Any]) -> FastAPI:
    check_key = make_key_check(cfg["auth"]["key"], cfg["auth"].get("header", "X-Key"))
    app = FastAPI(title="sandbox worker")
    install_error_handlers(app)
    max_upload = int((cfg.get("admin") or {}).get("max_upload_mb", 64)) * 1024 * 1024
    allowed_bases = base_sources(cfg)
    app.add_middleware(BodySizeLimit, max_bytes=2 * max_upload)   # base64 overhead
    api = APIRouter(prefix=PREFIX, dependencies=[Depends(check_key)])

    @app.get("/health")
    async def health():
        return ok({"backend": backend.name, "sandboxes": len(await backend.list_live()),
                   "limits": backend.limits_info()})

    @api.post("/create")
    async def create(b: CreateBody):
        base = host_dir_under(b.base_dir, allowed_bases) if b.base_dir else None
        spec = SandboxSpec(image=b.image, base_dir=base, limits=Limits.from_mapping(b.limits), env=b.env,
                           binds=b.binds, network=b.network)
        return ok(await backend.create(b.sandbox_id, spec))

    @api.post("/destroy")
    async def destroy(b: IdBody):
        await backend.destroy(b.sandbox_id)
        return ok()

    @api.post("/reset")
    async def reset(b: IdBody):
        await backend.reset(b.sandbox_id)
        return ok()

    @api.get("/list")
    async def list_live():
        return ok(await backend.list_live())

    @api.post("/exec")
    async def exec_(b: ExecBody):
        req = ExecRequest(argv=b.argv, stdin=base64.b64decode(b.stdin_b64) if b.stdin_b64 is not None else None,
                          timeout=b.timeout, max_output=b.max_output, cwd=b.cwd, env=b.env,
                          merge_stderr=b.merge_stderr)
        return ok((await backend.exec(b.sandbox_id, req)).to_json())

    @api.post("/create_session")
    async def create_session(b: SessionBody):
        return ok(await backend.create_session(b.sandbox_id, b.session, b.env, b.startup_source))

    @api.post("/run_in_session")
    async def run_in_session(b: SessionBody):
        out = await backend.run_in_session(b.sandbox_id, b.session, b.command or "", b.timeout, b.max_output)
        return ok(out.__dict__)

    @api.post("/close_session")
    async def close_session(b: SessionBody):
        await backend.close_session(b.sandbox_id, b.session)
        return ok()

    app.include_router(api)
    return app
