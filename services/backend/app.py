"""HTTP API of the Tinker-compatible backend (tinker SDK 0.38 contract).

Synchronous endpoints validate their input and answer 4xx with a JSON ``detail`` for bad
input. Work goes to the engine as a future; ``retrieve_future`` long-polls for it and returns
protobuf for forward/backward and sample results, JSON for everything else, and HTTP 200
``{"error", "category"}`` for a failed job. See ../../docs/backend.md for the full contract.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import shutil
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from . import codec, external_routes, lifecycle, sampler, tenants, validation
from .engine import Engine, Job
from .errors import BadRequest, NotFound, TinkerError
from .runtime import Runtime, TrainConfig, validate_adam, validate_fwdbwd
from services.common.limits import BodySizeLimit

log = logging.getLogger("backend.api")
PROTO = "application/x-protobuf"
JSON = "application/json"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
CLIENT_CONFIG = {
    "pjwt_auth_enabled": False, "credential_default_source": "api_key", "use_pyqwest_transport": False,
    "parallel_fwdbwd_chunks": False, "proto_compress_fwdbwd": False, "fwdbwd_max_chunk_len": 1024,
    "fwdbwd_max_chunk_bytes_count": 5_000_000, "sample_use_retrieve_futures": False,
    "custom_loss_server_side": False, "sample_join_sampling_session": False, "sample_no_retries": False,
    "sample_enable_stuck_detection": True, "sample_max_concurrent_requests": 2000,
}
MAX_NUM_SAMPLES = 1024
CHECKPOINT_TYPES = {"weights": "training", "sampler_weights": "sampler", "external_weights": "external"}  # dir -> SDK type


def _json(obj: Any, status: int = 200) -> Response:
    return Response(json.dumps(obj).encode(), status_code=status, media_type=JSON)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


def _field(body: dict, key: str, typ: type | tuple, required: bool = True, default: Any = None) -> Any:
    if key not in body or body[key] is None:
        if required:
            raise BadRequest(f"missing field {key!r}")
        return default
    v = body[key]
    if typ is int and isinstance(v, bool) or not isinstance(v, typ):
        raise BadRequest(f"field {key!r} has the wrong type ({type(v).__name__})")
    return v


class Backend:
    """Holds the store, the engine and the per-request wake-up events."""

    def __init__(self, cfg: dict[str, Any], store, engine: Engine, checkpoint_dir: Path):
        self.cfg = cfg
        self.store = store
        self.engine = engine
        self.checkpoint_dir = checkpoint_dir
        self.tenants = tenants.Tenants(checkpoint_dir.parent / "owners.sqlite3", tenants.parse_keys(cfg.get("api_keys")))
        self.long_poll_s = float(cfg.get("long_poll_s", 25))
        self.default_max_tokens = int(cfg.get("default_max_tokens", 256))
        engine.sample_round_tokens = int(cfg.get("sample_round_tokens", engine.sample_round_tokens))
        self.limits = validation.Limits.from_config(cfg)   # body size, LoRA rank, tokens per request
        self.events: dict[str, asyncio.Event] = {}
        self.loop: asyncio.AbstractEventLoop | None = None

    # ---- engine callbacks (engine thread)
    def on_done(self, request_id: str) -> None:
        ev = self.events.get(request_id)
        if ev is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(ev.set)

    def submit(self, job: Job) -> None:
        self.events[job.request_id] = asyncio.Event()
        self.engine.submit(job)

    @property
    def runtime(self) -> Runtime:
        return self.engine.runtime

    # ---- helpers
    def model_info(self, model_id: str) -> tuple[dict, Any]:
        row = self.store.model(model_id)
        if row is None or not self.tenants.sees_id(model_id):
            raise NotFound(f"unknown model_id {model_id!r}")
        if model_id not in self.runtime.trainables:
            raise NotFound(f"model {model_id!r} is not loaded (the backend restarted or its session ended): create a "
                           "training client from a saved checkpoint to continue")
        return row, self.runtime.base(row["base_model"]).info

    def parse_tinker_path(self, path: str, kinds: tuple[str, ...] = ("weights", "sampler_weights")) -> tuple[str, str, str, Path]:
        if not isinstance(path, str) or not path.startswith("tinker://"):
            raise BadRequest(f"not a tinker:// path: {path!r}")
        parts = path[len("tinker://"):].split("/")
        if len(parts) != 3 or parts[1] not in kinds or not NAME_RE.match(parts[2]) or ".." in parts[0] or not parts[0]:
            raise BadRequest(f"malformed checkpoint path {path!r}: expected tinker://<model_id>/{'|'.join(kinds)}/<name>")
        model_id, kind, name = parts
        self.tenants.check_id(model_id, "checkpoint owner")
        return model_id, kind, name, self.checkpoint_dir / model_id / kind / name

    def dedupe(self, model_id: str, seq_id: int | None, body: bytes) -> str | None:
        if seq_id is None:
            return None
        prev = self.store.find_duplicate(model_id, seq_id)
        if prev is None:
            return None
        if prev["req_hash"] != hashlib.sha256(body).hexdigest():
            raise BadRequest(f"seq_id {seq_id} was already used for model {model_id} with a different request")
        return str(prev["request_id"])

    def new_future(self, kind: str, model_id: str | None = None, seq_id: int | None = None, body: bytes = b"") -> str:
        rid = self.store.new_future(kind, model_id, seq_id, hashlib.sha256(body).hexdigest() if seq_id is not None else None)
        self.tenants.claim("future", rid)
        return rid

    def session_row(self, session_id: str) -> dict:
        """The caller's session (404 if unknown or another tenant's)."""
        row = self.store.session(session_id)
        if row is None or not self.tenants.sees_id(session_id):
            raise NotFound(f"unknown session {session_id!r}")
        return row

    def checkpoint_entry(self, model_id: str, kind: str, d: Path) -> dict[str, Any] | None:
        """The SDK's Checkpoint for directory ``d``; None if absent (or past its TTL, which deletes it)."""
        mp = d / "meta.json"
        if not mp.exists():
            return None
        meta = json.loads(mp.read_text())
        if meta.get("expires_at") and meta["expires_at"] < time.time():
            log.info("checkpoint %s/%s of %s expired: deleting it", kind, d.name, model_id)
            shutil.rmtree(d, ignore_errors=True)
            return None
        size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        return {"checkpoint_id": f"{kind}/{d.name}", "checkpoint_type": CHECKPOINT_TYPES[kind],
                "time": _iso(meta.get("created", 0)), "tinker_path": f"tinker://{model_id}/{kind}/{d.name}",
                "size_bytes": size, "public": False, "user_metadata": validation.metadata_of(meta.get("user_metadata")),
                "expires_at": _iso(meta["expires_at"]) if meta.get("expires_at") else None}

    def list_checkpoints(self, model_id: str) -> list[dict[str, Any]]:
        out = []
        for kind in CHECKPOINT_TYPES:
            root = self.checkpoint_dir / model_id / kind
            if root.is_dir():
                for d in sorted(root.iterdir()):
                    if d.is_dir() and not d.name.startswith("."):
                        e = self.checkpoint_entry(model_id, kind, d)
                        if e:
                            out.append(e)
        out.sort(key=lambda e: e["time"])
        return out

    def training_run(self, row: dict) -> dict[str, Any]:
        cks = self.list_checkpoints(row["model_id"])
        tc = row["train_config"]
        last = [c for c in cks if c["checkpoint_type"] == "training"]
        last_s = [c for c in cks if c["checkpoint_type"] == "sampler"]
        return {"training_run_id": row["model_id"], "base_model": row["base_model"], "model_owner": "local",
                "is_lora": tc["rank"] > 0, "corrupted": False, "lora_rank": tc["rank"] if tc["rank"] > 0 else None,
                "last_request_time": _iso(row["last_request"] or row["created"]),
                "last_checkpoint": last[-1] if last else None, "last_sampler_checkpoint": last_s[-1] if last_s else None,
                "user_metadata": validation.metadata_of(row["user_metadata"])}


def create_app(backend: Backend) -> FastAPI:
    app = FastAPI(title="local-tinker backend", docs_url=None, redoc_url=None)
    B = backend
    app.add_middleware(BodySizeLimit, max_bytes=B.limits.max_body_bytes,
                       error_body=lambda n: {"detail": f"request body larger than {n} bytes (backend.max_body_mb)"})

    @app.middleware("http")
    async def auth(request: Request, call_next):
        caller = tenants.ADMIN
        if B.tenants.keys and request.url.path.startswith("/api/") and request.url.path != "/api/v1/healthz":
            caller = B.tenants.caller(request.headers.get("x-api-key"))
            if caller is None:
                return _json({"detail": "invalid or missing API key (send it in the X-API-Key header)"}, 401)
        token = tenants.current.set(caller)
        try:
            return await call_next(request)
        finally:
            tenants.current.reset(token)

    @app.exception_handler(TinkerError)
    async def tinker_error(_: Request, e: TinkerError):
        return _json({"detail": e.message}, e.status_code if e.status_code < 500 else 400)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, e: RequestValidationError):
        return _json({"detail": str(e.errors())[:2000]}, 422)

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, e: Exception):
        log.exception("%s %s failed", request.method, request.url.path)
        return _json({"detail": f"internal error: {type(e).__name__}"}, 500)

    async def body_json(request: Request) -> dict:
        data = validation.parse_json(await request.body() or b"{}")
        if not isinstance(data, dict):
            raise BadRequest("request body must be a JSON object")
        return data

    # exports, download URLs, TTLs and clean 400s for unserved SDK routes: registered first (external_routes.py)
    external_routes.add_routes(app, B)

    # ------------------------------------------------------------------ session level
    @app.on_event("startup")
    async def _startup():
        B.loop = asyncio.get_running_loop()
        B.reaper = B.loop.create_task(lifecycle.reaper(B))  # session expiry, old futures (lifecycle.py)

    @app.get("/api/v1/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.post("/api/v1/client/config")
    async def client_config():
        return CLIENT_CONFIG

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config():
        return {"refresh_interval_sec": 300, "sample_cancel_enabled": False, "sample_cancel_max_batch_size": 64}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities():
        return {"supported_models": [{"model_name": b.name, "max_context_length": b.info.max_context, "trainable": True,
                                      "sampleable": True} for b in B.runtime.bases.values()]}

    @app.post("/api/v1/telemetry")
    async def telemetry():
        return {"status": "accepted"}

    @app.post("/api/v1/create_session")
    async def create_session(request: Request):
        body = await body_json(request)
        sid = uuid.uuid4().hex[:16]
        tags, meta = validation.stored_fields(body)
        B.store.create_session(sid, tags, meta, str(body.get("sdk_version", ""))[:64])
        B.tenants.claim("session", sid)
        log.info("session %s created (sdk %s)", sid, body.get("sdk_version"))
        return {"session_id": sid, "type": "create_session"}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request):
        body = await body_json(request)
        sid = _field(body, "session_id", str)
        row = B.session_row(sid)
        if row["finished"]:
            return _json({"detail": "session finished"}, 410)
        B.store.heartbeat(sid)
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish(session_id: str, request: Request):
        body = await body_json(request)
        B.session_row(session_id)
        reason = (body.get("reason") or {}).get("type", "success") if isinstance(body.get("reason"), dict) else "success"
        B.store.finish_session(session_id, reason)
        await lifecycle.end_session(B, session_id)
        return {}

    @app.get("/api/v1/sessions")
    async def list_sessions(limit: int = 20, offset: int = 0):
        limit, offset = min(max(limit, 0), 1000), max(offset, 0)
        if not B.tenants.enforced or tenants.current.get().admin:
            rows = B.store.sessions(limit, offset)
        else:
            rows = [r for r in B.store.sessions(1_000_000, 0) if B.tenants.sees_id(r["session_id"])][offset: offset + limit]
        return {"sessions": [r["session_id"] for r in rows]}

    @app.get("/api/v1/sessions/{session_id}")
    async def get_session(session_id: str):
        B.session_row(session_id)
        models = [r["model_id"] for r in B.store._all("SELECT model_id FROM models WHERE session_id=?", (session_id,))]
        samplers = [r["sampler_id"] for r in B.store._all("SELECT sampler_id FROM samplers WHERE session_id=?", (session_id,))]
        return {"training_run_ids": models, "sampler_ids": samplers}

    # ------------------------------------------------------------------ training models
    def _train_config(base_model: str, lora: dict | None) -> TrainConfig:
        B.runtime.base(base_model)  # 400 for an unknown base model
        if lora is None:
            return TrainConfig(base_model=base_model, rank=0)
        if not isinstance(lora, dict):
            raise BadRequest("lora_config must be an object")
        rank = lora.get("rank")
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            raise BadRequest(f"lora_config.rank must be an integer >= 0 (0 = full fine-tuning), got {rank!r}")
        validation.check_lora_rank(rank, B.limits)
        if lora.get("seed") is not None and (not isinstance(lora["seed"], int) or isinstance(lora["seed"], bool)):
            raise BadRequest(f"lora_config.seed must be an integer, got {lora['seed']!r}")
        seed = lora.get("seed")
        return TrainConfig(base_model=base_model, rank=rank, seed=seed, train_mlp=bool(lora.get("train_mlp", True)),
                           train_attn=bool(lora.get("train_attn", True)), train_unembed=bool(lora.get("train_unembed", True)))

    def _check_optimizer(oc: Any) -> None:
        if oc is not None and (not isinstance(oc, dict) or oc.get("type", "adamw") not in ("adamw", "adam")):
            raise BadRequest(f"unsupported optimizer_config {oc!r}: only AdamW is supported")

    @app.post("/api/v1/create_model")
    async def create_model(request: Request):
        body = await body_json(request)
        sid = _field(body, "session_id", str)
        seq = _field(body, "model_seq_id", int)
        base_model = _field(body, "base_model", str)
        B.session_row(sid)
        _check_optimizer(body.get("optimizer_config"))
        cfg = _train_config(base_model, body.get("lora_config"))
        _, meta = validation.stored_fields(body)
        model_id = f"{sid}:train:{seq}"
        rid = B.new_future("create_model", model_id)
        B.store.add_model(model_id, sid, base_model, cfg.to_json(), meta)

        def run(rt: Runtime):
            rt.create_model(model_id, cfg)
            return JSON, json.dumps({"model_id": model_id, "type": "create_model"}).encode()

        B.submit(Job(rid, "create_model", run=run))
        return {"request_id": rid, "model_id": model_id}

    @app.post("/api/v1/get_info")
    async def get_info(request: Request):
        body = await body_json(request)
        model_id = _field(body, "model_id", str)
        row = B.store.model(model_id)
        if row is None or not B.tenants.sees_id(model_id):
            raise NotFound(f"unknown model_id {model_id!r}")
        tc = row["train_config"]
        base = B.runtime.base(row["base_model"])
        tok_id = B.cfg.get("tokenizer_ids", {}).get(base.name, base.name)
        return {"type": "get_info", "model_id": model_id,
                "model_data": {"arch": base.info.arch, "model_name": base.name, "tokenizer_id": tok_id},
                "is_lora": tc["rank"] > 0, "lora_rank": tc["rank"] if tc["rank"] > 0 else None,
                "model_name": base.name, "optimizer_config": {"type": "adamw"}}

    @app.post("/api/v1/unload_model")
    async def unload_model(request: Request):
        body = await body_json(request)
        model_id = _field(body, "model_id", str)
        if B.store.model(model_id) is None or not B.tenants.sees_id(model_id):
            raise NotFound(f"unknown model_id {model_id!r}")
        rid = B.new_future("unload_model", model_id)

        def run(rt: Runtime):
            rt.unload_model(model_id)
            return JSON, json.dumps({"model_id": model_id, "type": "unload_model"}).encode()

        B.submit(Job(rid, "unload_model", run=run))
        return {"request_id": rid, "model_id": model_id}

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request):
        raw = await request.body()
        if request.headers.get("content-encoding", "").lower() == "zstd":
            raw = validation.decompress_zstd(raw, B.limits)
        if "protobuf" in request.headers.get("content-type", ""):
            req = codec.decode_forward_backward(raw)
        else:
            raise BadRequest("forward_backward expects an application/x-protobuf ForwardBackwardRequest body")
        _, info = B.model_info(req.model_id)
        validation.check_batch_tokens(sum(len(d.tokens) for d in req.data), B.limits)
        dup = B.dedupe(req.model_id, req.seq_id, raw)
        if dup:
            return {"request_id": dup, "model_id": req.model_id}
        validate_fwdbwd(req, info)
        rid = B.new_future("forward" if req.forward_only else "forward_backward", req.model_id, req.seq_id, raw)
        B.store.touch_model(req.model_id)

        def run(rt: Runtime):
            outs, metrics = rt.forward_backward(req)
            return PROTO, codec.encode_forward_backward_output(outs, metrics)

        B.submit(Job(rid, "forward_backward", run=run, model_id=req.model_id, seq_id=req.seq_id))
        return {"request_id": rid, "model_id": req.model_id}

    async def _model_job(request: Request, kind: str, make_run) -> dict:
        raw = await request.body()
        body = await body_json(request)
        model_id = _field(body, "model_id", str)
        seq_id = _field(body, "seq_id", int, required=False)
        B.model_info(model_id)
        dup = B.dedupe(model_id, seq_id, raw)
        if dup:
            return {"request_id": dup, "model_id": model_id}
        run = make_run(body, model_id)  # validates synchronously
        rid = B.new_future(kind, model_id, seq_id, raw)
        B.store.touch_model(model_id)
        B.submit(Job(rid, kind, run=run, model_id=model_id, seq_id=seq_id))
        return {"request_id": rid, "model_id": model_id}

    @app.post("/api/v1/optim_step")
    async def optim_step(request: Request):
        def make(body, model_id):
            if body.get("optimizer_params") is not None and (body.get("optimizer_params") or {}).get("type") not in (None, "adam", "adamw"):
                raise BadRequest("only Adam(W) optimizer_params are supported")
            adam = validate_adam(body.get("adam_params") or {})

            def run(rt: Runtime):
                return JSON, json.dumps({"metrics": rt.optim_step(model_id, adam), "type": "optim_step"}).encode()
            return run

        return await _model_job(request, "optim_step", make)

    def _check_name(name: Any) -> str:
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise BadRequest(f"invalid checkpoint name {name!r}: use 1-128 characters from [A-Za-z0-9._-], no '/'")
        return name

    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request):
        def make(body, model_id):
            name = _check_name(body.get("path"))
            _, meta = validation.stored_fields(body)
            overwrite = bool(body.get("overwrite", False))
            if (B.checkpoint_dir / model_id / "weights" / name).exists() and not overwrite:
                raise BadRequest(f"checkpoint weights/{name} already exists for {model_id} (pass overwrite=True)")
            ttl = external_routes.check_ttl(body.get("ttl_seconds"))

            def run(rt: Runtime):
                external_routes.set_expiry(rt.save(model_id, name, "weights", True, overwrite, meta), ttl)
                return JSON, json.dumps({"path": f"tinker://{model_id}/weights/{name}", "type": "save_weights"}).encode()
            return run

        return await _model_job(request, "save_weights", make)

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_weights_for_sampler(request: Request):
        def make(body, model_id):
            name = body.get("path")
            sseq = body.get("sampling_session_seq_id")
            if name is None and sseq is None:
                raise BadRequest("save_weights_for_sampler needs a path (name) or a sampling_session_seq_id")
            if name is not None:
                _check_name(name)
            if sseq is not None and (not isinstance(sseq, int) or isinstance(sseq, bool)):
                raise BadRequest(f"sampling_session_seq_id must be an integer, got {sseq!r}")
            _, meta = validation.stored_fields(body)
            row = B.store.model(model_id)
            ttl = external_routes.check_ttl(body.get("ttl_seconds"))

            def run(rt: Runtime):
                res: dict[str, Any] = {"type": "save_weights_for_sampler"}
                if name is not None:
                    external_routes.set_expiry(rt.save(model_id, name, "sampler_weights", False, True, meta), ttl)
                    res["path"] = f"tinker://{model_id}/sampler_weights/{name}"
                if sseq is not None:
                    sampler_id = f"{row['session_id']}:sample:{sseq}"
                    key = f"snap:{sampler_id}:{uuid.uuid4().hex[:6]}"
                    rt.snapshot_for_sampler(model_id, key)
                    B.store.add_sampler(sampler_id, row["session_id"], row["base_model"], None, key)
                    res["sampling_session_id"] = sampler_id
                return JSON, json.dumps(res).encode()
            return run

        return await _model_job(request, "save_weights_for_sampler", make)

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request):
        raw = await request.body()
        body = await body_json(request)
        path = _field(body, "path", str)
        with_opt = bool(body.get("optimizer", False))
        src_model, kind, name, ck = B.parse_tinker_path(path, ("weights",))
        if not (ck / "meta.json").exists():
            raise NotFound(f"checkpoint {path} does not exist")
        meta = json.loads((ck / "meta.json").read_text())
        if with_opt and not meta.get("has_optimizer"):
            raise BadRequest(f"checkpoint {path} has no optimizer state")
        if body.get("model_id"):
            model_id = body["model_id"]
            seq_id = _field(body, "seq_id", int, required=False)
            B.model_info(model_id)
            dup = B.dedupe(model_id, seq_id, raw)
            if dup:
                return {"request_id": dup, "model_id": model_id}
            rid = B.new_future("load_weights", model_id, seq_id, raw)

            def run(rt: Runtime):
                rt.load_into(model_id, ck, with_opt)
                return JSON, json.dumps({"path": path, "model_id": model_id, "type": "load_weights"}).encode()

            B.submit(Job(rid, "load_weights", run=run, model_id=model_id, seq_id=seq_id))
            return {"request_id": rid, "model_id": model_id}
        sid = _field(body, "session_id", str)
        mseq = _field(body, "model_seq_id", int)
        B.session_row(sid)
        _check_optimizer(body.get("optimizer_config"))
        cfg = TrainConfig(**meta["train_config"])
        if body.get("base_model") and body["base_model"] != cfg.base_model:
            raise BadRequest(f"checkpoint {path} was trained on {cfg.base_model}, not {body['base_model']}")
        B.runtime.base(cfg.base_model)
        _, meta = validation.stored_fields(body)
        model_id = f"{sid}:train:{mseq}"
        rid = B.new_future("load_weights", model_id)
        B.store.add_model(model_id, sid, cfg.base_model, cfg.to_json(), meta)

        def run_new(rt: Runtime):
            rt.create_model(model_id, cfg)
            rt.load_into(model_id, ck, with_opt)
            return JSON, json.dumps({"path": path, "model_id": model_id, "type": "load_weights"}).encode()

        B.submit(Job(rid, "load_weights", run=run_new))
        return {"request_id": rid, "model_id": model_id}

    # ------------------------------------------------------------------ sampling
    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request):
        body = await body_json(request)
        sid = _field(body, "session_id", str)
        seq = _field(body, "sampling_session_seq_id", int)
        B.session_row(sid)
        base_model = body.get("base_model")
        model_path = body.get("model_path")
        sampler_id = f"{sid}:sample:{seq}"
        if model_path:
            _, _, _, ck = B.parse_tinker_path(model_path)
            if not (ck / "meta.json").exists():
                raise NotFound(f"sampler checkpoint {model_path} does not exist")
            meta = json.loads((ck / "meta.json").read_text())
            ck_base = meta["train_config"]["base_model"]
            if base_model and base_model != ck_base:
                raise BadRequest(f"{model_path} was trained on {ck_base}, not {base_model}")
            B.runtime.base(ck_base)
            key = f"ckpt:{ck}"
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: B.engine.call(lambda rt: rt.has_sampler(key) or rt.sampler_from_checkpoint(key, ck)))
            B.store.add_sampler(sampler_id, sid, ck_base, model_path, key)
        else:
            if not base_model:
                raise BadRequest("create_sampling_session needs base_model or model_path")
            B.runtime.base(base_model)
            B.store.add_sampler(sampler_id, sid, base_model, None, None)
        return {"sampling_session_id": sampler_id, "type": "create_sampling_session"}

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str):
        row = B.store.sampler(sampler_id)
        if row is None or not B.tenants.sees_id(sampler_id):
            raise NotFound(f"unknown sampler {sampler_id!r}")
        return {"sampler_id": sampler_id, "base_model": row["base_model"], "model_path": row["model_path"]}

    def _sample_spec(body: dict, info) -> sampler.SampleSpec:
        prompt = body.get("prompt") or {}
        chunks = prompt.get("chunks") if isinstance(prompt, dict) else None
        if not isinstance(chunks, list) or not all(isinstance(ch, dict) for ch in chunks):
            raise BadRequest("prompt must be an object with a list of chunks")
        tokens: list[int] = []
        for ch in chunks:
            if ch.get("type", "encoded_text") != "encoded_text":
                raise BadRequest(f"only encoded_text prompt chunks are supported, got {ch.get('type')!r}")
            if not isinstance(ch.get("tokens") or [], list):
                raise BadRequest("prompt chunk tokens must be a list of token ids")
            tokens.extend(ch.get("tokens") or [])
        if not tokens:
            raise BadRequest("prompt is empty")
        if any((not isinstance(t, int)) or isinstance(t, bool) or t < 0 or t >= info.vocab_size for t in tokens):
            bad = next(t for t in tokens if (not isinstance(t, int)) or isinstance(t, bool) or t < 0 or t >= info.vocab_size)
            raise BadRequest(f"prompt contains token id {bad} outside the vocabulary [0, {info.vocab_size})")
        n = body.get("num_samples", 1)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1 or n > MAX_NUM_SAMPLES:
            raise BadRequest(f"num_samples must be an integer in [1, {MAX_NUM_SAMPLES}], got {n!r}")
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise BadRequest("sampling_params must be an object")
        for key, kinds in (("temperature", (int, float)), ("top_p", (int, float)), ("top_k", (int,)), ("seed", (int,))):
            v = sp.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, kinds)):
                raise BadRequest(f"sampling_params.{key} must be a number, got {v!r}")
        mt = sp.get("max_tokens")
        if mt is None:
            mt = min(B.default_max_tokens, info.max_context - len(tokens))
        if not isinstance(mt, int) or isinstance(mt, bool) or mt <= 0:
            raise BadRequest(f"max_tokens must be a positive integer, got {mt!r}")
        validation.check_sample_tokens(n, mt, B.limits)
        if len(tokens) + mt > info.max_context:
            raise BadRequest(f"prompt ({len(tokens)} tokens) + max_tokens ({mt}) exceeds the context length {info.max_context}")
        temp = float(sp.get("temperature", 1.0) if sp.get("temperature") is not None else 1.0)
        top_p = float(sp.get("top_p", 1.0) if sp.get("top_p") is not None else 1.0)
        top_k = int(sp.get("top_k", -1) if sp.get("top_k") is not None else -1)
        if temp < 0 or not temp == temp:
            raise BadRequest(f"temperature must be >= 0, got {temp}")
        if not 0 < top_p <= 1:
            raise BadRequest(f"top_p must be in (0, 1], got {top_p}")
        stop = sp.get("stop", None)
        stop_ids: set[int] = set()
        stop_strs: list[str] = []
        if stop is None:
            stop_ids = set(info.eos_token_ids)
        else:
            if isinstance(stop, str):
                stop = [stop]
            if not isinstance(stop, list):
                raise BadRequest("stop must be a string, a list of strings or a list of token ids")
            if stop:
                if all(isinstance(s, str) for s in stop):
                    stop_strs = [s for s in stop if s]
                elif all(isinstance(s, int) and not isinstance(s, bool) for s in stop):
                    stop_ids = set(stop)
                else:
                    raise BadRequest("stop must not mix strings and token ids")
                stop_ids |= set(info.eos_token_ids)
        for k in ("topk_sample_logprobs", "prompt_alt_tokens_k"):
            if body.get(k):
                raise BadRequest(f"{k} is not supported by this backend")
        if body.get("target_prompt_logprobs") is not None:
            raise BadRequest("target_prompt_logprobs is not supported by this backend")
        # record_stability_info (tinker-cookbook 0.6.1 sets it) is accepted and records nothing: the samples are the
        # same, and the only consumer, the stable_reinforce loss, is refused with the list of supported losses
        pl = bool(body.get("prompt_logprobs"))
        topk = body.get("topk_prompt_logprobs") or 0
        if not isinstance(topk, int) or isinstance(topk, bool):
            raise BadRequest(f"topk_prompt_logprobs must be an integer, got {topk!r}")
        if topk < 0 or topk > 1000:
            raise BadRequest("topk_prompt_logprobs must be in [0, 1000]")
        last_n = body.get("prompt_logprobs_last_n")
        if last_n is not None:
            if not (pl or topk):
                raise BadRequest("prompt_logprobs_last_n requires prompt_logprobs")
            if not isinstance(last_n, int) or not 1 <= last_n <= len(tokens) - 1:
                raise BadRequest(f"prompt_logprobs_last_n must be in [1, {len(tokens) - 1}]")
        seed = sp.get("seed")
        return sampler.SampleSpec(prompt=tokens, num_samples=n, max_tokens=mt, temperature=temp, top_k=top_k, top_p=top_p,
                                  seed=seed, stop_token_ids=stop_ids, stop_strings=stop_strs, prompt_logprobs=pl,
                                  topk_prompt_logprobs=topk, prompt_logprobs_last_n=last_n)

    @app.post("/api/v1/asample")
    async def asample(request: Request):
        body = await body_json(request)
        sampler_id = body.get("sampling_session_id")
        if sampler_id:
            row = B.store.sampler(sampler_id)
            if row is None or not B.tenants.sees_id(sampler_id):
                raise NotFound(f"unknown sampling session {sampler_id!r}")
            base_model, wkey, mpath = row["base_model"], row["weights_key"], row["model_path"]
        else:  # legacy addressing
            mpath = body.get("model_path")
            base_model = body.get("base_model")
            wkey = None
            if mpath:
                _, _, _, ck = B.parse_tinker_path(mpath)
                if not (ck / "meta.json").exists():
                    raise NotFound(f"checkpoint {mpath} does not exist")
                base_model = json.loads((ck / "meta.json").read_text())["train_config"]["base_model"]
                wkey = f"ckpt:{ck}"
            if not base_model:
                raise BadRequest("asample needs a sampling_session_id (or base_model / model_path)")
        info = B.runtime.base(base_model).info
        if wkey and wkey.startswith("snap:") and not B.runtime.has_sampler(wkey):
            raise NotFound(f"the weights of sampling session {sampler_id} are no longer loaded (evicted or backend "
                           "restarted); save them with a name and create a sampling client from the path")
        spec = _sample_spec(body, info)
        rid = B.new_future("sample")
        seq_ids = [f"{rid}.{i}" for i in range(spec.num_samples)]

        def finish(res: sampler.SampleResult):
            seqs = [codec.SampledSeq(t, lp, sr) for t, lp, sr in res.sequences]
            return PROTO, codec.encode_sample_response(seqs, res.prompt_logprobs, res.topk_prompt, res.cache_hit_tokens)

        B.submit(Job(rid, "sample", sample_key=(base_model, wkey), sample_spec=spec, finish_sample=finish))
        return {"request_id": rid, "sample_sequence_ids": seq_ids}

    # ------------------------------------------------------------------ futures
    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request):
        body = await body_json(request)
        rid = str(_field(body, "request_id", (str, int)))
        row = B.store.future(rid)
        if row is None:
            raise NotFound(f"unknown request_id {rid!r}")
        B.tenants.check_future(rid)
        if row["status"] == "pending":
            ev = B.events.get(rid)
            if ev is None:
                ev = B.events[rid] = asyncio.Event()
            try:
                await asyncio.wait_for(ev.wait(), timeout=B.long_poll_s)
            except asyncio.TimeoutError:
                return _json({"type": "try_again", "request_id": rid, "queue_state": "active"}, 408)
            row = B.store.future(rid)
        B.events.pop(rid, None)
        B.store.mark_retrieved(rid)
        if row["status"] == "failed":
            return _json({"error": row["error"], "category": row["category"]})
        return Response(row["result"], media_type=row["content_type"])

    # ------------------------------------------------------------------ checkpoints REST
    @app.post("/api/v1/weights_info")
    async def weights_info(request: Request):
        body = await body_json(request)
        _, _, _, ck = B.parse_tinker_path(_field(body, "tinker_path", str))
        if not (ck / "meta.json").exists():
            raise NotFound("checkpoint does not exist")
        tc = json.loads((ck / "meta.json").read_text())["train_config"]
        return {"base_model": tc["base_model"], "is_lora": tc["rank"] > 0, "lora_rank": tc["rank"] if tc["rank"] > 0 else None,
                "train_mlp": tc["train_mlp"], "train_attn": tc["train_attn"], "train_unembed": tc["train_unembed"],
                "optimizer_config": {"type": "adamw"}}

    @app.get("/api/v1/training_runs")
    async def training_runs(limit: int = 20, offset: int = 0):
        limit, offset = min(max(limit, 0), 1000), max(offset, 0)
        if not B.tenants.enforced or tenants.current.get().admin:
            rows, total = B.store.models(limit, offset)
        else:
            mine = [r for r in B.store.models(1_000_000, 0)[0] if B.tenants.sees_id(r["model_id"])]
            rows, total = mine[offset: offset + limit], len(mine)
        return {"training_runs": [B.training_run(r) for r in rows],
                "cursor": {"offset": offset, "limit": limit, "total_count": total}}

    @app.get("/api/v1/training_runs/{model_id}")
    async def training_run(model_id: str):
        row = B.store.model(model_id)
        if row is None or not B.tenants.sees_id(model_id):
            raise NotFound(f"unknown training run {model_id!r}")
        return B.training_run(row)

    @app.get("/api/v1/training_runs/{model_id}/checkpoints")
    async def checkpoints(model_id: str):
        if B.store.model(model_id) is None or not B.tenants.sees_id(model_id):
            raise NotFound(f"unknown training run {model_id!r}")
        return {"checkpoints": B.list_checkpoints(model_id), "cursor": None}

    @app.delete("/api/v1/training_runs/{model_id}/checkpoints/{kind}/{name}")
    async def delete_checkpoint(model_id: str, kind: str, name: str):
        _, _, _, ck = B.parse_tinker_path(f"tinker://{model_id}/{kind}/{name}", tuple(CHECKPOINT_TYPES))
        if not ck.exists():
            raise NotFound(f"checkpoint {kind}/{name} of {model_id} does not exist")
        shutil.rmtree(ck)
        return {}

    @app.get("/api/v1/checkpoints")
    async def all_checkpoints(limit: int = 100, offset: int = 0):
        limit, offset = min(max(limit, 0), 1000), max(offset, 0)
        rows, _ = B.store.models(10_000, 0)
        cks = [c for r in rows if B.tenants.sees_id(r["model_id"]) for c in B.list_checkpoints(r["model_id"])]
        return {"checkpoints": cks[offset: offset + limit],
                "cursor": {"offset": offset, "limit": limit, "total_count": len(cks)}}

    return app
