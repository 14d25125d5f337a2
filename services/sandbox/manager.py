"""Sandbox lifecycle on top of one backend: records, leases with heartbeats, TTLs, the
reaper, reconciliation after a restart, and a warm pool per base/image.

Lease: every call on a sandbox (and ``heartbeat``) renews it; a sandbox idle for longer than
its lease is reaped. TTL: a hard lifetime from creation, enforced even while busy.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from .backends.base import NETWORK_MODES, ExecOutput, ExecRequest, SandboxBackend, SandboxSpec, SessionOutput
from .errors import BadRequest, Conflict, NotFound, SandboxLost, Unavailable
from .limits import Limits
from .paths import host_dir_under, session_name
from .store import SandboxRecord, Store

log = logging.getLogger(__name__)

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _known_form(sandbox_id: str) -> None:
    """An id no sandbox can have (NUL bytes, surrogates, '/', too long) is unknown like any other: 404,
    before it reaches the store or a path."""
    if not isinstance(sandbox_id, str) or not _ID.match(sandbox_id):
        raise NotFound(f"unknown sandbox {str(sandbox_id)[:80]!r}")


@dataclass
class LifecycleConfig:
    lease_s: float = 300.0          # idle time after which a sandbox is reaped
    ttl_s: float = 7200.0           # default hard lifetime (longer than rollout + scoring)
    max_ttl_s: float = 86400.0
    reaper_interval_s: float = 2.0
    max_sandboxes: int = 256
    warm_pool_size: int = 0         # pre-created sandboxes kept per (base, limits)
    warm_pool_max_age_s: float = 600.0

    @classmethod
    def from_mapping(cls, d: dict[str, Any] | None) -> "LifecycleConfig":
        d = dict(d or {})
        pool = d.pop("warm_pool", None) or {}
        if "size" in pool:
            d["warm_pool_size"] = pool["size"]
        if "max_age_s" in pool:
            d["warm_pool_max_age_s"] = pool["max_age_s"]
        return cls(**d)


class SandboxManager:
    def __init__(self, backend: SandboxBackend, store: Store, lifecycle: LifecycleConfig, default_limits: Limits,
                 images: dict[str, str | None] | None = None, base_sources: list[str] | None = None):
        self.backend = backend
        self.store = store
        self.cfg = lifecycle
        self.default_limits = default_limits
        self.images = images or {}           # image name -> base dir (local backend); set by the operator
        self.base_sources = list(base_sources or [])   # real host dirs that base_dir / image paths must lie in
        self._reserved: set[str] = set()     # sandbox ids being created (counted against max_sandboxes)
        self.records: dict[str, SandboxRecord] = {}
        self.busy: dict[str, int] = {}
        self._pool: dict[tuple, list[tuple[str, float]]] = {}   # key -> [(sandbox id, created)]
        self._pool_info: dict[str, dict] = {}                     # backend info of pooled sandboxes
        self._pool_tasks: set[asyncio.Task] = set()
        self._reaper: asyncio.Task | None = None
        self._closing = False

    # --- start / stop ---------------------------------------------------------------------------

    async def start(self) -> None:
        await self.backend.start()
        await self.reconcile()
        self._reaper = asyncio.create_task(self._reap_loop())

    async def reconcile(self) -> list[str]:
        """After a (re)start: adopt live sandboxes whose lease holds, reap the rest, and
        destroy backend sandboxes nobody has a record of. Returns the reaped ids."""
        live = set(await self.backend.list_live())
        reaped = []
        for rec in self.store.live():
            if rec.sandbox_id in live and rec.backend == self.backend.name and not rec.expired():
                self.records[rec.sandbox_id] = rec
                log.info("adopted sandbox %s after restart", rec.sandbox_id)
                continue
            if rec.sandbox_id in live:
                await self.backend.destroy(rec.sandbox_id)
            self._end(rec, "orphaned", "found after admin restart" + (" (expired)" if rec.expired() else ""))
            reaped.append(rec.sandbox_id)
        for sid in live - set(self.records):
            await self.backend.destroy(sid)
            reaped.append(sid)
        if reaped:
            log.warning("reaped %d orphaned sandboxes: %s", len(reaped), ", ".join(sorted(reaped)))
        return reaped

    async def shutdown(self) -> None:
        self._closing = True
        if self._reaper:
            self._reaper.cancel()
        for t in list(self._pool_tasks):
            t.cancel()
        await asyncio.gather(*self._pool_tasks, return_exceptions=True)
        for sid in list(self.records):
            await self._destroy(sid, "stopped", "manager shutdown")
        for entries in self._pool.values():
            for sid, _ in entries:
                await self.backend.destroy(sid)
        self._pool.clear()
        await self.backend.shutdown()

    # --- create / close -------------------------------------------------------------------------

    def resolve_base(self, image: str | None, base_dir: str | None) -> str | None:
        """Which host directory becomes /workspace: a configured image's, or a caller's
        ``base_dir`` / absolute ``image``, which must lie under ``base_sources`` (the prepared
        bases): the admin copies it as root, so an arbitrary path would hand out host files."""
        if base_dir:
            return host_dir_under(base_dir, self.base_sources, "base_dir")
        if image and image in self.images:
            return self.images[image]
        if image and image.startswith("/"):
            return host_dir_under(image, self.base_sources, "image")
        return None

    async def create(self, *, image: str | None = None, base_dir: str | None = None,
                     limits: dict[str, Any] | None = None, lease_s: float | None = None, ttl_s: float | None = None,
                     sandbox_id: str | None = None, env: dict[str, str] | None = None,
                     tags: dict[str, str | None] | None = None,
                     binds: list[dict[str, str]] | None = None, network: str | None = None) -> SandboxRecord:
        if self._closing:
            raise Unavailable("manager is shutting down")
        lim = Limits.from_mapping(limits, self.default_limits)
        lease = self._positive(lease_s, self.cfg.lease_s, "lease_s")
        ttl = min(self._positive(ttl_s, self.cfg.ttl_s, "ttl_s"), self.cfg.max_ttl_s)
        base = self.resolve_base(image, base_dir)
        spec = SandboxSpec(image=image, base_dir=base, limits=lim, env=dict(env or {}), binds=list(binds or []),
                           network=network or "none")
        if spec.binds and not self.backend.supports_binds:
            raise BadRequest(f"the {self.backend.name} backend does not support binds")
        if spec.network not in NETWORK_MODES:
            raise BadRequest(f"network must be one of {', '.join(NETWORK_MODES)}, not {spec.network!r}")
        if spec.network != "none" and spec.network not in self.backend.network_modes:
            raise BadRequest(f"the {self.backend.name} backend has no network mode {spec.network!r} "
                             f"(it offers: {', '.join(self.backend.network_modes)}); use the docker backend")
        if sandbox_id is not None:
            if not _ID.match(sandbox_id):
                raise BadRequest(f"invalid sandbox_id {sandbox_id!r}")
            if sandbox_id in self.records or sandbox_id in self._reserved or self.store.get(sandbox_id):
                raise Conflict(f"sandbox {sandbox_id} already exists")
        # The count and the id are reserved before the first await: concurrent starts cannot
        # overshoot max_sandboxes or create one id twice.
        if len(self.records) + len(self._reserved) >= self.cfg.max_sandboxes:
            raise Unavailable(f"too many sandboxes ({self.cfg.max_sandboxes}); close some first")
        slot = sandbox_id or f"sb-{secrets.token_hex(6)}"
        self._reserved.add(slot)
        try:
            return await self._create_reserved(slot, sandbox_id is None, spec, lease, ttl, tags)
        finally:
            self._reserved.discard(slot)

    async def _create_reserved(self, slot: str, poolable: bool, spec: SandboxSpec, lease: float, ttl: float,
                               tags: dict[str, str | None] | None) -> SandboxRecord:
        image, base, lim = spec.image, spec.base_dir, spec.limits
        sid, info = None, None
        key = self._pool_key(spec)
        if poolable and not spec.env and not spec.binds and spec.network == "none":
            sid, info = self._take_from_pool(key)
        if sid is None:
            sid = slot
            info = await self.backend.create(sid, spec)
        now = time.time()
        tags = tags or {}
        rec = SandboxRecord(sandbox_id=sid, backend=self.backend.name, state="running", image=image, base_dir=base,
                            limits=lim.to_dict(), created_at=now, lease_s=lease, ttl_s=ttl, last_seen=now,
                            info=info or {}, user_id=tags.get("user_id"), experiment_id=tags.get("experiment_id"),
                            namespace=tags.get("namespace"))
        self.records[sid] = rec
        self.store.put(rec)
        if self.cfg.warm_pool_size > 0 and not spec.env and not spec.binds and spec.network == "none":
            self._refill(key, spec)
        return rec

    async def close(self, sandbox_id: str) -> None:
        _known_form(sandbox_id)
        if sandbox_id not in self.records:
            rec = self.store.get(sandbox_id)
            if rec is None:
                raise NotFound(f"unknown sandbox {sandbox_id}")
            return  # already ended: closing is idempotent
        await self._destroy(sandbox_id, "stopped", "closed by client")

    async def _destroy(self, sandbox_id: str, state: str, reason: str) -> None:
        rec = self.records.pop(sandbox_id, None)
        try:
            await self.backend.destroy(sandbox_id)
        finally:
            if rec:
                self._end(rec, state, reason)

    def _end(self, rec: SandboxRecord, state: str, reason: str) -> None:
        rec.state, rec.end_reason, rec.ended_at = state, reason, time.time()
        self.store.put(rec)
        log.info("sandbox %s %s: %s", rec.sandbox_id, state, reason)

    # --- access -----------------------------------------------------------------------------------

    def get(self, sandbox_id: str) -> SandboxRecord:
        """Any record (live or ended); 404 if unknown."""
        _known_form(sandbox_id)
        rec = self.records.get(sandbox_id) or self.store.get(sandbox_id)
        if rec is None:
            raise NotFound(f"unknown sandbox {sandbox_id}")
        return rec

    @asynccontextmanager
    async def using(self, sandbox_id: str) -> AsyncIterator[SandboxRecord]:
        """A live sandbox for one call: renews its lease and keeps the reaper's lease check
        off while the call runs."""
        _known_form(sandbox_id)
        rec = self.records.get(sandbox_id)
        if rec is None:
            ended = self.store.get(sandbox_id)
            if ended is None:
                raise NotFound(f"unknown sandbox {sandbox_id}")
            raise Conflict(f"sandbox {sandbox_id} is {ended.state} ({ended.end_reason})")
        rec.last_seen = time.time()
        self.busy[sandbox_id] = self.busy.get(sandbox_id, 0) + 1
        try:
            yield rec
        except SandboxLost as e:   # its worker died: failed, never retried on this id
            if self.records.pop(sandbox_id, None):
                self._end(rec, "failed", str(e))
            raise
        finally:
            self.busy[sandbox_id] -= 1
            rec.last_seen = time.time()

    async def heartbeat(self, sandbox_id: str) -> SandboxRecord:
        async with self.using(sandbox_id) as rec:
            self.store.put(rec)
            return rec

    async def exec(self, sandbox_id: str, req: ExecRequest) -> ExecOutput:
        if not math.isfinite(req.timeout) or req.timeout <= 0:
            raise BadRequest("timeout must be a finite number > 0")
        if req.max_output < 0:
            raise BadRequest("max_output must be >= 0")
        async with self.using(sandbox_id):
            return await self.backend.exec(sandbox_id, req)

    async def create_session(self, sandbox_id: str, session: str, env: dict[str, str] | None,
                             startup_source: list[str] | None) -> str:
        async with self.using(sandbox_id):
            return await self.backend.create_session(sandbox_id, session_name(session), env, startup_source)

    async def run_in_session(self, sandbox_id: str, session: str, command: str, timeout: float,
                             max_output: int) -> SessionOutput:
        if not math.isfinite(timeout) or timeout <= 0:
            raise BadRequest("timeout must be a finite number > 0")
        async with self.using(sandbox_id):
            return await self.backend.run_in_session(sandbox_id, session_name(session), command, timeout, max_output)

    async def close_session(self, sandbox_id: str, session: str) -> None:
        async with self.using(sandbox_id):
            await self.backend.close_session(sandbox_id, session_name(session))

    async def read_file(self, sandbox_id: str, path: str, max_bytes: int) -> bytes:
        async with self.using(sandbox_id):
            return await self.backend.read_file(sandbox_id, path, max_bytes)

    async def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int | None = None) -> None:
        async with self.using(sandbox_id):
            await self.backend.write_file(sandbox_id, path, data, mode)

    async def extract_tar(self, sandbox_id: str, target_dir: str, data: bytes) -> None:
        async with self.using(sandbox_id):
            await self.backend.extract_tar(sandbox_id, target_dir, data)

    async def reset(self, sandbox_id: str) -> None:
        async with self.using(sandbox_id):
            await self.backend.reset(sandbox_id)

    # --- reaper -----------------------------------------------------------------------------------

    async def reap_once(self) -> list[str]:
        now = time.time()
        reaped = []
        for sid, why in self.backend.take_lost():
            rec = self.records.pop(sid, None)
            if rec:
                self._end(rec, "failed", why)
        for sid, rec in list(self.records.items()):
            why = rec.expired(now)
            if why == "lease" and self.busy.get(sid):
                continue  # a long command is running: the lease only ends when idle
            if why:
                await self._destroy(sid, "expired", f"{why} expired")
                reaped.append(sid)
        for entries in self._pool.values():
            for entry in [e for e in entries if time.monotonic() - e[1] > self.cfg.warm_pool_max_age_s]:
                entries.remove(entry)
                await self.backend.destroy(entry[0])
        return reaped

    async def _reap_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.reaper_interval_s)
            try:
                await self.reap_once()
            except Exception:
                log.exception("reaper pass failed")

    # --- warm pool --------------------------------------------------------------------------------

    @staticmethod
    def _pool_key(spec: SandboxSpec) -> tuple:
        return (spec.image, os.path.realpath(spec.base_dir) if spec.base_dir else None,
                tuple(sorted(spec.limits.to_dict().items())))

    def _take_from_pool(self, key: tuple) -> tuple[str | None, dict | None]:
        entries = self._pool.get(key)
        if not entries:
            return None, None
        sid, _ = entries.pop(0)
        return sid, self._pool_info.pop(sid, {})

    def _refill(self, key: tuple, spec: SandboxSpec) -> None:
        have = len(self._pool.get(key, [])) + sum(1 for t in self._pool_tasks if t.get_name() == repr(key))
        for _ in range(self.cfg.warm_pool_size - have):
            async def fill() -> None:
                sid = f"sb-{secrets.token_hex(6)}"
                info = await self.backend.create(sid, spec)
                if self._closing:
                    await self.backend.destroy(sid)
                    return
                self._pool_info[sid] = info
                self._pool.setdefault(key, []).append((sid, time.monotonic()))
            t = asyncio.create_task(fill(), name=repr(key))
            self._pool_tasks.add(t)
            t.add_done_callback(self._pool_tasks.discard)

    def pool_size(self) -> int:
        return sum(len(v) for v in self._pool.values())

    @staticmethod
    def _positive(value: float | None, default: float, name: str) -> float:
        if value is None:
            return default
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise BadRequest(f"{name} must be a finite number > 0, got {value!r}")
        return float(value)
