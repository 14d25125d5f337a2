"""``DockerBackend``: one container per sandbox through the Docker SDK (docker>=7).

Each container: ``network_mode="none"``, memory/pids/CPU limits, ``cap_drop=["ALL"]``,
``no-new-privileges``, a non-root user, a size-capped tmpfs /tmp, and ``sleep infinity`` as
its main process; commands run with ``docker exec`` under ``timeout -s KILL``. Past the
timeout (setsid children can outlive ``timeout``) every process of the sandbox user is
killed with ``kill -9 -1`` through the API; ``destroy`` kills and removes the container
through the API (killing the SDK call would leave it running: shared doc §3.5).
Containers carry labels ``lts.sandbox=<id>`` and ``lts.worker=<name>`` so leftovers of a
dead manager are found and removed at start.
"""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
import time
from typing import Any

from ..errors import BadRequest, NotFound, SandboxError
from .base import Backend, ExecOutput, ExecRequest, SandboxSpec


class DockerBackend(Backend):
    name = "docker"

    def __init__(self, client: Any, worker_name: str = "local", default_image: str = "python:3.11-slim",
                 user: str = "65534:65534", workdir: str = "/workspace"):
        self.docker = client
        self.worker_name = worker_name
        self.default_image = default_image
        self.user = user
        self.workdir = workdir
        self.containers: dict[str, Any] = {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "DockerBackend":
        import docker
        d = config.get("docker") or {}
        client = docker.DockerClient(base_url=d["base_url"]) if d.get("base_url") else docker.from_env()
        return cls(client, str(config.get("worker_name", "local")), d.get("default_image", "python:3.11-slim"),
                   d.get("user", "65534:65534"), d.get("workdir", "/workspace"))

    def _labels(self, sandbox_id: str) -> dict[str, str]:
        return {"lts.sandbox": sandbox_id, "lts.worker": self.worker_name}

    async def start(self) -> None:
        await asyncio.to_thread(self.docker.ping)
        stale = await asyncio.to_thread(self.docker.containers.list, all=True,
                                        filters={"label": f"lts.worker={self.worker_name}"})
        for c in stale:
            await asyncio.to_thread(c.remove, force=True)

    async def create(self, sandbox_id: str, spec: SandboxSpec) -> dict[str, Any]:
        lim = spec.limits
        from docker.types import Ulimit
        kwargs = dict(
            command=["sleep", "infinity"], detach=True, name=f"lts-{self.worker_name}-{sandbox_id}",
            labels=self._labels(sandbox_id), network_mode="none", user=self.user, working_dir=self.workdir,
            mem_limit=f"{lim.memory_mb}m", memswap_limit=f"{lim.memory_mb}m", nano_cpus=int(lim.cpus * 1e9),
            pids_limit=lim.pids, cap_drop=["ALL"], security_opt=["no-new-privileges"], init=False,
            tmpfs={"/tmp": f"size={lim.disk_mb}m,mode=1777"}, environment=dict(spec.env),
            ulimits=[Ulimit(name="nofile", soft=lim.nofile, hard=lim.nofile),
                     Ulimit(name="fsize", soft=lim.file_size_mb * 1024 * 1024, hard=lim.file_size_mb * 1024 * 1024),
                     Ulimit(name="core", soft=0, hard=0)])
        container = await asyncio.to_thread(self.docker.containers.run, spec.image or self.default_image, **kwargs)
        self.containers[sandbox_id] = container
        try:
            await self._as_root(container, ["mkdir", "-p", self.workdir])
            await self._as_root(container, ["chown", self.user, self.workdir])
            if spec.base_dir:
                await asyncio.to_thread(container.put_archive, self.workdir, _tar_dir(spec.base_dir, self.user))
        except BaseException:
            await self.destroy(sandbox_id)
            raise
        return {"host_name": os.uname().nodename, "host_ip": "127.0.0.1", "container": container.id}

    async def _as_root(self, container: Any, argv: list[str]) -> None:
        rc, out = await asyncio.to_thread(container.exec_run, argv, user="0:0")
        if rc != 0:
            raise SandboxError(f"{argv}: {out!r}")

    def _get(self, sandbox_id: str) -> Any:
        c = self.containers.get(sandbox_id)
        if c is None:
            raise NotFound(f"sandbox {sandbox_id} is not running on this docker backend")
        return c

    async def exec(self, sandbox_id: str, req: ExecRequest) -> ExecOutput:
        container = self._get(sandbox_id)
        argv = req.argv
        if req.stdin is not None:   # stdin travels as a file (exec_start has no simple stdin stream)
            name = f".lts-stdin-{time.monotonic_ns()}"
            await asyncio.to_thread(container.put_archive, "/tmp", _tar_file(name, req.stdin, self.user))
            argv = ["/bin/sh", "-c", f'"$@" < /tmp/{name}; rc=$?; rm -f /tmp/{name}; exit $rc', "sh", *req.argv]
        argv = ["timeout", "-s", "KILL", str(max(1, int(req.timeout + 0.999))), *argv]
        api = self.docker.api
        start = time.monotonic()
        exec_id = await asyncio.to_thread(api.exec_create, container.id, argv, stdout=True, stderr=True,
                                          workdir=req.cwd, environment=req.env or None, user=self.user)
        stream = await asyncio.to_thread(api.exec_start, exec_id, stream=True, demux=True)
        keep = req.max_output
        bufs: dict[str, list[bytes]] = {"out": [], "err": []}
        sizes = {"out": 0, "err": 0}
        truncated = False

        def pump() -> None:
            nonlocal truncated
            for out, err in stream:
                for key, chunk in (("out", out), ("err", err)):
                    if not chunk:
                        continue
                    target = "out" if req.merge_stderr else key
                    room = keep - sizes[target]
                    if room > 0:
                        bufs[target].append(chunk[:room])
                    sizes[target] += len(chunk)
                    truncated = truncated or sizes[target] > keep

        pump_task = asyncio.ensure_future(asyncio.to_thread(pump))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(pump_task), req.timeout + 2.0)
        except asyncio.TimeoutError:
            timed_out = True
            # setsid children survive `timeout`; kill every process of the sandbox user.
            await asyncio.to_thread(container.exec_run, ["kill", "-9", "-1"], user=self.user)
            await asyncio.wait_for(pump_task, 30)
        info = await asyncio.to_thread(api.exec_inspect, exec_id)
        rc = info.get("ExitCode")
        if rc == 137 and time.monotonic() - start >= req.timeout:
            timed_out = True
        return ExecOutput(exit_code=-1 if timed_out else (rc if rc is not None else -1),
                          stdout=b"".join(bufs["out"]), stderr=b"".join(bufs["err"]), timed_out=timed_out,
                          truncated=truncated, duration_s=time.monotonic() - start)

    async def destroy(self, sandbox_id: str) -> None:
        c = self.containers.pop(sandbox_id, None)
        if c is None:
            return
        try:
            await asyncio.to_thread(c.kill)
        except Exception:
            pass  # already stopped
        await asyncio.to_thread(c.remove, force=True)

    async def list_live(self) -> list[str]:
        return list(self.containers)

    async def reset(self, sandbox_id: str) -> None:
        raise BadRequest("the docker backend cannot reset a workspace; create a new sandbox")


def _owner(user: str) -> tuple[int, int]:
    uid, _, gid = user.partition(":")
    return int(uid), int(gid or uid)


def _tar_dir(path: str, user: str) -> bytes:
    uid, gid = _owner(user)
    buf = io.BytesIO()

    def owned(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid, ti.gid, ti.uname, ti.gname = uid, gid, "", ""
        return ti
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name in sorted(os.listdir(path)):
            tf.add(os.path.join(path, name), arcname=name, filter=owned)
    return buf.getvalue()


def _tar_file(name: str, data: bytes, user: str) -> bytes:
    uid, gid = _owner(user)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mode, ti.uid, ti.gid = len(data), 0o600, uid, gid
        tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()
