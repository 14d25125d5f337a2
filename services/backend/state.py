"""What the API layer's routes share: the store, the scheduler, tenants, limits and the
per-request wake-up events of long-polls (one ``BackendState`` per backend process)."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import checkpoints, tenants, wire
from .checkpoints import CheckpointPath
from .errors import BadRequest, NotFound
from .runtime_api import ModelInfo, RuntimeAPI
from .scheduler import Job, Scheduler
from .store import Store


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


class BackendState:
    def __init__(self, cfg: dict[str, Any], store: Store, scheduler: Scheduler, checkpoint_dir: Path):
        self.cfg = cfg
        self.store = store
        self.scheduler = scheduler
        self.checkpoint_dir = checkpoint_dir
        keys = tenants.parse_keys(cfg.get("api_keys"))
        self.tenants = tenants.Tenants(checkpoint_dir.parent / "owners.sqlite3", keys)
        self.long_poll_s = float(cfg.get("long_poll_s", 25))
        self.default_max_tokens = int(cfg.get("default_max_tokens", 256))
        self.limits = wire.Limits.from_config(cfg)   # body size, LoRA rank, tokens per request
        self.events: dict[str, asyncio.Event] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.reaper: asyncio.Task | None = None

    # ---- scheduler callbacks (worker thread)
    def on_done(self, request_id: str) -> None:
        ev = self.events.get(request_id)
        if ev is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(ev.set)

    def submit(self, job: Job) -> None:
        self.events[job.request_id] = asyncio.Event()
        self.scheduler.submit(job)

    @property
    def runtime(self) -> RuntimeAPI:
        return self.scheduler.runtime

    # ---- look-ups that answer 404 for what the caller may not see
    def model_row(self, model_id: str, what: str = "model_id") -> dict:
        row = self.store.model(model_id)
        if row is None or not self.tenants.sees_id(model_id):
            raise NotFound(f"unknown {what} {model_id!r}")
        return row

    def model_info(self, model_id: str) -> tuple[dict, ModelInfo]:
        """A loaded training model's row and its base model's facts."""
        row = self.model_row(model_id)
        if model_id not in self.runtime.trainables:
            raise NotFound(f"model {model_id!r} is not loaded (the backend restarted or its session ended): create a "
                           "training client from a saved checkpoint to continue")
        return row, self.base_info(row["base_model"])

    def base_info(self, name: str) -> ModelInfo:
        """The served base model's facts (read from the runtime's table: no call into the runtime)."""
        base = self.runtime.bases.get(name)
        return base.info if base is not None else self.runtime.base(name).info  # the latter raises the 400

    def session_row(self, session_id: str) -> dict:
        """The caller's session (404 if unknown or another tenant's)."""
        row = self.store.session(session_id)
        if row is None or not self.tenants.sees_id(session_id):
            raise NotFound(f"unknown session {session_id!r}")
        return row

    def sampler_row(self, sampler_id: str, what: str = "sampler") -> dict:
        row = self.store.sampler(sampler_id)
        if row is None or not self.tenants.sees_id(sampler_id):
            raise NotFound(f"unknown {what} {sampler_id!r}")
        return row

    def checkpoint(self, path: Any, kinds: tuple[str, ...] = checkpoints.LOADABLE,
                   what: str = "path") -> tuple[CheckpointPath, Path]:
        """A tinker:// path (request field ``what``) the caller owns, and its directory (which may not exist)."""
        ref = checkpoints.parse(path, kinds, what)
        self.tenants.check_id(ref.model_id, "checkpoint owner")
        return ref, ref.directory(self.checkpoint_dir)

    # ---- futures
    def dedupe(self, model_id: str, seq_id: int | None, body: bytes) -> str | None:
        """The request id of an earlier identical request with this seq_id (an SDK retry), if any."""
        if seq_id is None:
            return None
        prev = self.store.find_duplicate(model_id, seq_id)
        if prev is None:
            return None
        if prev["req_hash"] != hashlib.sha256(body).hexdigest():
            raise BadRequest(f"seq_id {seq_id} was already used for model {model_id} with a different request")
        return str(prev["request_id"])

    def new_future(self, kind: str, model_id: str | None = None, seq_id: int | None = None, body: bytes = b"") -> str:
        req_hash = hashlib.sha256(body).hexdigest() if seq_id is not None else None
        rid = self.store.new_future(kind, model_id, seq_id, req_hash)
        self.tenants.claim("future", rid)
        return rid

    # ---- listings
    def list_checkpoints(self, model_id: str) -> list[dict[str, Any]]:
        return checkpoints.listing(self.checkpoint_dir, model_id)

    def training_run(self, row: dict) -> dict[str, Any]:
        cks = self.list_checkpoints(row["model_id"])
        tc = row["train_config"]
        last = [c for c in cks if c["checkpoint_type"] == "training"]
        last_s = [c for c in cks if c["checkpoint_type"] == "sampler"]
        return {"training_run_id": row["model_id"], "base_model": row["base_model"], "model_owner": "local",
                "is_lora": tc["rank"] > 0, "corrupted": False, "lora_rank": tc["rank"] if tc["rank"] > 0 else None,
                "last_request_time": iso(row["last_request"] or row["created"]),
                "last_checkpoint": last[-1] if last else None,
                "last_sampler_checkpoint": last_s[-1] if last_s else None,
                "user_metadata": checkpoints.metadata_of(row["user_metadata"])}
