"""The API layer's routes (tinker SDK 0.38 contract): each parses its request with wire.py, checks
it against the backend's state (sessions, models, checkpoints, tenants), and either answers at
once or submits one typed job to the scheduler and returns its future's request id.

``retrieve_future`` long-polls: protobuf for forward/backward and sample results, JSON for the
rest, HTTP 200 ``{"error", "category"}`` for a failed job. See ../../docs/backend.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from . import checkpoints, lifecycle, tenants, wire
from .errors import BadRequest, NotFound
from .runtime_api import TrainConfig
from .scheduler import (
    CreateModelJob,
    ForwardBackwardJob,
    LoadWeightsJob,
    OptimStepJob,
    SampleJob,
    SaveForSamplerJob,
    SaveWeightsJob,
    UnloadModelJob,
)
from .state import BackendState

log = logging.getLogger("backend.api")
CLIENT_CONFIG = {
    "pjwt_auth_enabled": False, "credential_default_source": "api_key", "use_pyqwest_transport": False,
    "parallel_fwdbwd_chunks": False, "proto_compress_fwdbwd": False, "fwdbwd_max_chunk_len": 1024,
    "fwdbwd_max_chunk_bytes_count": 5_000_000, "sample_use_retrieve_futures": False,
    "custom_loss_server_side": False, "sample_join_sampling_session": False, "sample_no_retries": False,
    "sample_enable_stuck_detection": True, "sample_max_concurrent_requests": 2000,
}


def backend_state(request: Request) -> BackendState:
    return request.app.state.backend


Api = Annotated[BackendState, Depends(backend_state)]
router = APIRouter(prefix="/api/v1")


def json_response(obj: object, status: int = 200) -> Response:
    return Response(wire.json_response_body(obj), status_code=status, media_type=wire.JSON)


async def body_json(request: Request) -> dict:
    return wire.json_object(await request.body())


def _page(limit: int, offset: int) -> tuple[int, int]:
    return min(max(limit, 0), 1000), max(offset, 0)


# ---------------------------------------------------------------------- session level
@router.get("/healthz")
async def healthz():
    return {"status": "ok"}


@router.post("/client/config")
async def client_config():
    return CLIENT_CONFIG


@router.post("/client/dynamic_config")
async def dynamic_config():
    return {"refresh_interval_sec": 300, "sample_cancel_enabled": False, "sample_cancel_max_batch_size": 64}


@router.get("/get_server_capabilities")
async def capabilities(B: Api):
    return {"supported_models": [{"model_name": b.name, "max_context_length": b.info.max_context, "trainable": True,
                                  "sampleable": True} for b in B.runtime.bases.values()]}


@router.post("/telemetry")
async def telemetry():
    return {"status": "accepted"}


@router.post("/create_session")
async def create_session(request: Request, B: Api):
    body = await body_json(request)
    sid = uuid.uuid4().hex[:16]
    tags, meta = wire.stored_fields(body)
    B.store.create_session(sid, tags, meta, str(body.get("sdk_version", ""))[:64])
    B.tenants.claim("session", sid)
    log.info("session %s created (sdk %s)", sid, body.get("sdk_version"))
    return {"session_id": sid, "type": "create_session"}


@router.post("/session_heartbeat")
async def heartbeat(request: Request, B: Api):
    sid = wire.field(await body_json(request), "session_id", str)
    row = B.session_row(sid)
    if row["finished"]:
        return json_response({"detail": "session finished"}, 410)
    B.store.heartbeat(sid)
    return {"type": "session_heartbeat"}


@router.post("/sessions/{session_id}/finish")
async def finish(session_id: str, request: Request, B: Api):
    body = await body_json(request)
    B.session_row(session_id)
    reason = (body.get("reason") or {}).get("type", "success") if isinstance(body.get("reason"), dict) else "success"
    B.store.finish_session(session_id, reason)
    await lifecycle.end_session(B, session_id)
    return {}


@router.get("/sessions")
async def list_sessions(B: Api, limit: int = 20, offset: int = 0):
    limit, offset = _page(limit, offset)
    if not B.tenants.enforced or tenants.current.get().admin:
        rows = B.store.sessions(limit, offset)
    else:
        rows = [r for r in B.store.sessions(1_000_000, 0) if B.tenants.sees_id(r["session_id"])][offset: offset + limit]
    return {"sessions": [r["session_id"] for r in rows]}


@router.get("/sessions/{session_id}")
async def get_session(session_id: str, B: Api):
    B.session_row(session_id)
    return {"training_run_ids": B.store.session_model_ids(session_id),
            "sampler_ids": B.store.session_sampler_ids(session_id)}


# ---------------------------------------------------------------------- training models
@router.post("/create_model")
async def create_model(request: Request, B: Api):
    req = wire.create_model(await body_json(request), B.limits)
    B.session_row(req.session_id)
    B.runtime.base(req.config.base_model)  # 400 for an unknown base model
    model_id = f"{req.session_id}:train:{req.model_seq_id}"
    rid = B.new_future("create_model", model_id)
    B.store.add_model(model_id, req.session_id, req.config.base_model, req.config.to_json(), req.user_metadata)
    B.submit(CreateModelJob(rid, model_id, None, req.config))
    return {"request_id": rid, "model_id": model_id}


@router.post("/get_info")
async def get_info(request: Request, B: Api):
    model_id = wire.field(await body_json(request), "model_id", str)
    row = B.model_row(model_id)
    tc = row["train_config"]
    base = B.runtime.base(row["base_model"])
    tok_id = B.cfg.get("tokenizer_ids", {}).get(base.name, base.name)
    return {"type": "get_info", "model_id": model_id,
            "model_data": {"arch": base.info.arch, "model_name": base.name, "tokenizer_id": tok_id},
            "is_lora": tc["rank"] > 0, "lora_rank": tc["rank"] if tc["rank"] > 0 else None,
            "model_name": base.name, "optimizer_config": {"type": "adamw"}}


@router.post("/unload_model")
async def unload_model(request: Request, B: Api):
    model_id = wire.field(await body_json(request), "model_id", str)
    B.model_row(model_id)
    rid = B.new_future("unload_model", model_id)
    B.submit(UnloadModelJob(rid, model_id, None))
    return {"request_id": rid, "model_id": model_id}


@router.post("/forward_backward")
async def forward_backward(request: Request, B: Api):
    raw = await request.body()
    req = wire.forward_backward(raw, request.headers.get("content-type", ""),
                                request.headers.get("content-encoding", ""), B.limits,
                                lambda model_id: B.model_info(model_id)[1])
    dup = B.dedupe(req.model_id, req.seq_id, raw)
    if dup:
        return {"request_id": dup, "model_id": req.model_id}
    rid = B.new_future("forward" if req.forward_only else "forward_backward", req.model_id, req.seq_id, raw)
    B.store.touch_model(req.model_id)
    B.submit(ForwardBackwardJob(rid, req.model_id, req.seq_id, req))
    return {"request_id": rid, "model_id": req.model_id}


async def _model_request(request: Request, B: BackendState,
                         renumbered: tuple[str, ...] = ()) -> tuple[bytes, dict, wire.ModelRequest, str | None]:
    """(request fingerprint, body, model request, the request id of an identical earlier request) for the
    requests on one loaded model (optim_step, save_weights, save_weights_for_sampler). ``renumbered``: fields the
    SDK sets afresh on every retry of the same seq_id; they do not make a retry a different request."""
    raw = await request.body()
    body = await body_json(request)
    mr = wire.model_request(body)
    B.model_info(mr.model_id)
    if renumbered:
        raw = json.dumps({k: v for k, v in body.items() if k not in renumbered}, sort_keys=True).encode()
    return raw, body, mr, B.dedupe(mr.model_id, mr.seq_id, raw)


def _new_model_future(B: BackendState, kind: str, mr: wire.ModelRequest, raw: bytes) -> str:
    rid = B.new_future(kind, mr.model_id, mr.seq_id, raw)
    B.store.touch_model(mr.model_id)
    return rid


@router.post("/optim_step")
async def optim_step(request: Request, B: Api):
    raw, body, mr, dup = await _model_request(request, B)
    if dup:
        return {"request_id": dup, "model_id": mr.model_id}
    adam = wire.optim_step(body)
    rid = _new_model_future(B, "optim_step", mr, raw)
    B.submit(OptimStepJob(rid, mr.model_id, mr.seq_id, adam))
    return {"request_id": rid, "model_id": mr.model_id}


@router.post("/save_weights")
async def save_weights(request: Request, B: Api):
    raw, body, mr, dup = await _model_request(request, B)
    if dup:
        return {"request_id": dup, "model_id": mr.model_id}
    save = wire.save_weights(body)
    if (B.checkpoint_dir / mr.model_id / "weights" / save.name).exists() and not save.overwrite:
        raise BadRequest(f"checkpoint weights/{save.name} already exists for {mr.model_id} (pass overwrite=True)")
    rid = _new_model_future(B, "save_weights", mr, raw)
    B.submit(SaveWeightsJob(rid, mr.model_id, mr.seq_id, save))
    return {"request_id": rid, "model_id": mr.model_id}


@router.post("/save_weights_for_sampler")
async def save_weights_for_sampler(request: Request, B: Api):
    # the SDK takes a new sampling_session_seq_id on each attempt (training_client._send_request), so a retry
    # after a lost response carries the same seq_id with another one: it is the same request
    raw, body, mr, dup = await _model_request(request, B, renumbered=("sampling_session_seq_id",))
    if dup:
        return {"request_id": dup, "model_id": mr.model_id}
    save = wire.save_weights_for_sampler(body)
    row = B.model_row(mr.model_id)
    rid = _new_model_future(B, "save_weights_for_sampler", mr, raw)
    B.submit(SaveForSamplerJob(rid, mr.model_id, mr.seq_id, save, row["session_id"], row["base_model"]))
    return {"request_id": rid, "model_id": mr.model_id}


@router.post("/load_weights")
async def load_weights(request: Request, B: Api):
    raw = await request.body()
    req = wire.load_weights(await body_json(request))
    _, ck = B.checkpoint(req.path, ("weights",))
    if not checkpoints.exists(ck):
        raise NotFound(f"checkpoint {req.path} does not exist")
    meta = checkpoints.read_meta(ck)
    if req.with_optimizer and not meta.get("has_optimizer"):
        raise BadRequest(f"checkpoint {req.path} has no optimizer state")
    if req.model_id is not None:  # into a loaded model
        B.model_info(req.model_id)
        dup = B.dedupe(req.model_id, req.seq_id, raw)
        if dup:
            return {"request_id": dup, "model_id": req.model_id}
        if B.store.model_used(req.model_id):  # the service's rule: a load is a model's first request only
            raise BadRequest(f"LoadWeights is not permitted with seq_id {req.seq_id}: model {req.model_id} has "
                             "already trained or saved; load into a new training client "
                             "(create_training_client_from_state[_with_optimizer])")
        rid = B.new_future("load_weights", req.model_id, req.seq_id, raw)
        B.submit(LoadWeightsJob(rid, req.model_id, req.seq_id, req.path, ck, req.with_optimizer, None))
        return {"request_id": rid, "model_id": req.model_id}
    assert req.session_id is not None and req.model_seq_id is not None  # wire.load_weights: a new model's fields
    B.session_row(req.session_id)
    cfg = TrainConfig(**meta["train_config"])
    if req.base_model and req.base_model != cfg.base_model:
        raise BadRequest(f"checkpoint {req.path} was trained on {cfg.base_model}, not {req.base_model}")
    B.runtime.base(cfg.base_model)
    model_id = f"{req.session_id}:train:{req.model_seq_id}"
    rid = B.new_future("load_weights", model_id)
    B.store.add_model(model_id, req.session_id, cfg.base_model, cfg.to_json(), req.user_metadata)
    B.submit(LoadWeightsJob(rid, model_id, None, req.path, ck, req.with_optimizer, cfg))
    return {"request_id": rid, "model_id": model_id}


# ---------------------------------------------------------------------- sampling
def _checkpoint_base(B: BackendState, model_path: str, base_model: str | None, what: str):
    """(directory, base model) of a sampler-loadable checkpoint path (the request's ``model_path``)."""
    _, ck = B.checkpoint(model_path, what="model_path")
    if not checkpoints.exists(ck):
        raise NotFound(f"{what} {model_path} does not exist")
    ck_base = checkpoints.train_config(ck)["base_model"]
    if base_model and base_model != ck_base:
        raise BadRequest(f"{model_path} was trained on {ck_base}, not {base_model}")
    return ck, ck_base


@router.post("/create_sampling_session")
async def create_sampling_session(request: Request, B: Api):
    req = wire.create_sampling_session(await body_json(request))
    sid, base_model, model_path = req.session_id, req.base_model, req.model_path
    B.session_row(sid)
    sampler_id = f"{sid}:sample:{req.sampling_session_seq_id}"
    if model_path:
        ck, ck_base = _checkpoint_base(B, model_path, base_model, "sampler checkpoint")
        B.runtime.base(ck_base)
        key = f"ckpt:{ck}"
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: B.scheduler.call(lambda rt: rt.has_sampler(key) or rt.sampler_from_checkpoint(key, ck)))
        B.store.add_sampler(sampler_id, sid, ck_base, model_path, key)
    else:
        if not base_model:
            raise BadRequest("create_sampling_session needs base_model or model_path")
        B.runtime.base(base_model)
        B.store.add_sampler(sampler_id, sid, base_model, None, None)
    return {"sampling_session_id": sampler_id, "type": "create_sampling_session"}


@router.get("/samplers/{sampler_id}")
async def get_sampler(sampler_id: str, B: Api):
    row = B.sampler_row(sampler_id)
    return {"sampler_id": sampler_id, "base_model": row["base_model"], "model_path": row["model_path"]}


@router.post("/asample")
async def asample(request: Request, B: Api):
    body = await body_json(request)
    sampler_id = wire.field(body, "sampling_session_id", str, required=False)
    if sampler_id:
        row = B.sampler_row(sampler_id, "sampling session")
        base_model, wkey = row["base_model"], row["weights_key"]
    else:  # legacy addressing
        base_model, wkey = wire.field(body, "base_model", str, required=False), None
        model_path = wire.field(body, "model_path", str, required=False)
        if model_path:
            ck, base_model = _checkpoint_base(B, model_path, None, "checkpoint")
            wkey = f"ckpt:{ck}"
        if not base_model:
            raise BadRequest("asample needs a sampling_session_id (or base_model / model_path)")
    info = B.runtime.base(base_model).info
    if wkey and wkey.startswith("snap:") and not B.runtime.has_sampler(wkey):
        raise NotFound(f"the weights of sampling session {sampler_id} are no longer loaded (evicted or backend "
                       "restarted); save them with a name and create a sampling client from the path")
    spec = wire.sample_spec(body, info, B.default_max_tokens, B.limits)
    rid = B.new_future("sample")
    B.submit(SampleJob(rid, (base_model, wkey), spec))
    return {"request_id": rid, "sample_sequence_ids": [f"{rid}.{i}" for i in range(spec.num_samples)]}


# ---------------------------------------------------------------------- futures
@router.post("/retrieve_future")
async def retrieve_future(request: Request, B: Api):
    rid = str(wire.field(await body_json(request), "request_id", (str, int)))
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
            return json_response({"type": "try_again", "request_id": rid, "queue_state": "active"}, 408)
        row = B.store.future(rid)
        if row is None:  # deleted meanwhile (future_ttl_s)
            raise NotFound(f"unknown request_id {rid!r}")
    B.events.pop(rid, None)
    B.store.mark_retrieved(rid)
    if row["status"] == "failed":
        return json_response({"error": row["error"], "category": row["category"]})
    return Response(row["result"], media_type=row["content_type"])


# ---------------------------------------------------------------------- checkpoints REST
@router.post("/weights_info")
async def weights_info(request: Request, B: Api):
    _, ck = B.checkpoint(wire.field(await body_json(request), "tinker_path", str), what="tinker_path")
    if not checkpoints.exists(ck):
        raise NotFound("checkpoint does not exist")
    tc = checkpoints.train_config(ck)
    return {"base_model": tc["base_model"], "is_lora": tc["rank"] > 0,
            "lora_rank": tc["rank"] if tc["rank"] > 0 else None, "train_mlp": tc["train_mlp"],
            "train_attn": tc["train_attn"], "train_unembed": tc["train_unembed"],
            "optimizer_config": {"type": "adamw"}}


@router.get("/training_runs")
async def training_runs(B: Api, limit: int = 20, offset: int = 0):
    limit, offset = _page(limit, offset)
    if not B.tenants.enforced or tenants.current.get().admin:
        rows, total = B.store.models(limit, offset)
    else:
        mine = [r for r in B.store.models(1_000_000, 0)[0] if B.tenants.sees_id(r["model_id"])]
        rows, total = mine[offset: offset + limit], len(mine)
    return {"training_runs": [B.training_run(r) for r in rows],
            "cursor": {"offset": offset, "limit": limit, "total_count": total}}


@router.get("/training_runs/{model_id}")
async def training_run(model_id: str, B: Api):
    return B.training_run(B.model_row(model_id, "training run"))


@router.get("/training_runs/{model_id}/checkpoints")
async def model_checkpoints(model_id: str, B: Api):
    B.model_row(model_id, "training run")
    return {"checkpoints": B.list_checkpoints(model_id), "cursor": None}


@router.delete("/training_runs/{model_id}/checkpoints/{kind}/{name}")
async def delete_checkpoint(model_id: str, kind: str, name: str, B: Api):
    _, ck = B.checkpoint(checkpoints.uri(model_id, kind, name), tuple(checkpoints.KINDS))
    if not ck.exists():
        raise NotFound(f"checkpoint {kind}/{name} of {model_id} does not exist")
    shutil.rmtree(ck)
    return {}


@router.get("/checkpoints")
async def all_checkpoints(B: Api, limit: int = 100, offset: int = 0):
    limit, offset = _page(limit, offset)
    rows, _ = B.store.models(10_000, 0)
    cks = [c for r in rows if B.tenants.sees_id(r["model_id"]) for c in B.list_checkpoints(r["model_id"])]
    return {"checkpoints": cks[offset: offset + limit],
            "cursor": {"offset": offset, "limit": limit, "total_count": len(cks)}}
