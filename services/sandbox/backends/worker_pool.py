"""``WorkerPool``: one admin over several worker processes (``worker.urls`` in the config).

* Placement: a new sandbox goes to the live worker holding the fewest sandboxes (ties: config
  order); a worker that fails to answer ``create`` is marked dead and the next one is tried.
* A dead worker (its HTTP API unreachable) loses its sandboxes: any call on one of them raises
  ``SandboxLost`` at once (the admin records the sandbox ``failed``), and the health loop reports
  the idle ones through ``take_lost`` (the admin's reaper marks them ``failed`` too). Nothing
  waits on a dead worker, so a rollout's retry (a fresh sandbox) lands on a live one.
* A dead worker is probed again every ``health_interval_s`` and takes new sandboxes once it
  answers (it starts empty: a restarted worker removes its predecessor's leftovers).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..errors import SandboxLost, Unavailable
from .base import ExecOutput, ExecRequest, SandboxBackend, SandboxSpec, SessionOutput
from .worker_client import WorkerBackend

log = logging.getLogger(__name__)


class WorkerPool(SandboxBackend):
    name = "worker"
    supports_binds = True
    network_modes = ("none", "registry", "public")   # checked by the workers' own backends

    def __init__(self, workers: list[WorkerBackend], health_interval_s: float = 2.0):
        if not workers:
            raise ValueError("worker.urls is empty: the pool needs at least one worker")
        self.workers = workers
        self.health_interval_s = health_interval_s
        self.alive = [False] * len(workers)
        self.placement: dict[str, int] = {}   # sandbox id -> index into workers
        self._lost: dict[str, str] = {}   # sandbox id -> why, until the admin takes them
        self._monitor: asyncio.Task | None = None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "WorkerPool":
        w = config.get("worker") or {}
        auth = config["auth"]
        return cls([WorkerBackend(u, auth["key"], auth.get("header", "X-Key")) for u in w["urls"]],
                   float(w.get("health_interval_s", 2.0)))

    # --- liveness ---------------------------------------------------------------------------------

    async def _probe(self, i: int) -> bool:
        try:
            await (self.workers[i].ping() if self.alive[i] else self.workers[i].start())
        except Unavailable as e:
            if self.alive[i]:
                self._mark_dead(i, str(e))
            return False
        if not self.alive[i]:
            log.info("sandbox worker %s is up", self.workers[i].url)
        self.alive[i] = True
        return True

    def _mark_dead(self, i: int, why: str) -> None:
        self.alive[i] = False
        lost = [sid for sid, w in self.placement.items() if w == i]
        for sid in lost:
            del self.placement[sid]
            self._lost[sid] = f"its sandbox worker died ({why})"
        log.warning("sandbox worker %s is dead (%s); %d sandboxes lost", self.workers[i].url, why, len(lost))

    async def _monitor_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            await asyncio.gather(*(self._probe(i) for i in range(len(self.workers))))

    def take_lost(self) -> list[tuple[str, str]]:
        lost, self._lost = self._lost, {}
        return list(lost.items())

    async def start(self) -> None:
        await asyncio.gather(*(self._probe(i) for i in range(len(self.workers))))
        if not any(self.alive):
            raise Unavailable("no sandbox worker is reachable: " + ", ".join(w.url for w in self.workers))
        for i, w in enumerate(self.workers):   # what the workers still hold (the admin reconciles it)
            if self.alive[i]:
                self.placement.update({sid: i for sid in await w.list_live()})
        self._monitor = asyncio.create_task(self._monitor_loop())

    def limits_info(self) -> dict[str, Any]:
        return {"workers": [{"url": w.url.removesuffix("/worker/v1"), "alive": a, "sandboxes": self.load(i),
                             "limits": w.limits_info()}
                            for i, (w, a) in enumerate(zip(self.workers, self.alive))]}

    def load(self, i: int) -> int:
        return sum(1 for w in self.placement.values() if w == i)

    async def shutdown(self) -> None:
        if self._monitor:
            self._monitor.cancel()
        for w in self.workers:
            try:
                await w.shutdown()   # destroys what the worker holds, closes the client
            except Unavailable as e:
                log.warning("sandbox worker %s not reachable at shutdown: %s", w.url, e)
        self.placement.clear()

    # --- placement and calls ----------------------------------------------------------------------

    async def create(self, sandbox_id: str, spec: SandboxSpec) -> dict[str, Any]:
        tried = []
        while True:
            live = [i for i in range(len(self.workers)) if self.alive[i] and i not in tried]
            if not live:
                raise Unavailable("no live sandbox worker can take a sandbox (tried: "
                                  + ", ".join(self.workers[i].url for i in tried) + ")")
            i = min(live, key=self.load)
            tried.append(i)
            self.placement[sandbox_id] = i   # counts towards the load while it is being created
            try:
                info = await self.workers[i].create(sandbox_id, spec)
            except Unavailable as e:
                self.placement.pop(sandbox_id, None)
                self._mark_dead(i, str(e))
                continue
            except BaseException:
                self.placement.pop(sandbox_id, None)
                raise
            return {**info, "worker": self.workers[i].url}

    async def _call(self, sandbox_id: str, method: str, *args: Any) -> Any:
        i = self.placement.get(sandbox_id)
        if i is None:
            raise SandboxLost(f"sandbox {sandbox_id} lost: " + self._lost.get(sandbox_id, "on no live worker"))
        try:
            return await getattr(self.workers[i], method)(sandbox_id, *args)
        except Unavailable as e:
            if not await self._probe(i):
                raise SandboxLost(f"sandbox {sandbox_id} lost: its sandbox worker died ({e})") from e
            raise

    async def destroy(self, sandbox_id: str) -> None:
        if sandbox_id in self.placement:
            i = self.placement[sandbox_id]
            try:
                await self.workers[i].destroy(sandbox_id)
            except Unavailable:
                pass   # a dead worker's sandboxes are gone with it
            self.placement.pop(sandbox_id, None)

    async def list_live(self) -> list[str]:
        return list(self.placement)

    async def exec(self, sandbox_id: str, req: ExecRequest) -> ExecOutput:
        return await self._call(sandbox_id, "exec", req)

    async def reset(self, sandbox_id: str) -> None:
        await self._call(sandbox_id, "reset")

    async def create_session(self, sandbox_id: str, session: str, env: dict[str, str] | None = None,
                             startup_source: list[str] | None = None) -> str:
        return await self._call(sandbox_id, "create_session", session, env, startup_source)

    async def run_in_session(self, sandbox_id: str, session: str, command: str, timeout: float,
                             max_output: int) -> SessionOutput:
        return await self._call(sandbox_id, "run_in_session", session, command, timeout, max_output)

    async def close_session(self, sandbox_id: str, session: str) -> None:
        await self._call(sandbox_id, "close_session", session)

    async def read_file(self, sandbox_id: str, path: str, max_bytes: int) -> bytes:
        return await self._call(sandbox_id, "read_file", path, max_bytes)

    async def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int | None = None) -> None:
        await self._call(sandbox_id, "write_file", path, data, mode)

    async def extract_tar(self, sandbox_id: str, target_dir: str, tar_bytes: bytes) -> None:
        await self._call(sandbox_id, "extract_tar", target_dir, tar_bytes)
