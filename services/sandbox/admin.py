"""The admin HTTP API: the subset of ROCK's sandbox API (prefix /apis/envs/sandbox/v1) that
rl-rock's ``rock.sdk.sandbox.client.Sandbox`` uses, plus a few extensions (heartbeat, reset,
list, and extra request/response fields that the ROCK SDK ignores).

Differences from ROCK, on purpose: bad requests get real 4xx statuses (ROCK answers 200 with
status "Failed"); command failures (non-zero exit with check, timeouts) are answered like ROCK:
HTTP 200 with status "Failed".
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import codecs
import io
import logging
import tarfile
import time
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, FastAPI, File, Form, Request, UploadFile
from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.common.text import text_problem

from . import config as sbconfig
from .backends.base import ExecRequest, bash
from .errors import BadRequest, PayloadTooLarge
from .http_common import BodySizeLimit, failed, install_error_handlers, make_key_check, ok
from .limits import parse_size_mb
from .manager import SandboxManager
from .paths import sandbox_path
from .store import SandboxRecord

log = logging.getLogger(__name__)
PREFIX = "/apis/envs/sandbox/v1"


class _Req(BaseModel):
    """Finite numbers only; strings without lone surrogates, and without NUL bytes except in a
    file's ``content`` (both would otherwise fail deep inside as a 500)."""
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _clean_strings(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, value in data.items():
                if key == "sandbox_id" and isinstance(value, str):
                    continue   # any string: an id no sandbox has is unknown (404, manager._known_form)
                check_text(value, str(key), allow_nul=key == "content")
        return data


def check_text(value: Any, where: str, allow_nul: bool = False) -> None:
    """Raise ValueError (a 422) for NUL bytes or lone surrogates anywhere in ``value``."""
    bad = text_problem(value, where, allow_nul=allow_nul, max_depth=32)
    if bad:
        raise ValueError(bad)


class StartRequest(_Req):
    image: str | None = None
    memory: str | None = None               # "8g"
    cpus: float | None = None               # ROCK: shares; used as the CPU limit unless limit_cpus
    limit_cpus: float | None = None
    disk: str | None = None                 # "50G": size of the sandbox's writable tmpfs
    sandbox_id: str | None = None
    auto_clear_time_minutes: int | None = None   # ROCK's idle clean-up -> our lease
    # extensions
    base_dir: str | None = None             # host directory copied (once, cached) as /workspace
    limits: dict[str, Any] | None = None
    lease_s: float | None = None
    ttl_s: float | None = None
    env: dict[str, str] | None = None
    binds: list[dict[str, str]] | None = None   # [{"source", "target"}], read-only (local backend)
    network: str | None = None              # none (default) | registry | public (docker backend)


class SandboxIdBody(_Req):
    sandbox_id: str


class ExecuteRequest(_Req):
    sandbox_id: str
    command: str | list[str]
    timeout: float | None = None
    shell: bool = False
    check: bool = False
    env: dict[str, str] | None = None
    cwd: str | None = None
    # extensions
    max_output: int = 1_000_000             # bytes kept per stream
    merge_output: bool = False              # stderr interleaved into stdout


class CreateSessionRequest(_Req):
    sandbox_id: str
    session: str = "default"
    startup_source: list[str] = []
    env_enable: bool = False
    env: dict[str, str] | None = None


class RunInSessionRequest(_Req):
    sandbox_id: str
    session: str = "default"
    command: str
    timeout: float | None = None
    check: Literal["silent", "raise", "ignore"] = "raise"
    is_interactive_command: bool = False
    max_output: int = 1_000_000


class CloseSessionRequest(_Req):
    sandbox_id: str
    session: str = "default"


class ReadFileRequest(_Req):
    sandbox_id: str
    path: str
    encoding: str | None = None             # extension: "base64" returns the raw bytes base64-encoded
    errors: str | None = None


class WriteFileRequest(_Req):
    sandbox_id: str
    path: str
    content: str
    encoding: str | None = None             # extension: "base64"
    mode: int | None = Field(default=None, ge=0, le=0o7777)


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat() if ts else None


def status_result(rec: SandboxRecord) -> dict[str, Any]:
    alive = rec.state == "running"
    stage = {"status": "success" if rec.state != "failed" else "failed", "message": rec.end_reason or "ok"}
    return {"sandbox_id": rec.sandbox_id, "state": "running" if alive else "stopped", "is_alive": alive,
            "status": {"image_pull": stage, "docker_run": stage}, "port_mapping": {},
            "host_name": rec.info.get("host_name"), "host_ip": rec.info.get("host_ip"), "image": rec.image,
            "cpus": rec.limits.get("cpus"), "memory": f"{rec.limits.get('memory_mb')}m",
            "disk": f"{rec.limits.get('disk_mb')}m", "user_id": rec.user_id, "experiment_id": rec.experiment_id,
            "namespace": rec.namespace, "create_time": _iso(rec.created_at), "stop_time": _iso(rec.ended_at),
            # extensions
            "backend": rec.backend, "base_dir": rec.base_dir, "limits": rec.limits, "end_reason": rec.end_reason,
            "lease_expires_at": rec.lease_expires_at, "ttl_expires_at": rec.ttl_expires_at}


@dataclass(frozen=True)
class AdminLimits:
    """The admin's request limits (admin.yaml ``admin``)."""
    max_upload: int          # bytes: write_file content, upload files
    max_read: int            # bytes: read_file
    default_timeout: float   # s: execute / run_in_session without a timeout
    tar: TarLimits

    @classmethod
    def of(cls, cfg: dict[str, Any]) -> AdminLimits:
        admin_cfg = cfg.get("admin", {}) or {}
        return cls(max_upload=int(admin_cfg.get("max_upload_mb", 64)) * 1024 * 1024,
                   max_read=int(admin_cfg.get("max_read_mb", 16)) * 1024 * 1024,
                   default_timeout=float(admin_cfg.get("default_timeout_s", 1200)),
                   tar=TarLimits(int(admin_cfg.get("max_tar_members", 20000)),
                                 int(admin_cfg.get("max_tar_unpacked_mb", 1024)) * 1024 * 1024))


def build_app(manager: SandboxManager, cfg: dict[str, Any]) -> FastAPI:
    """The admin API: /health, and under PREFIX (key checked) one router per concern: sandbox lifecycle,
    commands and sessions, files."""
    limits = AdminLimits.of(cfg)
    check_key = make_key_check(cfg["auth"]["key"], cfg["auth"].get("header", "X-Key"))

    app = FastAPI(title="local sandbox manager (ROCK sandbox API subset)")
    app.state.manager = manager
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=limits.max_upload + 1024 * 1024)  # + multipart/JSON overhead

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return ok({"backend": manager.backend.name, "sandboxes": len(manager.records), "pool": manager.pool_size(),
                   "limits": manager.backend.limits_info(), "stats": manager.backend.stats()})

    for router in (lifecycle_routes(manager, cfg), command_routes(manager, limits), file_routes(manager, limits)):
        app.include_router(router, prefix=PREFIX, dependencies=[Depends(check_key)])
    return app


# --- sandbox lifecycle: start, status, stop/delete; extensions heartbeat, reset, list ---------------------


def start_limits(req: StartRequest, cfg: dict[str, Any]) -> dict[str, Any]:
    """The sandbox's limits: ``limits`` as given, else ROCK's memory/cpus/disk fields, clamped by the config."""
    limits = dict(req.limits or {})
    if req.memory and "memory_mb" not in limits:
        limits["memory_mb"] = parse_size_mb(req.memory)
    cpus = req.limit_cpus or req.cpus
    if cpus and "cpus" not in limits:
        limits["cpus"] = cpus
    if req.disk and "disk_mb" not in limits:
        limits["disk_mb"] = parse_size_mb(req.disk)
    return sbconfig.clamp_limits(cfg, {k: parse_size_mb(v) if k.endswith("_mb") else v for k, v in limits.items()})


def lifecycle_routes(manager: SandboxManager, cfg: dict[str, Any]) -> APIRouter:
    api = APIRouter()

    async def _start(req: StartRequest, request: Request) -> dict[str, Any]:
        lease = req.lease_s or (req.auto_clear_time_minutes * 60 if req.auto_clear_time_minutes else None)
        h = request.headers
        rec = await manager.create(image=req.image, base_dir=req.base_dir, limits=start_limits(req, cfg),
                                   lease_s=lease, ttl_s=req.ttl_s, sandbox_id=req.sandbox_id, env=req.env,
                                   binds=req.binds, network=req.network,
                                   tags={"user_id": h.get("x-user-id"), "experiment_id": h.get("x-experiment-id"),
                                         "namespace": h.get("x-namespace")})
        return ok({"sandbox_id": rec.sandbox_id, "host_name": rec.info.get("host_name"),
                   "host_ip": rec.info.get("host_ip"), "cpus": rec.limits["cpus"],
                   "memory": f"{rec.limits['memory_mb']}m", "disk": f"{rec.limits['disk_mb']}m"})

    @api.post("/start")
    async def start(req: StartRequest, request: Request):
        return await _start(req, request)

    @api.post("/start_async")
    async def start_async(req: StartRequest, request: Request):
        return await _start(req, request)   # creation takes milliseconds: ready when this returns

    @api.get("/get_status")
    async def get_status(sandbox_id: str, include_all_states: bool = False):
        return ok(status_result(manager.get(sandbox_id)))

    @api.get("/is_alive")
    async def is_alive(sandbox_id: str):
        rec = manager.get(sandbox_id)
        return ok({"is_alive": rec.state == "running", "message": rec.end_reason or ""})

    @api.post("/stop")
    async def stop(sandbox_id: Annotated[str, Body(embed=True)]):
        await manager.close(sandbox_id)
        return ok(f"{sandbox_id} stopped")

    @api.post("/delete")
    async def delete(sandbox_id: Annotated[str, Body(embed=True)]):
        await manager.close(sandbox_id)
        return ok(f"{sandbox_id} deleted")

    # extensions
    @api.post("/heartbeat")
    async def heartbeat(req: SandboxIdBody):
        rec = await manager.heartbeat(req.sandbox_id)
        return ok({"lease_expires_at": rec.lease_expires_at, "ttl_expires_at": rec.ttl_expires_at})

    @api.post("/reset")
    async def reset(req: SandboxIdBody):
        t = time.monotonic()
        await manager.reset(req.sandbox_id)
        return ok({"reset": True, "duration_s": round(time.monotonic() - t, 4)})

    @api.get("/list")
    async def list_sandboxes():
        return ok([status_result(r) for r in manager.records.values()])

    return api


# --- commands: execute, and bash sessions ------------------------------------------------------------------


def exec_request(req: ExecuteRequest, default_timeout: float) -> ExecRequest:
    """An /execute body -> the backend's request (argv as given, or a string run by bash)."""
    if isinstance(req.command, list):
        if not req.command:
            raise BadRequest("command must not be empty")
        argv = [str(c) for c in req.command]
    else:
        argv = bash(req.command)
    timeout = default_timeout if req.timeout is None else req.timeout
    cwd = sandbox_path(req.cwd) if req.cwd else "/workspace"
    return ExecRequest(argv=argv, timeout=timeout, max_output=req.max_output, cwd=cwd, env=req.env or {},
                       merge_stderr=req.merge_output)


def command_routes(manager: SandboxManager, limits: AdminLimits) -> APIRouter:
    api = APIRouter()

    @api.post("/execute")
    async def execute(req: ExecuteRequest):
        out = await manager.exec(req.sandbox_id, exec_request(req, limits.default_timeout))
        result = {"stdout": out.stdout.decode(errors="replace"), "stderr": out.stderr.decode(errors="replace"),
                  "exit_code": out.exit_code, "timed_out": out.timed_out, "truncated": out.truncated,
                  "duration_s": round(out.duration_s, 4)}
        if req.check and out.exit_code != 0:
            return failed(f"command failed with exit code {out.exit_code}", "execute command failed", result)
        return ok(result)

    @api.post("/create_session")
    async def create_session(req: CreateSessionRequest):
        output = await manager.create_session(req.sandbox_id, req.session, req.env, req.startup_source)
        return ok({"output": output, "session_type": "bash"})

    @api.post("/run_in_session")
    async def run_in_session(req: RunInSessionRequest):
        if req.is_interactive_command:
            raise BadRequest("interactive commands are not supported")
        timeout = limits.default_timeout if req.timeout is None else req.timeout
        out = await manager.run_in_session(req.sandbox_id, req.session, req.command, timeout, req.max_output)
        result = {"session_type": "bash", "output": out.output, "exit_code": out.exit_code,
                  "failure_reason": out.failure_reason, "expect_string": "", "timed_out": out.timed_out,
                  "truncated": out.truncated}
        if out.exit_code == -1:
            return failed(out.failure_reason or "command failed", "run in session failed", result)
        if req.check == "raise" and out.exit_code != 0:
            return failed(f"Command {req.command!r} failed with exit code {out.exit_code}. Here is the output:\n"
                          f"{out.output!r}", "run in session failed", result)
        return ok(result)

    @api.post("/close_session")
    async def close_session(req: CloseSessionRequest):
        await manager.close_session(req.sandbox_id, req.session)
        return ok({"session_type": "bash"})

    return api


# --- files: read_file, write_file, upload (a file or a tar archive) ----------------------------------------


def read_result(req: ReadFileRequest, data: bytes) -> dict[str, Any]:
    """A file's bytes as /read_file answers them: base64, or text in the asked encoding."""
    if req.encoding == "base64":
        return ok({"content": base64.b64encode(data).decode(), "encoding": "base64"})
    try:
        text = data.decode(req.encoding or "utf-8", errors=req.errors or "replace")
    except (UnicodeError, ValueError) as e:
        raise BadRequest(f"file is not valid {req.encoding or 'utf-8'} (encoding): {str(e)[:200]}") from e
    return ok({"content": text.encode("utf-8", errors="replace").decode()})


def write_data(req: WriteFileRequest, max_upload: int) -> bytes:
    """A /write_file body's content as bytes (base64 or utf-8), at most ``max_upload`` of them."""
    if req.encoding not in (None, "base64", "utf-8", "utf8"):
        raise BadRequest(f"encoding must be 'base64' or 'utf-8', got {req.encoding!r}")
    try:
        data = base64.b64decode(req.content, validate=True) if req.encoding == "base64" else req.content.encode()
    except (binascii.Error, ValueError) as e:
        raise BadRequest(f"content is not valid base64: {e}") from e
    if len(data) > max_upload:
        raise PayloadTooLarge(f"content larger than {max_upload} bytes")
    return data


def file_routes(manager: SandboxManager, limits: AdminLimits) -> APIRouter:
    api = APIRouter()
    tar_checks = asyncio.Semaphore(2)   # each runs in a thread; at most two at a time

    @api.post("/read_file")
    async def read_file(req: ReadFileRequest):
        if req.encoding not in (None, "base64"):
            _text_encoding(req.encoding)
        if req.errors is not None and req.errors not in DECODE_ERRORS:
            raise BadRequest(f"errors must be one of {', '.join(DECODE_ERRORS)}, got {req.errors[:40]!r}")
        return read_result(req, await manager.read_file(req.sandbox_id, sandbox_path(req.path), limits.max_read))

    @api.post("/write_file")
    async def write_file(req: WriteFileRequest):
        data = write_data(req, limits.max_upload)
        path = sandbox_path(req.path)
        await manager.write_file(req.sandbox_id, path, data, req.mode)
        return ok({"success": True, "message": f"wrote {len(data)} bytes to {path}"})

    @api.post("/upload")
    async def upload(file: Annotated[UploadFile, File()], target_path: Annotated[str, Form()],
                     sandbox_id: Annotated[str, Form()], extract: Annotated[str | None, Form()] = None):
        data = await file.read(limits.max_upload + 1)
        if len(data) > limits.max_upload:
            raise PayloadTooLarge(f"upload larger than {limits.max_upload} bytes")
        target = sandbox_path(target_path)
        if extract == "tar":
            async with tar_checks:
                await asyncio.to_thread(check_tar, data, limits.tar)
            await manager.extract_tar(sandbox_id, target, data)
        elif extract:
            raise BadRequest(f"unknown extract mode {extract!r} (only 'tar')")
        else:
            await manager.write_file(sandbox_id, target, data)
        return ok({"success": True, "message": f"uploaded to {target}", "file_name": file.filename or ""})

    return api


DECODE_ERRORS = ("strict", "replace", "ignore", "backslashreplace", "surrogateescape")


def _text_encoding(name: str) -> None:
    """A text encoding (bytes -> str) Python knows; 400 otherwise. Codecs that exist but are not text
    encodings (rot13, hex, zlib, bz2, uu, base64_codec) answer LookupError to ``bytes.decode``."""
    try:
        # the flag bytes.decode itself checks (b"".decode skips the look-up, so decoding nothing proves nothing)
        text = getattr(codecs.lookup(name), "_is_text_encoding", True)
    except (LookupError, ValueError) as e:
        text, why = False, str(e)[:120]
    else:
        why = "not a text encoding"
    if not text:
        raise BadRequest(f"encoding {name[:40]!r}: {why}; use a text encoding such as 'utf-8' or 'latin-1', or "
                         "'base64' for the raw bytes")


@dataclass(frozen=True)
class TarLimits:
    members: int          # admin.max_tar_members
    unpacked_bytes: int   # admin.max_tar_unpacked_mb: sum of member sizes


def check_tar(data: bytes, limits: TarLimits) -> None:
    """Reject archives with absolute or '..' member names, device nodes, too many members or
    too many unpacked bytes before extraction (extraction itself runs inside the sandbox, so
    this is for clear errors and bounded work, not safety). Streams the members (a thread, not
    the event loop; member headers are dropped as they are read) and stops at the first limit."""
    count = size = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|*") as tf:
            for m in tf:
                count += 1
                size += max(m.size, 0)
                if count > limits.members:
                    raise PayloadTooLarge(f"tar archive has more than {limits.members} members")
                if size > limits.unpacked_bytes:
                    raise PayloadTooLarge(f"tar archive unpacks to more than {limits.unpacked_bytes} bytes")
                if m.name.startswith("/") or ".." in m.name.split("/"):
                    raise BadRequest(f"tar member {m.name!r}: absolute or '..' paths are not allowed")
                if m.isdev():
                    raise BadRequest(f"tar member {m.name!r}: device nodes are not allowed")
                tf.members.clear()
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        raise BadRequest(f"not a tar archive: {e}") from e
