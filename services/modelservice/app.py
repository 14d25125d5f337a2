"""The HTTP API (FastAPI), served on TCP (127.0.0.1, key required) and/or a Unix socket.

OpenAI-compatible (per session, no key needed on the Unix socket: the session id is the capability):
    POST /s/{session}/v1/chat/completions      GET /s/{session}/v1/models
Same with the key, session from the ``X-Session-Id`` header (default ``default``, created on use; such a
session belongs to the key holders: on the Unix socket it is unknown, 404):
    POST /v1/chat/completions                  GET /v1/models
Sessions (key required on every transport):
    POST /sessions {session_id?, task_id?, metadata?, replay?}  (replay: scripted replies, a test double)
    GET /sessions   GET /sessions/{id}
    DELETE /sessions/{id}   (returns and, with ``trajectories_dir``, saves the record)
    GET /health  (open)
Key: ``Authorization: Bearer <key>`` or ``X-Key: <key>``.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect

from services.common.boundary import ErrorBoundary
from services.common.limits import BodySizeLimit
from services.common.logs import PER_REQUEST, RateLimitFilter
from services.common.renderers import BadRequest
from services.common.text import reject_constant, text_problem

from .budget import BudgetExceeded
from .sessions import CallResult, Recorder, Session, new_session_id, valid_session_id

log = logging.getLogger(__name__)


def _err(status: int, message: str, type_: str = "invalid_request_error", code: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "param": None, "code": code}}, status_code=status)


class ModelServiceState:
    def __init__(self, recorder: Recorder, model_name: str, key: str | None, trajectories_dir: Path | None = None,
                 max_sessions: int = 1024, max_body_bytes: int = 8 * 1024 * 1024):
        self.recorder, self.model_name, self.key = recorder, model_name, key
        self.trajectories_dir = trajectories_dir
        self.max_sessions = max_sessions
        self.max_body_bytes = max_body_bytes   # larger request bodies get 413 before they are read
        self.sessions: dict[str, Session] = {}
        self.tcp_only: set[str] = set()   # made implicitly by /v1/chat/completions: not reachable from the socket

    def create(self, session_id: str | None = None, task_id: str = "", metadata: dict | None = None,
               replay: list[str] | None = None, policy: Any = None) -> Session:
        sid = session_id or new_session_id()
        if not valid_session_id(sid):
            raise BadRequest("session_id: 1-128 characters of [A-Za-z0-9_-]")
        if sid in self.sessions:
            raise KeyError(sid)
        if len(self.sessions) >= self.max_sessions:
            raise BadRequest(f"too many open sessions ({self.max_sessions}); close some first")
        if replay is not None and (not isinstance(replay, list) or not replay
                                   or not all(isinstance(x, str) for x in replay)):
            raise BadRequest("replay: a non-empty list of reply strings")
        s = Session(id=sid, task_id=task_id, metadata=dict(metadata or {}), replay=replay, policy=policy)
        s.traj.task_id = task_id
        self.sessions[sid] = s
        log.info("session %s created (task %s)", sid, task_id or "-")
        return s

    def close(self, sid: str) -> dict[str, Any]:
        s = self.sessions.pop(sid)
        self.tcp_only.discard(sid)
        s.closed = True
        rec = s.record()
        if self.trajectories_dir:
            d = self.trajectories_dir / sid
            s.traj.save(d)
            (d / "session.json").write_text(json.dumps({k: v for k, v in rec.items() if k != "trajectory"}))
        st = rec["session"]
        log.info("session %s closed: %d turns, %d segments (%d breaks), %d sampled tokens", sid, st["turns"],
                 st["segments"], st["segment_breaks"], st["tokens"]["sampled"])
        return rec

    def close_all(self) -> None:
        for sid in list(self.sessions):
            try:
                self.close(sid)
            except Exception:  # noqa: BLE001
                log.exception("saving session %s at shutdown failed", sid)


def _route(path: str) -> str:
    """A path for a log line: the session id (a capability) left out."""
    return "/s/<session>/" + path.split("/", 3)[3] if path.startswith("/s/") and path.count("/") >= 3 else path[:200]


def _is_tcp(request: Request) -> bool:
    server = request.scope.get("server")
    return not (isinstance(server, (tuple, list)) and len(server) == 2 and server[1] is None)


def _key_ok(request: Request, key: str | None) -> bool:
    if not key:
        return True
    h = request.headers
    given = h.get("x-key") or ""
    auth = h.get("authorization") or ""
    if auth.lower().startswith("bearer "):
        given = given or auth[7:].strip()
    return secrets.compare_digest(given.encode(), key.encode())


def completion_json(res: CallResult, model: str, want_logprobs: bool, tokens_text: list[str] | None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "message": res.message, "finish_reason": res.finish_reason, "logprobs": None}
    if want_logprobs and tokens_text is not None:
        choice["logprobs"] = {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                                          for t, lp in zip(tokens_text, res.logprobs)]}
    return {"id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [choice],
            "usage": {"prompt_tokens": res.prompt_tokens, "completion_tokens": res.completion_tokens,
                      "total_tokens": res.prompt_tokens + res.completion_tokens},
            "system_fingerprint": None}


def stream_chunks(full: dict[str, Any], include_usage: bool):
    """SSE events of an already computed completion: role, content, each tool call, finish."""
    base = {"id": full["id"], "object": "chat.completion.chunk", "created": full["created"], "model": full["model"]}
    msg = full["choices"][0]["message"]

    def ev(delta: dict[str, Any], finish: str | None = None, logprobs=None) -> str:
        d = dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}])
        return f"data: {json.dumps(d, ensure_ascii=False)}\n\n"

    yield ev({"role": "assistant", "content": ""})
    if msg.get("content"):
        yield ev({"content": msg["content"]}, logprobs=full["choices"][0].get("logprobs"))
    for i, c in enumerate(msg.get("tool_calls") or []):
        yield ev({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                  "function": {"name": c["function"]["name"], "arguments": ""}}]})
        yield ev({"tool_calls": [{"index": i, "function": {"arguments": c["function"]["arguments"]}}]})
    yield ev({}, finish=full["choices"][0]["finish_reason"])
    if include_usage:
        yield f"data: {json.dumps(dict(base, choices=[], usage=full['usage']))}\n\n"
    yield "data: [DONE]\n\n"


async def _json_body(request: Request) -> Any:
    """The parsed body, or a 400 for anything that is not plain JSON text (deep nesting, NaN,
    lone surrogates included: they would fail later, deep inside, as a 500)."""
    raw = await request.body()
    try:
        body = json.loads(raw, parse_constant=reject_constant)
    except (ValueError, RecursionError) as e:
        return _err(400, f"body is not valid JSON: {str(e)[:200]}")
    bad = text_problem(body, allow_nul=True)
    return _err(400, bad) if bad else body


def _bad_params(body: dict[str, Any]) -> str | None:
    """Sampling parameters of the wrong type or range (they would fail in the sampler)."""
    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    for name, lo, hi in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0)):
        v = body.get(name)
        if v is not None and not (number(v) and lo <= v <= hi):
            return f"{name} must be a number in [{lo}, {hi}], got {v!r}"
    for name in ("max_tokens", "max_completion_tokens", "seed"):
        v = body.get(name)
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and (name == "seed" or v >= 1)):
            return f"{name} must be {'an integer' if name == 'seed' else 'a positive integer'}, got {v!r}"
    if body.get("stream_options") is not None and not isinstance(body["stream_options"], dict):
        return "stream_options must be an object"
    return None


async def answer(state: ModelServiceState, s: Session, body: Any) -> tuple[int, dict[str, Any]]:
    """One chat completion request of session ``s`` (a parsed JSON body): (HTTP status, the
    ``chat.completion`` or the OpenAI-style error). Shared by the HTTP API and transports that carry
    the request another way (rock_pull.py: ROCK's ModelService log)."""
    def err(status: int, message: str, type_: str = "invalid_request_error", code: str | None = None):
        return status, {"error": {"message": message, "type": type_, "param": None, "code": code}}

    if not isinstance(body, dict):
        return err(400, "body must be a JSON object")
    if body.get("n") not in (None, 1):
        return err(400, "only n=1 is supported", code="unsupported_parameter")
    bad = _bad_params(body)
    if bad:
        return err(400, bad)
    try:
        res = await state.recorder.complete(s, body)
    except BadRequest as e:
        return err(400, str(e))
    except BudgetExceeded as e:
        log.info("session %s: %s", s.id, e, extra=PER_REQUEST)
        return err(400, str(e), code=e.code)
    except Exception as e:  # noqa: BLE001  (sampler/backend failure)
        log.exception("session %s: completion failed", s.id, extra=PER_REQUEST)
        return err(502, f"sampling failed: {type(e).__name__}: {e}", "server_error", "backend_error")
    want_lp = bool(body.get("logprobs"))
    toks = [state.recorder.r.decode([t]) for t in res.sampled] if want_lp else None
    return 200, completion_json(res, str(body.get("model") or state.model_name), want_lp, toks)


def build_app(state: ModelServiceState) -> FastAPI:
    """The API: its middleware (body cap, error boundary, key), /health, the OpenAI routes and the session routes."""
    app = FastAPI(title="local-tinker ModelService", docs_url=None, redoc_url=None)
    app.state.ms = state
    install_middleware(app, state)

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": state.model_name, "sessions": len(state.sessions),
                "log_lines_dropped": RateLimitFilter.dropped_total}

    app.include_router(openai_routes(state))
    app.include_router(session_routes(state))
    return app


def install_middleware(app: FastAPI, state: ModelServiceState) -> None:
    """In this order (the last added runs first): the body cap (413), a client gone mid-request (499), the error
    boundary (an unexpected exception: one 500, logged, rate-limited, on a connection that stays usable), and the
    key check (open: /health, and /s/... on the Unix socket, where the session id is the capability)."""
    app.add_middleware(BodySizeLimit, max_bytes=state.max_body_bytes, error_body=lambda n: {"error": {
        "message": f"request body larger than {n} bytes", "type": "invalid_request_error", "param": None,
        "code": "request_too_large"}})

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect):
        log.info("%s %s: client disconnected before the request was complete", request.method,
                 _route(request.url.path), extra=PER_REQUEST)
        return Response(status_code=499)

    app.add_middleware(ErrorBoundary, logger=log, error_body=lambda exc: {"error": {
        "message": f"internal error: {type(exc).__name__}", "type": "server_error", "param": None, "code": None}})

    @app.middleware("http")
    async def auth(request: Request, call_next):
        path = request.url.path
        open_path = path == "/health" or (path.startswith("/s/") and not _is_tcp(request))
        if not open_path and not _key_ok(request, state.key):
            return _err(401, "invalid or missing key (Authorization: Bearer <key> or X-Key)", "authentication_error",
                        "invalid_api_key")
        return await call_next(request)


def _unknown_session(sid: str) -> JSONResponse:
    return _err(404, f"unknown session {sid}", code="session_not_found")


def openai_routes(state: ModelServiceState) -> APIRouter:
    """/v1/models and /v1/chat/completions, per session (/s/{sid}/v1/...) and for the key holders (X-Session-Id)."""
    api = APIRouter()

    def reachable(sid: str, request: Request) -> Session | None:
        """Session ``sid`` if this caller may use it: a session the TCP API made implicitly (``/v1/chat/completions``,
        ``X-Session-Id``, default ``default``) belongs to the key holders and is unknown on the Unix socket."""
        s = state.sessions.get(sid)
        if s is None or (sid in state.tcp_only and not _is_tcp(request)):
            return None
        return s

    def models_json():
        return {"object": "list", "data": [{"id": state.model_name, "object": "model", "created": 0,
                                            "owned_by": "local-tinker"}]}

    @api.get("/v1/models")
    async def models():
        return models_json()

    @api.get("/s/{sid}/v1/models")
    async def session_models(sid: str, request: Request):
        if reachable(sid, request) is None:
            return _unknown_session(sid)
        return models_json()

    @api.post("/s/{sid}/v1/chat/completions")
    async def session_chat(sid: str, request: Request):
        s = reachable(sid, request)
        if s is None:
            return _unknown_session(sid)
        return await chat(state, s, request)

    @api.post("/v1/chat/completions")
    async def default_chat(request: Request):
        sid = request.headers.get("x-session-id") or "default"
        s = state.sessions.get(sid)
        if s is None:
            try:
                s = state.create(sid)
            except (BadRequest, KeyError) as e:
                return _err(400, str(e))
            state.tcp_only.add(sid)
        return await chat(state, s, request)

    return api


async def chat(state: ModelServiceState, s: Session, request: Request):
    """One chat completion request over HTTP: the completion, as JSON or as an SSE stream."""
    body = await _json_body(request)
    if isinstance(body, JSONResponse):
        return body
    status, out = await answer(state, s, body)
    if status != 200:
        return JSONResponse(out, status_code=status)
    if body.get("stream"):
        inc = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(stream_chunks(out, inc), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    return out


def session_routes(state: ModelServiceState) -> APIRouter:
    """/sessions: create, list, read, and close (the record; saved with ``trajectories_dir``)."""
    api = APIRouter()

    @api.post("/sessions")
    async def create_session(request: Request):
        body = await _json_body(request) if (await request.body()) else {}
        if isinstance(body, JSONResponse):
            return body
        if not isinstance(body, dict):
            return _err(400, "body must be a JSON object")
        try:
            s = state.create(body.get("session_id"), str(body.get("task_id") or ""), body.get("metadata"),
                             body.get("replay"))
        except BadRequest as e:
            return _err(400, str(e))
        except KeyError:
            return _err(409, f"session {body.get('session_id')} exists")
        return {"session_id": s.id, "base_path": f"/s/{s.id}/v1"}

    @api.get("/sessions")
    async def list_sessions():
        return {"sessions": [s.stats() for s in state.sessions.values()]}

    async def under_lock(sid: str, use: Callable[[Session], Any]):
        """``use(session)`` under the session's lock (no call of it in flight), or a 404."""
        s = state.sessions.get(sid)
        if s is None:
            return _unknown_session(sid)
        async with s.lock:
            return use(s)

    @api.get("/sessions/{sid}")
    async def get_session(sid: str):
        return await under_lock(sid, lambda s: s.record())

    @api.delete("/sessions/{sid}")
    async def delete_session(sid: str):
        return await under_lock(sid, lambda s: state.close(s.id))

    return api
