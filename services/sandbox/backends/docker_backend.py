"""``DockerBackend``: one container per sandbox on a real Docker engine (Docker SDK, docker>=7).

The sandbox's image is the request's ``image`` (a task image built by
``services.sandbox.docker_images``, or any local image), else ``docker.default_image``. The
workspace is the image's WORKDIR (``/testbed`` for SWE-bench images); when it is not
``/workspace``, ``/workspace`` is a symlink to it, so every caller's ``/workspace`` paths work.
A request's ``base_dir`` (the local backend's task layout) is copied into the workspace.

Each container: ``network_mode="none"``, memory/pids/CPU limits, ``cap_drop=["ALL"]``,
``no-new-privileges``, the configured user (``docker.user``; null = the image's own user, root
for SWE-bench images, still without any capability; a configured user must own the image's
WORKDIR, since no capability is left to chown it), a size-capped tmpfs /tmp, nofile/fsize/core
ulimits, a writable-layer size cap where the engine supports one (xfs with pquota), read-only
binds of allowed host paths (``docker.bind_sources``: the ModelService socket), the host dirs of
``docker.runtime_paths`` read-only at their own path (``auto``: our Python and .venv-agent, for
black-box agents; their binaries need a glibc at least as new as the host's) and
``sleep infinity`` as its main process. Commands run with ``docker exec`` under
``timeout -s KILL``; past the timeout (setsid children can outlive ``timeout``) every process but
PID 1 is killed with ``kill -9 -1`` through the API. ``destroy`` kills and removes the container
through the API (killing the SDK call would leave it running: shared doc §3.5).

Containers carry labels ``lts.sandbox=<id>``, ``lts.worker=<name>`` and ``lts.state=<tag of the
manager's state dir>`` (as the local backend's cgroup parent: two managers on one Docker host, say
a test beside a run, never touch each other's containers): after a restart (also after kill -9 of
the manager) ``start`` finds this worker's, the manager adopts those it still has live records of
and destroys the rest.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import os
import posixpath
import tarfile
import time
from pathlib import Path
from typing import Any

import docker
from docker.errors import ImageNotFound
from docker.errors import NotFound as DockerNotFound
from docker.types import Ulimit

from services.common.paths import REPO_ROOT, STATE_DIR
from services.common.preflight import Refused

from ..config import resolve
from ..errors import BadRequest, NotFound, SandboxError
from ..local.backend import default_runtime_paths
from ..mirror import MOUNT as NET_MOUNT
from ..mirror import PID1 as REGISTRY_PID1
from ..mirror import SANDBOX_ENV as REGISTRY_ENV
from ..mirror import Mirror
from ..mirror import default_dir as default_mirror_dir
from .base import ExecOutput, ExecRequest, SandboxBackend, SandboxSpec

log = logging.getLogger(__name__)


def state_tag(state_dir: Path) -> str:
    """Names the manager (its state dir) that owns a container, as ``cgroup_parent`` does locally."""
    return hashlib.sha256(os.path.realpath(state_dir).encode()).hexdigest()[:10]


WORKSPACE = "/workspace"
PUBLIC_NETWORK = "lts-public"
STDIN_DIR = "/.lts-stdin"   # in the container's own layer: the archive API cannot write into its tmpfs /tmp


class DockerBackend(SandboxBackend):
    name = "docker"
    supports_binds = True
    network_modes = ("none", "registry", "public")

    def __init__(self, client: Any, worker_name: str = "local", default_image: str = "lts/base:bookworm",
                 user: str | None = None, workdir: str = WORKSPACE, bind_sources: list[str] | None = None,
                 runtime_paths: list[str] | None = None, state_tag: str | None = None,
                 mirror: Mirror | None = None, net_root: Path | None = None):
        self.docker = client
        self.worker_name = worker_name
        self.state_tag = state_tag
        self.default_image = default_image
        self.user = user or None
        self.workdir = workdir
        self.bind_sources = [os.path.realpath(p) for p in (bind_sources or [])]
        # host dirs bound read-only at their own path in every container (black-box agent harnesses)
        self.runtime_paths = list(dict.fromkeys(os.path.realpath(p) for p in (runtime_paths or []) if os.path.isdir(p)))
        self.containers: dict[str, Any] = {}
        self._workdirs: dict[str, str] = {}    # image -> workspace dir inside it
        self._storage_opt: bool | None = None  # does the engine cap a container's writable layer?
        # network="registry" sandboxes: the manager's mirror, one socket dir per sandbox under net_root
        self.mirror = mirror or Mirror(default_mirror_dir())
        self.net_root = Path(net_root or STATE_DIR / "sandboxes" / "net")

    @staticmethod
    def check_engine(config: dict[str, Any]) -> None:
        """Refused (exit 2, a message with the fix) when no Docker engine answers where the config points: at
        start, in about a second, instead of a traceback from the Docker SDK."""
        d = config.get("docker") or {}
        where = d.get("base_url") or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        try:
            client = docker.DockerClient(base_url=d["base_url"], timeout=5) if d.get("base_url") else \
                docker.from_env(timeout=5)
            client.ping()
            client.close()
        except Exception as e:  # noqa: BLE001 - DockerException, requests' connection errors, a bad URL
            raise Refused(f"the docker backend needs a Docker engine, and none answers at {where} "
                          f"({type(e).__name__}: {str(e)[:200]}); start one (`sudo bash setup.sh docker`), point "
                          "docker.base_url in the sandbox config at one, or use --backend local") from None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "DockerBackend":
        d = config.get("docker") or {}
        client = docker.DockerClient(base_url=d["base_url"]) if d.get("base_url") else docker.from_env()
        sources = d.get("bind_sources", ["state/modelservice"])
        runtime = d.get("runtime_paths", [])
        if runtime in ("auto", ["auto"]):
            runtime = default_runtime_paths()
        state_dir = Path(config.get("state_dir") or STATE_DIR / "sandboxes")
        state_dir = state_dir if state_dir.is_absolute() else REPO_ROOT / state_dir
        mcfg = dict(d.get("mirror") or {})
        mcfg["dir"] = str(resolve(mcfg["dir"])) if mcfg.get("dir") else None
        mirror = Mirror.from_config(mcfg, default_mirror_dir())
        return cls(client, str(config.get("worker_name", "local")), d.get("default_image") or "lts/base:bookworm",
                   d.get("user"), d.get("workdir") or WORKSPACE, [str(resolve(p)) for p in sources or []],
                   [str(resolve(p)) for p in runtime or []], state_tag=state_tag(state_dir), mirror=mirror,
                   net_root=state_dir / "net")

    def _labels(self, sandbox_id: str) -> dict[str, str]:
        labels = {"lts.sandbox": sandbox_id, "lts.worker": self.worker_name}
        if self.state_tag:
            labels["lts.state"] = self.state_tag
        return labels

    def _own_filter(self) -> list[str]:
        return [f"lts.worker={self.worker_name}"] + ([f"lts.state={self.state_tag}"] if self.state_tag else [])

    async def start(self) -> None:
        """Find this worker's containers of a previous run (the manager adopts or destroys them)."""
        await asyncio.to_thread(self.docker.ping)
        found = await asyncio.to_thread(self.docker.containers.list, all=True,
                                        filters={"label": self._own_filter()})
        for c in found:
            sid = (c.labels or {}).get("lts.sandbox")
            if sid and getattr(c, "status", "running") == "running":
                self.containers[sid] = c
                if (c.labels or {}).get("lts.network") == "registry":   # its mirror socket, served again
                    await self.mirror.open(sid, self.net_root / sid)
            else:
                await asyncio.to_thread(c.remove, force=True)

    def _image_workdir(self, image: str) -> str:
        if image not in self._workdirs:
            try:
                attrs = self.docker.images.get(image).attrs
            except ImageNotFound:
                raise BadRequest(f"image {image!r} is not on the Docker host (there is no registry to pull from: "
                                 "build it first, e.g. prepare_sandbox.py TASKS --backend docker)") from None
            wd = ((attrs.get("Config") or {}).get("WorkingDir") or "").rstrip("/")
            self._workdirs[image] = wd or self.workdir
        return self._workdirs[image]

    def _supports_storage_opt(self) -> bool:
        if self._storage_opt is None:
            info = self.docker.info()
            status = dict(info.get("DriverStatus") or [])
            self._storage_opt = info.get("Driver") == "overlay2" and status.get("Backing Filesystem") == "xfs"
        return self._storage_opt

    def _check_binds(self, binds: list[dict[str, str]]) -> dict[str, dict[str, str]]:
        volumes = {}
        for b in binds or []:
            src, target = os.path.realpath(b.get("source", "")), posixpath.normpath(b.get("target", ""))
            if not os.path.exists(src):
                raise BadRequest(f"bind source {b.get('source')!r} does not exist")
            if not any(src == root or src.startswith(root + "/") for root in self.bind_sources):
                raise BadRequest(f"bind source {src} is not under an allowed directory "
                                 f"(config docker.bind_sources: {self.bind_sources})")
            if not target.startswith("/") or target in ("/", WORKSPACE):
                raise BadRequest(f"bad bind target {b.get('target')!r}")
            volumes[src] = {"bind": target, "mode": "ro"}
        return volumes

    async def create(self, sandbox_id: str, spec: SandboxSpec) -> dict[str, Any]:
        lim = spec.limits
        image = spec.image if spec.image and spec.image != "local" else self.default_image
        workdir = await asyncio.to_thread(self._image_workdir, image)
        fsize = lim.file_size_mb * 1024 * 1024
        command, network_mode, env = ["sleep", "infinity"], "none", dict(spec.env)
        volumes = {**{p: {"bind": p, "mode": "ro"} for p in self.runtime_paths}, **self._check_binds(spec.binds)}
        if spec.network == "registry":   # no interface but lo; the mirror through a socket (services.sandbox.mirror)
            net_dir = self.net_root / sandbox_id
            await self.mirror.open(sandbox_id, net_dir)
            volumes[str(net_dir)] = {"bind": NET_MOUNT, "mode": "ro"}
            command, env = ["/bin/sh", "-c", REGISTRY_PID1], {**REGISTRY_ENV, **env}
        elif spec.network == "public":
            network_mode = await asyncio.to_thread(self._public_network)
        elif spec.network != "none":
            raise BadRequest(f"unknown network mode {spec.network!r}")
        labels = {**self._labels(sandbox_id), "lts.network": spec.network}
        kwargs: dict[str, Any] = dict(
            command=command, entrypoint=[], detach=True, name=f"lts-{self.worker_name}-{sandbox_id}",
            labels=labels, network_mode=network_mode, working_dir=workdir,
            mem_limit=f"{lim.memory_mb}m", memswap_limit=f"{lim.memory_mb}m", nano_cpus=int(lim.cpus * 1e9),
            pids_limit=lim.pids, cap_drop=["ALL"], security_opt=["no-new-privileges"], init=False,
            tmpfs={"/tmp": f"size={lim.disk_mb}m,mode=1777"}, environment=env, volumes=volumes,
            ulimits=[Ulimit(name="nofile", soft=lim.nofile, hard=lim.nofile),
                     Ulimit(name="fsize", soft=fsize, hard=fsize), Ulimit(name="core", soft=0, hard=0)])
        if self.user:
            kwargs["user"] = self.user
        if await asyncio.to_thread(self._supports_storage_opt):
            kwargs["storage_opt"] = {"size": f"{lim.disk_mb}m"}
        try:
            container = await asyncio.to_thread(self.docker.containers.run, image, **kwargs)
        except BaseException:
            await self.mirror.close(sandbox_id, self.net_root / sandbox_id)
            raise
        self.containers[sandbox_id] = container
        try:
            setup = f"mkdir -p {workdir} {STDIN_DIR} && chmod 1777 {STDIN_DIR}"
            if workdir != WORKSPACE:
                setup += f" && {{ [ -e {WORKSPACE} ] || ln -s {workdir} {WORKSPACE}; }}"
            await self._as_root(container, ["/bin/sh", "-c", setup])
            if spec.base_dir:
                await asyncio.to_thread(container.put_archive, workdir, _tar_dir(spec.base_dir, self.user))
        except BaseException:
            await self.destroy(sandbox_id)
            raise
        return {"host_name": os.uname().nodename, "host_ip": "127.0.0.1", "container": container.id,
                "image": image, "workdir": workdir}

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
        user = self.user or ""
        if req.stdin is not None:   # stdin travels as a file (exec_start has no simple stdin stream)
            name = f"stdin-{time.monotonic_ns()}"
            await asyncio.to_thread(container.put_archive, STDIN_DIR, _tar_file(name, req.stdin, self.user))
            path = f"{STDIN_DIR}/{name}"
            argv = ["/bin/sh", "-c", f'"$@" < {path}; rc=$?; rm -f {path}; exit $rc', "sh", *req.argv]
        argv = ["timeout", "-s", "KILL", str(max(1, int(req.timeout + 0.999))), *argv]
        api = self.docker.api
        start = time.monotonic()
        exec_id = await asyncio.to_thread(api.exec_create, container.id, argv, stdout=True, stderr=True,
                                          workdir=req.cwd, environment=req.env or None, user=user)
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
            # setsid children survive `timeout`; kill every process of the sandbox but PID 1.
            await asyncio.to_thread(container.exec_run, ["kill", "-9", "-1"], user=user)
            await asyncio.wait_for(pump_task, 30)
        info = await asyncio.to_thread(api.exec_inspect, exec_id)
        rc = info.get("ExitCode")
        if rc == 137 and time.monotonic() - start >= req.timeout:
            timed_out = True
        return ExecOutput(exit_code=-1 if timed_out else (rc if rc is not None else -1),
                          stdout=b"".join(bufs["out"]), stderr=b"".join(bufs["err"]), timed_out=timed_out,
                          truncated=truncated, duration_s=time.monotonic() - start)

    def _public_network(self) -> str:
        """The engine's ``lts-public`` bridge network (made once): ``network="public"`` sandboxes
        reach whatever the Docker host routes from a bridge (nothing on hosts whose dockerd runs
        without iptables / IP forwarding, as ``setup.sh docker`` starts it)."""
        try:
            self.docker.networks.get(PUBLIC_NETWORK)
        except DockerNotFound:
            self.docker.networks.create(PUBLIC_NETWORK, driver="bridge", labels={"lts.network": "public"})
        return PUBLIC_NETWORK

    async def destroy(self, sandbox_id: str) -> None:
        c = self.containers.pop(sandbox_id, None)
        await self.mirror.close(sandbox_id, self.net_root / sandbox_id)
        if c is None:
            return
        try:
            await asyncio.to_thread(c.kill)
        except Exception:
            pass  # already stopped
        try:
            await asyncio.to_thread(c.remove, force=True)
        except Exception as e:  # noqa: BLE001 - gone already (e.g. removed by hand)
            if not isinstance(e, DockerNotFound):
                raise

    async def shutdown(self) -> None:
        await super().shutdown()
        await self.mirror.aclose()

    async def list_live(self) -> list[str]:
        return list(self.containers)

    async def reset(self, sandbox_id: str) -> None:
        raise BadRequest("the docker backend cannot reset a workspace; create a new sandbox")


def _owner(user: str | None) -> tuple[int, int]:
    uid, _, gid = (user or "0:0").partition(":")
    if not uid.isdigit() or not (gid or uid).isdigit():
        return 0, 0   # a user name: the tar is owned by root, the sandbox reads it like the image's files
    return int(uid), int(gid or uid)


def _tar_dir(path: str, user: str | None) -> bytes:
    uid, gid = _owner(user)
    buf = io.BytesIO()

    def owned(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid, ti.gid, ti.uname, ti.gname = uid, gid, "", ""
        return ti
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name in sorted(os.listdir(path)):
            tf.add(os.path.join(path, name), arcname=name, filter=owned)
    return buf.getvalue()


def _tar_file(name: str, data: bytes, user: str | None) -> bytes:
    uid, gid = _owner(user)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mode, ti.uid, ti.gid = len(data), 0o600, uid, gid
        tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()
