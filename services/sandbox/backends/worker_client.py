"""``WorkerBackend``: the admin's view of a separate worker process (worker.py) over HTTP."""

from __future__ import annotations

import base64
import logging
from typing import Any

import httpx

from ..errors import Unavailable, error_for_status
from .base import ExecOutput, ExecRequest, SandboxBackend, SandboxSpec, SessionOutput

log = logging.getLogger(__name__)

class WorkerBackend(SandboxBackend):
    name = "worker"
    supports_binds = True   # checked by the worker's own backend
    network_modes = ("none", "registry", "public")

    def __init__(self, url: str, key: str, header: str = "X-Key"):
        self.url = url.rstrip("/") + "/worker/v1"
        self._client = httpx.AsyncClient(headers={header: key}, timeout=httpx.Timeout(None, connect=10))
        self._limits: dict[str, Any] = {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "WorkerBackend":
        w = config.get("worker") or {}
        url = w.get("url") or f"http://{w.get('host', '127.0.0.1')}:{w.get('port', 22555)}"
        return cls(url, config["auth"]["key"], config["auth"].get("header", "X-Key"))

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            r = await self._client.post(self.url + path, json=body)
        except httpx.TransportError as e:
            raise Unavailable(f"sandbox worker {self.url} unreachable: {e}") from e
        data = r.json()
        if r.status_code != 200:
            raise error_for_status(r.status_code, data.get("error") or r.text)
        return data["result"]

    async def start(self) -> None:
        try:
            r = await self._client.get(self.url.rsplit("/worker/v1", 1)[0] + "/health")
            r.raise_for_status()
        except httpx.HTTPError as e:
            raise Unavailable(f"sandbox worker {self.url} is not reachable: {e}") from e
        self._limits = (r.json().get("result") or {}).get("limits") or {}
        log.info("sandbox worker limits: cgroups %s, enforced %s", self._limits.get("cgroups"),
                 ", ".join(self._limits.get("enforced") or []) or "none")
        for limit, fallback in (self._limits.get("fallback") or {}).items():
            log.warning("!!! sandbox %s limit NOT enforced by cgroups: falls back to %s", limit, fallback)

    async def ping(self) -> None:
        """Raises Unavailable unless the worker answers /health."""
        try:
            (await self._client.get(self.url.rsplit("/worker/v1", 1)[0] + "/health", timeout=10)).raise_for_status()
        except httpx.HTTPError as e:
            raise Unavailable(f"sandbox worker {self.url} is not reachable: {e}") from e

    def limits_info(self) -> dict[str, Any]:
        return self._limits

    async def shutdown(self) -> None:
        try:
            await super().shutdown()
        finally:
            await self._client.aclose()

    async def create(self, sandbox_id: str, spec: SandboxSpec) -> dict[str, Any]:
        return await self._post("/create", {"sandbox_id": sandbox_id, "image": spec.image, "base_dir": spec.base_dir,
                                            "limits": spec.limits.to_dict(), "env": spec.env, "binds": spec.binds,
                                            "network": spec.network})

    async def destroy(self, sandbox_id: str) -> None:
        await self._post("/destroy", {"sandbox_id": sandbox_id})

    async def reset(self, sandbox_id: str) -> None:
        await self._post("/reset", {"sandbox_id": sandbox_id})

    async def list_live(self) -> list[str]:
        try:
            r = await self._client.get(self.url + "/list")
        except httpx.TransportError as e:
            raise Unavailable(f"sandbox worker {self.url} unreachable: {e}") from e
        return r.json()["result"]

    async def exec(self, sandbox_id: str, req: ExecRequest) -> ExecOutput:
        body = {"sandbox_id": sandbox_id, "argv": req.argv, "timeout": req.timeout, "max_output": req.max_output,
                "cwd": req.cwd, "env": req.env, "merge_stderr": req.merge_stderr,
                "stdin_b64": base64.b64encode(req.stdin).decode() if req.stdin is not None else None}
        return ExecOutput.from_json(await self._post("/exec", body))

    async def create_session(self, sandbox_id: str, session: str, env: dict[str, str] | None = None,
                             startup_source: list[str] | None = None) -> str:
        return await self._post("/create_session", {"sandbox_id": sandbox_id, "session": session, "env": env,
                                                    "startup_source": startup_source})

    async def run_in_session(self, sandbox_id: str, session: str, command: str, timeout: float,
                             max_output: int) -> SessionOutput:
        r = await self._post("/run_in_session", {"sandbox_id": sandbox_id, "session": session, "command": command,
                                                 "timeout": timeout, "max_output": max_output})
        return SessionOutput(**r)

    async def close_session(self, sandbox_id: str, session: str) -> None:
        await self._post("/close_session", {"sandbox_id": sandbox_id, "session": session})
