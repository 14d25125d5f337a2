"""``RockBackend``: sandboxes on a real ROCK admin, through rl-rock's own SDK client
(``rock.sdk.sandbox.client.Sandbox``), so a ROCK cluster is used exactly as ROCK's users do.
Our sandbox id is passed to ROCK as its ``sandbox_id``.

Limits: ROCK applies memory/cpus (and ``disk``); the wall-clock timeout of ``execute`` is
ROCK's; stdin and binary reads go through upload / base64 commands.
"""

from __future__ import annotations

import base64
import io
import shlex
import tarfile
import tempfile
import time
from typing import Any

from rock.actions import BashAction, CloseBashSessionRequest, Command, CreateBashSessionRequest, UploadMode
from rock.sdk.sandbox.client import Sandbox
from rock.sdk.sandbox.config import SandboxConfig

from ..errors import BadRequest, NotFound, SandboxError
from .base import ExecOutput, ExecRequest, SandboxBackend, SandboxSpec, SessionOutput


class RockBackend(SandboxBackend):
    name = "rock"

    def __init__(self, base_url: str, cluster: str = "default", extra_headers: dict[str, str] | None = None,
                 default_image: str = "python:3.11", startup_timeout: float = 300.0):
        self.base_url = base_url
        self.cluster = cluster
        self.extra_headers = dict(extra_headers or {})
        self.default_image = default_image
        self.startup_timeout = startup_timeout
        self.sandboxes: dict[str, Any] = {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "RockBackend":
        r = config.get("rock") or {}
        return cls(r.get("base_url", "http://127.0.0.1:8080"), r.get("cluster", "default"),
                   r.get("extra_headers") or {}, r.get("default_image", "python:3.11"),
                   float(r.get("startup_timeout", 300)))

    async def create(self, sandbox_id: str, spec: SandboxSpec) -> dict[str, Any]:
        lim = spec.limits
        cfg = SandboxConfig(base_url=self.base_url, image=spec.image or self.default_image, cluster=self.cluster,
                            extra_headers=self.extra_headers, memory=f"{lim.memory_mb}m", cpus=lim.cpus,
                            disk=f"{lim.disk_mb}m", sandbox_id=sandbox_id, startup_timeout=self.startup_timeout)
        sb = Sandbox(cfg)
        try:
            await sb.start()
        except Exception as e:
            raise SandboxError(f"ROCK start failed: {e}") from e
        self.sandboxes[sandbox_id] = sb
        mk = await self.exec(sandbox_id, ExecRequest(argv=["mkdir", "-p", "/workspace"], cwd="/", timeout=60))
        if mk.exit_code != 0:   # ROCK runs nothing with a cwd that does not exist
            err = mk.stderr.decode(errors="replace")
            raise SandboxError(f"ROCK sandbox {sandbox_id}: cannot create /workspace: {err}")
        if spec.base_dir:
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tf:
                tf.add(spec.base_dir, arcname=".")
            await self.extract_tar(sandbox_id, "/workspace", buf.getvalue())
        return {"host_name": sb.host_name, "host_ip": sb.host_ip, "rock_sandbox_id": sb.sandbox_id}

    def _get(self, sandbox_id: str) -> Any:
        sb = self.sandboxes.get(sandbox_id)
        if sb is None:
            raise NotFound(f"sandbox {sandbox_id} is not known to this ROCK backend")
        return sb

    async def _upload(self, sb: Any, data: bytes) -> str:
        target = f"/tmp/.lts-{time.monotonic_ns()}"
        with tempfile.NamedTemporaryFile() as f:
            f.write(data)
            f.flush()
            r = await sb.upload_by_path(f.name, target, upload_mode=UploadMode.DIRECT)
        if not r.success:
            raise SandboxError(f"ROCK upload failed: {r.message}")
        return target

    async def exec(self, sandbox_id: str, req: ExecRequest) -> ExecOutput:
        sb = self._get(sandbox_id)
        argv = req.argv
        if req.stdin is not None:
            path = await self._upload(sb, req.stdin)
            argv = ["/bin/sh", "-c", f'"$@" < {path}; rc=$?; rm -f {path}; exit $rc', "sh", *argv]
        if req.merge_stderr:
            argv = ["/bin/sh", "-c", '"$@" 2>&1', "sh", *argv]
        start = time.monotonic()
        try:
            r = await sb.execute(Command(command=argv, timeout=req.timeout, cwd=req.cwd, env=req.env or None))
        except Exception as e:
            raise SandboxError(f"ROCK execute failed: {e}") from e
        out, err = r.stdout.encode(), r.stderr.encode()
        return ExecOutput(exit_code=r.exit_code if r.exit_code is not None else -1, stdout=out[:req.max_output],
                          stderr=err[:req.max_output], truncated=max(len(out), len(err)) > req.max_output,
                          duration_s=time.monotonic() - start)

    async def create_session(self, sandbox_id: str, session: str, env: dict[str, str] | None = None,
                             startup_source: list[str] | None = None) -> str:
        r = await self._get(sandbox_id).create_session(
            CreateBashSessionRequest(session=session, env=env, startup_source=startup_source or []))
        return r.output

    async def run_in_session(self, sandbox_id: str, session: str, command: str, timeout: float,
                             max_output: int) -> SessionOutput:
        try:
            obs = await self._get(sandbox_id)._run_in_session(
                BashAction(session=session, command=command, timeout=timeout, check="ignore"))
        except Exception as e:
            return SessionOutput("", -1, "timeout" in str(e).lower(), False, str(e))
        return SessionOutput(obs.output[:max_output], obs.exit_code if obs.exit_code is not None else -1,
                             False, len(obs.output) > max_output, obs.failure_reason or "")

    async def close_session(self, sandbox_id: str, session: str) -> None:
        await self._get(sandbox_id).close_session(CloseBashSessionRequest(session=session))

    async def read_file(self, sandbox_id: str, path: str, max_bytes: int) -> bytes:
        out = await self.exec(sandbox_id, ExecRequest(argv=["base64", "-w0", "--", path], timeout=60,
                                                      max_output=max_bytes * 2))
        if out.exit_code != 0:
            raise BadRequest(f"cannot read {path}: {out.stderr.decode(errors='replace').strip()}")
        return base64.b64decode(out.stdout)

    async def extract_tar(self, sandbox_id: str, target_dir: str, tar_bytes: bytes) -> None:
        sb = self._get(sandbox_id)
        path = await self._upload(sb, tar_bytes)
        z = "z" if tar_bytes[:2] == b"\x1f\x8b" else ""
        cmd = (f"mkdir -p -- {shlex.quote(target_dir)} && tar -x{z}f {path} --no-same-owner -C "
               f"{shlex.quote(target_dir)}; rc=$?; rm -f {path}; exit $rc")
        out = await self.exec(sandbox_id, ExecRequest(argv=["/bin/sh", "-c", cmd], timeout=300, merge_stderr=True))
        if out.exit_code != 0:
            raise BadRequest(f"cannot extract into {target_dir}: {out.stdout.decode(errors='replace')}")

    async def destroy(self, sandbox_id: str) -> None:
        sb = self.sandboxes.pop(sandbox_id, None)
        if sb is not None:
            await sb.stop()

    async def list_live(self) -> list[str]:
        return list(self.sandboxes)
