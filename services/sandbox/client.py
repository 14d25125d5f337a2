"""Async Python client of the sandbox manager, for cookbook/ and the verifier.

    async with SandboxManagerClient("http://127.0.0.1:18080", key) as mgr:
        sb = await mgr.create(base_dir="datasets/.../repo", limits={"memory_mb": 1024})
        r = await sb.run("git status && python -m pytest -q", timeout=60)
        await sb.close()

``RemoteSandbox`` implements ``services.common.sandbox_api.Sandbox``. The same client talks to a
real ROCK admin with ``flavor="rock"`` (only ROCK's own calls are used then: base_dir is
uploaded after start, heartbeat is a status call, reset is unavailable).
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import shlex
import tarfile
import time
from typing import Any

import httpx

from services.common.config import load_config
from services.common.sandbox_api import ExecResult

from .errors import BadRequest, SandboxError, error_for_status

PREFIX = "/apis/envs/sandbox/v1"
UPSTREAM_LOST = "Upstream server is not reachable"   # ROCK's transient proxy error
UPSTREAM_RETRIES = 3


class SandboxManagerClient:
    def __init__(self, base_url: str, key: str | None = None, *, key_header: str = "X-Key",
                 extra_headers: dict[str, str] | None = None, cluster: str | None = None, flavor: str = "local",
                 http_margin_s: float = 30.0):
        if flavor not in ("local", "rock"):
            raise ValueError("flavor must be 'local' (our manager) or 'rock' (a ROCK admin)")
        headers = dict(extra_headers or {})
        if key:
            headers[key_header] = key
        if cluster:
            headers["X-Cluster"] = cluster
        self.base_url = base_url.rstrip("/")
        self.flavor = flavor
        self.http_margin_s = http_margin_s
        self._http = httpx.AsyncClient(base_url=self.base_url + PREFIX, headers=headers,
                                       timeout=httpx.Timeout(300.0, connect=10.0))

    @classmethod
    def from_config(cls, path: str | None = None) -> "SandboxManagerClient":
        """From the ``sandbox:`` section of config/harbor.yaml (templates/harbor.yaml)."""
        s = load_config("harbor", path).get("sandbox") or {}
        key = os.environ.get("LTS_SANDBOX_KEY") or s.get("key")
        return cls(s.get("base_url", "http://127.0.0.1:18080"), key, key_header=s.get("key_header", "X-Key"),
                   extra_headers=s.get("extra_headers"), cluster=s.get("cluster"), flavor=s.get("flavor", "local"))

    async def __aenter__(self) -> "SandboxManagerClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any) -> Any:
        """One API call; returns ``result`` of the envelope or raises a SandboxError subclass
        (NotFound, BadRequest, ...) carrying the server's message."""
        kw: dict[str, Any] = dict(kwargs)
        if timeout is not None:
            kw["timeout"] = httpx.Timeout(timeout, connect=10.0)
        for attempt in range(UPSTREAM_RETRIES + 1):
            r = await self._http.request(method, path, **kw)
            try:
                data = r.json()
            except ValueError:
                raise error_for_status(r.status_code,
                                       f"{method} {path}: HTTP {r.status_code}: {r.text[:500]}") from None
            # a real ROCK admin's proxy sometimes loses its keep-alive connection to the sandbox's
            # rocklet; the request never reached the sandbox, so sending it again is safe
            if self.flavor != "rock" or UPSTREAM_LOST not in str(data.get("error")) or attempt == UPSTREAM_RETRIES:
                break
            await asyncio.sleep(0.5 * (attempt + 1))
        if r.status_code >= 400:
            raise error_for_status(r.status_code, f"{method} {path}: {data.get('error') or data}")
        if data.get("status") != "Success":
            raise CommandFailed(data.get("error") or data.get("message") or "failed", data.get("result"))
        return data.get("result")

    async def create(self, base_dir: str | os.PathLike | None = None, *, image: str | None = None,
                     limits: dict[str, Any] | None = None, ttl_s: float | None = None, lease_s: float | None = None,
                     env: dict[str, str] | None = None, binds: list[dict[str, str]] | None = None,
                     network: str | None = None) -> "RemoteSandbox":
        """A new sandbox whose /workspace is a copy-on-write view of ``base_dir``. ``binds``:
        host paths bound read-only, ``[{"source": host path, "target": "/run/..."}]`` (local
        backend; sources under the admin's ``local.bind_sources``). ``network``: ``none`` (default),
        ``registry`` (only the manager's package/upstream-file mirror) or ``public`` (docker backend)."""
        body: dict[str, Any] = {"image": image or "local"}
        if self.flavor == "local":
            body.update(base_dir=os.fspath(base_dir) if base_dir else None, limits=limits, ttl_s=ttl_s,
                        lease_s=lease_s, env=env)
            if binds:
                body["binds"] = binds
            if network and network != "none":
                body["network"] = network
        else:
            if binds:
                raise BadRequest("binds are not available with a ROCK admin")
            if network and network != "none":
                raise BadRequest("network modes other than none are not available with a ROCK admin")
            lim = limits or {}
            if "memory_mb" in lim:
                body["memory"] = f"{lim['memory_mb']}m"
            if "cpus" in lim:
                body["cpus"] = lim["cpus"]
            if lease_s:
                body["auto_clear_time_minutes"] = max(1, int(lease_s // 60))
        result = await self.call("POST", "/start_async", json=body)
        sb = RemoteSandbox(self, result["sandbox_id"])
        if self.flavor == "rock":
            await sb.wait_alive()
            res = await sb.run("mkdir -p /workspace", cwd="/")   # ROCK runs nothing in a missing cwd
            if res.exit_code != 0:
                raise SandboxError(f"ROCK sandbox {sb.sandbox_id}: cannot create /workspace: {res.output}")
            if base_dir:
                await sb.upload_dir(os.fspath(base_dir), "/workspace")
        return sb

    async def attach(self, sandbox_id: str) -> "RemoteSandbox":
        await self.call("GET", "/get_status", params={"sandbox_id": sandbox_id})
        return RemoteSandbox(self, sandbox_id)

    async def list(self) -> list[dict[str, Any]]:
        return await self.call("GET", "/list")


class CommandFailed(SandboxError):
    """The server answered status "Failed" (e.g. a session command exited non-zero with check)."""

    status_code = 200

    def __init__(self, message: str, result: Any = None):
        super().__init__(message)
        self.result = result


class RemoteSandbox:
    """One sandbox behind the manager; implements services.common.sandbox_api.Sandbox."""

    def __init__(self, client: SandboxManagerClient, sandbox_id: str):
        self.client = client
        self.sandbox_id = sandbox_id
        self.closed = False

    def _body(self, **kw: Any) -> dict[str, Any]:
        return {"sandbox_id": self.sandbox_id, **kw}

    async def execute(self, cmd: str, timeout: float = 60.0, max_output: int = 100_000, cwd: str | None = "/workspace",
                      env: dict[str, str] | None = None, merge_output: bool = False) -> dict[str, Any]:
        """Raw ``execute``: {stdout, stderr, exit_code[, timed_out, truncated, duration_s]}."""
        if self.client.flavor == "local":
            body = self._body(command=cmd, timeout=timeout, cwd=cwd, env=env, max_output=max_output,
                              merge_output=merge_output)
        else:   # ROCK runs a string as one program name without shell, and env replaces the whole environment
            exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in (env or {}).items())
            body = self._body(command=exports + cmd, timeout=timeout, cwd=cwd, shell=True)
        return await self.client.call("POST", "/execute", json=body, timeout=timeout + self.client.http_margin_s)

    async def run(self, cmd: str, timeout: float = 60.0, max_output: int = 100_000, cwd: str = "/workspace",
                  env: dict[str, str] | None = None) -> ExecResult:
        r = await self.execute(cmd, timeout, max_output, cwd, env, merge_output=True)
        output = r.get("stdout", "") + r.get("stderr", "")
        truncated = bool(r.get("truncated")) or len(output) > max_output
        exit_code = r.get("exit_code")
        return ExecResult(exit_code=-1 if exit_code is None else exit_code, output=output[:max_output],
                          timed_out=bool(r.get("timed_out")), truncated=truncated,
                          duration_s=float(r.get("duration_s", 0.0)))

    async def read_bytes(self, path: str) -> bytes:
        if self.client.flavor == "local":
            r = await self.client.call("POST", "/read_file", json=self._body(path=path, encoding="base64"))
            return base64.b64decode(r["content"])
        res = await self.run(f"base64 -w0 -- {shlex.quote(path)}", max_output=1 << 30)
        if res.exit_code != 0:
            raise BadRequest(f"cannot read {path}: {res.output}")
        return base64.b64decode(res.output)

    async def read_file(self, path: str) -> str:
        r = await self.client.call("POST", "/read_file", json=self._body(path=path))
        return r["content"]

    async def write_file(self, path: str, content: str | bytes, mode: int | None = None) -> None:
        if isinstance(content, bytes):
            body = self._body(path=path, content=base64.b64encode(content).decode(), encoding="base64", mode=mode)
            if self.client.flavor == "rock":
                raise BadRequest("binary write_file needs the local manager; use upload_dir")
        else:
            body = self._body(path=path, content=content, mode=mode)
        await self.client.call("POST", "/write_file", json=body)
        if mode is not None and self.client.flavor == "rock":
            await self.run(f"chmod {mode:o} -- {shlex.quote(path)}")

    async def upload_dir(self, local_dir: str, remote_dir: str) -> None:
        """Copy a host directory into the sandbox (tar, extracted inside the sandbox)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tf:
            tf.add(local_dir, arcname=".")
        data = buf.getvalue()
        if self.client.flavor == "local":
            await self.client.call("POST", "/upload", data={"sandbox_id": self.sandbox_id, "target_path": remote_dir,
                                                            "extract": "tar"},
                                   files={"file": ("upload.tar.gz", data, "application/gzip")})
            return
        tmp = f"/tmp/.lts-upload-{os.urandom(4).hex()}.tar.gz"
        await self.client.call("POST", "/upload", data={"sandbox_id": self.sandbox_id, "target_path": tmp},
                               files={"file": ("upload.tar.gz", data, "application/gzip")})
        res = await self.run(f"mkdir -p {shlex.quote(remote_dir)} && tar -xzf {tmp} --no-same-owner -C "
                             f"{shlex.quote(remote_dir)}; rc=$?; rm -f {tmp}; exit $rc", cwd="/")
        if res.exit_code != 0:
            raise BadRequest(f"upload_dir failed: {res.output}")

    async def heartbeat(self) -> None:
        if self.client.flavor == "local":
            await self.client.call("POST", "/heartbeat", json=self._body())
        else:
            await self.status()

    async def reset(self) -> float:
        """Workspace back to its base (kills running commands); returns the server's seconds."""
        r = await self.client.call("POST", "/reset", json=self._body())
        return r["duration_s"]

    async def status(self) -> dict[str, Any]:
        return await self.client.call("GET", "/get_status", params={"sandbox_id": self.sandbox_id})

    async def wait_alive(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not (await self.status()).get("is_alive"):
            if time.monotonic() > deadline:
                raise SandboxError(f"sandbox {self.sandbox_id} not alive after {timeout}s")
            await asyncio.sleep(1.0)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.client.call("POST", "/stop", json=self._body())
