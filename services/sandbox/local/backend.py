"""``LocalBackend``: sandboxes on this host with bubblewrap + overlayfs + cgroups.

Runs as root (CI): sandboxes run as ``sandbox_uid`` (default 65534) with v1 cgroup limits and
v2 ``cgroup.kill``. Runs as non-root too: the process is then uid 0 of its own user namespace
(see namespace.py); bwrap drops all capabilities, there are no cgroups (limits fall back to
rlimits; timeouts still kill the whole pid namespace), and overlayfs uses ``userxattr``.
Must run inside a private mount namespace (``namespace.ensure_private_namespace``).
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import logging
import os
import resource
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.paths import REPO_ROOT, STATE_DIR

from ..backends.base import ExecOutput, ExecRequest, SandboxBackend, SandboxSpec, SessionOutput, too_large
from ..errors import BadRequest, Conflict, NotFound, SandboxError
from ..limits import Limits
from . import cgroups, fileio, jail, namespace
from .process import Containment, run_contained
from .sessions import BashSession
from .workspace import SCRATCH_DIRS, BaseCache, Workspace, remove_run_dir

log = logging.getLogger(__name__)


def default_runtime_paths() -> list[str]:
    """The Python interpreter installation and the venv we run from, bound read-only."""
    paths = [sys.base_prefix]
    if sys.prefix != sys.base_prefix:
        paths.append(sys.prefix)

    agent = REPO_ROOT / ".venv-agent"  # black-box agent harnesses (setup.sh agent), run through the ModelService
    if agent.is_dir():
        paths.append(str(agent))
    return paths


def default_env(venv_bin: str | None) -> dict[str, str]:
    path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    if venv_bin:
        path = f"{venv_bin}:{path}"
    return {"PATH": path, "HOME": "/root", "USER": "sandbox", "LANG": "C.UTF-8", "TMPDIR": "/tmp", "TERM": "dumb",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "PIP_NO_INPUT": "1", "GIT_TERMINAL_PROMPT": "0"}


@dataclass
class LocalSandbox:
    sandbox_id: str
    workspace: Workspace
    limits: Limits
    env: dict[str, str]
    cgroups: cgroups.SandboxCgroups | None
    binds: list[tuple[str, str]] = field(default_factory=list)   # validated (host source, target)
    sessions: dict[str, BashSession] = field(default_factory=dict)
    counter: int = 0
    closing: bool = False

    def next_unit(self, kind: str) -> str:
        self.counter += 1
        return f"{kind}-{self.counter}"


def cgroup_parent(state_dir: Path, worker_name: str) -> str:
    """The cgroup holding this worker's sandboxes: one per worker name *and* state dir, so two
    sandbox managers on one host (two experiments, a test beside a run) never reap each other's
    sandboxes as "leftovers", while a restarted worker still finds what its dead predecessor left."""
    tag = hashlib.sha256(os.path.realpath(state_dir).encode()).hexdigest()[:10]
    return f"lts-sandbox-{worker_name}-{tag}"


class LocalBackend(SandboxBackend):
    name = "local"
    supports_binds = True
    BIND_TARGET_ROOTS = ("/run/", "/mnt/")

    def __init__(self, state_dir: Path, worker_name: str = "local", sandbox_uid: int = 65534,
                 sandbox_gid: int = 65534, runtime_paths: list[str] | None = None, venv_bin: str | None = None,
                 use_cgroups: bool = True, shm_mb: int = 64, bind_sources: list[str] | None = None,
                 base_cache_mb: int | None = 20480):
        self.worker_name = worker_name
        self.root = state_dir / "local" / worker_name     # run dirs and host layout of this worker
        self.bases_dir = state_dir / "local" / "bases"    # shared cache of lower layers
        self.is_root = os.geteuid() == 0
        self.real_root = self.is_root and not _in_user_namespace()
        self.uid, self.gid = (sandbox_uid, sandbox_gid) if self.real_root else (0, 0)
        self.cgroup_parent = cgroup_parent(state_dir, worker_name)
        self.use_cgroups = use_cgroups and self.real_root
        self.cgroup_support = cgroups.Support(None, reason="cgroups off (local.cgroups: false)" if not use_cgroups else
                                              "not real root (user namespace)" if self.is_root else "not root")
        self.runtime_paths = runtime_paths if runtime_paths is not None else default_runtime_paths()
        if venv_bin is None and sys.prefix != sys.base_prefix:
            venv_bin = os.path.join(sys.prefix, "bin")
        self.base_env = default_env(venv_bin)
        self.shm_mb = shm_mb
        self.base_cache_bytes = None if base_cache_mb is None else int(base_cache_mb) * 1024 * 1024
        # host dirs whose contents may be bound (read-only) into sandboxes; default: the ModelService's
        self.bind_sources = [os.path.realpath(p) for p in
                             (bind_sources if bind_sources is not None else [str(STATE_DIR / "modelservice")])]
        self.sandboxes: dict[str, LocalSandbox] = {}
        self._lock_fd: int | None = None
        self.layout: jail.HostLayout | None = None
        self.bases: BaseCache | None = None
        self.files: fileio.FileThreads | None = None   # read_file / write_file without a sandboxed process
        self.file_ops = {"direct": 0, "sandboxed": 0}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "LocalBackend":
        local = config.get("local", {}) or {}
        state_dir = Path(config.get("state_dir") or STATE_DIR / "sandboxes")
        if not state_dir.is_absolute():
            state_dir = REPO_ROOT / state_dir
        runtime = local.get("runtime_paths")
        return cls(state_dir=state_dir, worker_name=str(config.get("worker_name", "local")),
                   sandbox_uid=int(local.get("sandbox_uid", 65534)), sandbox_gid=int(local.get("sandbox_gid", 65534)),
                   runtime_paths=None if runtime in (None, "auto", ["auto"]) else list(runtime),
                   venv_bin=local.get("venv_bin"), use_cgroups=bool(local.get("cgroups", True)),
                   shm_mb=int(local.get("shm_mb", 64)), bind_sources=_bind_sources(local.get("bind_sources")),
                   base_cache_mb=local.get("base_cache_mb", 20480))

    # --- start / stop ---------------------------------------------------------------------------

    async def start(self) -> None:
        if not namespace.in_private_namespace():
            raise SandboxError("the local backend must run in a private mount namespace "
                               "(start it through `python -m services.sandbox`)")
        if shutil.which(jail.BWRAP) is None:
            raise SandboxError("bubblewrap is not installed (apt-get install bubblewrap)")
        self.root.mkdir(parents=True, exist_ok=True)
        for p in (self.root, self.root.parent, self.root.parent.parent):
            os.chmod(p, 0o755)   # the sandbox uid must traverse to the bind sources
        if self.real_root and not jail._traversable(str(self.root)):
            raise SandboxError(f"state dir {self.root} must be searchable (o+x on every parent) by the sandbox "
                               f"uid {self.uid}: bubblewrap opens its bind sources as that uid")
        self._lock_fd = os.open(self.root / "worker.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SandboxError(f"another sandbox worker named {self.worker_name!r} is running on this state "
                               "dir (an admin with the local backend runs its sandboxes itself: start `serve.sh "
                               "worker` before `serve.sh admin`, and the admin uses the worker)") from None
        if self.use_cgroups:
            self.cgroup_support = cgroups.detect(self.cgroup_parent)
            self.use_cgroups = self.cgroup_support.usable
        self._log_limits()
        removed = self.cleanup_leftovers()
        if removed:
            log.warning("removed leftovers of a previous worker: %s", ", ".join(removed))
        self.bases = BaseCache(self.bases_dir, self.uid, self.gid, chown=self.real_root,
                               max_bytes=self.base_cache_bytes)
        if self.real_root and fileio.identity_ok():
            self.files = fileio.FileThreads(self.uid, self.gid)
            self.files.check()
        self.layout = await asyncio.to_thread(jail.prepare_host_layout, self.root / "host", self.runtime_paths,
                                              self.uid, self.gid, "sandbox")
        log.info("local backend ready (uid %d, cgroups %s, user namespace %s)", self.uid, self.use_cgroups,
                 not self.real_root)

    def limits_info(self) -> dict[str, Any]:
        info = self.cgroup_support.describe()
        if not self.use_cgroups:
            info["enforced"] = []
            info["fallback"] = {k: cgroups.FALLBACK[k] for k in cgroups.LIMITS}
        return info

    def stats(self) -> dict[str, Any]:
        """file_ops: read_file / write_file answered by the manager itself ("direct") or by ``cat`` in the
        sandbox ("sandboxed": no direct path, or one the direct path left to the sandbox)."""
        return {"file_ops": dict(self.file_ops), "direct_files": self.files is not None}

    def _log_limits(self) -> None:
        info = self.limits_info()
        log.info("sandbox limits: cgroups %s, enforced %s", info["cgroups"], ", ".join(info["enforced"]) or "none")
        for limit, fallback in info["fallback"].items():
            log.warning("!!! sandbox %s limit NOT enforced by cgroups (%s): falls back to %s", limit,
                        info["reason"] or "unavailable", fallback)

    def cleanup_leftovers(self) -> list[str]:
        """Remove run dirs and cgroups left by a worker of this name that died (kill -9):
        nothing of them can be alive, since we hold the worker lock and its mount namespace
        died with it."""
        removed: set[str] = set()
        if self.use_cgroups or self.real_root:
            removed.update(cgroups.remove_stale(self.cgroup_parent, keep=set(self.sandboxes)))
        run = self.root / "run"
        if run.exists():
            for d in run.iterdir():
                if d.name not in self.sandboxes:
                    remove_run_dir(d)
                    removed.add(d.name)
        return sorted(removed)

    async def shutdown(self) -> None:
        await super().shutdown()
        if self.files:
            self.files.shutdown()
            self.files = None
        if self.layout:
            hop_root = self.layout.dir / "runtime"
            if hop_root.exists():
                for hop in hop_root.iterdir():
                    namespace.umount(str(hop))
        for parent in ([cgroups.CGROUP_ROOT / c / self.cgroup_parent for c in cgroups.V1_CONTROLLERS] +
                       ([cgroups.v2_root() / self.cgroup_parent] if cgroups.v2_root() else [])):
            try:
                parent.rmdir()
            except OSError:
                pass
        shutil.rmtree(self.root / "run", ignore_errors=True)
        shutil.rmtree(self.root / "host", ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- lifecycle --------------------------------------------------------------------------------

    async def create(self, sandbox_id: str, spec: SandboxSpec) -> dict[str, Any]:
        if sandbox_id in self.sandboxes:
            raise Conflict(f"sandbox {sandbox_id} exists")
        assert self.bases is not None
        binds = self._check_binds(spec.binds)
        base = await asyncio.to_thread(self.bases.prepare, spec.base_dir)
        in_use = {sb.workspace.base.base_id for sb in self.sandboxes.values()} | {base.base_id}
        await asyncio.to_thread(self.bases.evict, in_use)
        ws = Workspace(self.root / "run" / sandbox_id, base, self.uid, self.gid, userns=not self.real_root)
        cg = cgroups.SandboxCgroups(self.cgroup_parent, sandbox_id, self.cgroup_support) if self.use_cgroups else None
        try:
            ws.mount(spec.limits.disk_mb)
            if cg:
                cg.create(spec.limits)
        except BaseException:
            if cg:
                cg.destroy()
            ws.remove()
            raise
        self.sandboxes[sandbox_id] = LocalSandbox(sandbox_id, ws, spec.limits, dict(spec.env), cg, binds)
        return {"host_name": os.uname().nodename, "host_ip": "127.0.0.1", "base_id": base.base_id,
                "workspace": "/workspace", "cgroups": cg is not None}

    def _check_binds(self, binds: list[dict[str, str]]) -> list[tuple[str, str]]:
        """Each bind: an existing host path under ``bind_sources`` -> a normalised absolute path
        under /run/ or /mnt/ inside; always read-only."""
        out = []
        for b in binds or []:
            if not isinstance(b, dict) or set(b) - {"source", "target"} or not b.get("source") or not b.get("target"):
                raise BadRequest(f'a bind is {{"source": <host path>, "target": <path inside>}}, got {b!r}')
            src, dst = os.path.realpath(str(b["source"])), str(b["target"])
            if not any(src == root or src.startswith(root + "/") for root in self.bind_sources):
                raise BadRequest(f"bind source {b['source']!r} is not under an allowed bind source "
                                 f"(config local.bind_sources: {self.bind_sources})")
            if not os.path.exists(src):
                raise BadRequest(f"bind source {b['source']!r} does not exist")
            if (os.path.normpath(dst) != dst or not dst.startswith(self.BIND_TARGET_ROOTS)
                    or dst.rstrip("/") in ("/run", "/mnt")):
                raise BadRequest(f"bind target {dst!r} must be a normalised path under /run/ or /mnt/")
            if self.real_root and not jail._traversable(src):
                raise BadRequest(f"bind source {src} is not searchable by the sandbox uid {self.uid}")
            out.append((src, dst))
        return out

    async def destroy(self, sandbox_id: str) -> None:
        sb = self.sandboxes.get(sandbox_id)
        if sb is None:
            return
        sb.closing = True
        for s in list(sb.sessions.values()):
            s.kill()
        if sb.cgroups:
            await asyncio.to_thread(sb.cgroups.destroy)
        for s in list(sb.sessions.values()):
            await s.close()
        await asyncio.to_thread(sb.workspace.remove)
        self.sandboxes.pop(sandbox_id, None)

    async def list_live(self) -> list[str]:
        return list(self.sandboxes)

    async def reset(self, sandbox_id: str) -> None:
        sb = self._get(sandbox_id)
        for s in list(sb.sessions.values()):
            s.kill()
        if sb.cgroups:
            await asyncio.to_thread(sb.cgroups.kill_all)
        for s in list(sb.sessions.values()):
            await s.close()
        sb.sessions.clear()
        sb.workspace.unmount()
        sb.workspace.mount(sb.limits.disk_mb)

    # --- running things ---------------------------------------------------------------------------

    def _get(self, sandbox_id: str) -> LocalSandbox:
        sb = self.sandboxes.get(sandbox_id)
        if sb is None or sb.closing:
            raise NotFound(f"sandbox {sandbox_id} is not running on this worker")
        return sb

    def _containment(self, sb: LocalSandbox, unit: str) -> tuple[Containment, Any]:
        lim = sb.limits
        rl = [(resource.RLIMIT_NOFILE, lim.nofile), (resource.RLIMIT_FSIZE, lim.file_size_mb * 1024 * 1024),
              (resource.RLIMIT_CPU, lim.cpu_time_s), (resource.RLIMIT_CORE, 0),
              (resource.RLIMIT_AS, lim.address_space_mb * 1024 * 1024)]
        if not sb.cgroups or "pids" not in sb.cgroups.enforced:
            # No pids cgroup: RLIMIT_NPROC is the only fork-bomb guard (per host uid; ignored for root).
            rl.append((resource.RLIMIT_NPROC, lim.pids))
        procs = sb.cgroups.unit(unit) if sb.cgroups else []
        cont = Containment(procs, rl, self.uid if self.real_root else None, self.gid if self.real_root else None)

        def kill_tree() -> None:
            if sb.cgroups:
                sb.cgroups.kill_unit(unit)
        return cont, kill_tree

    def _argv(self, sb: LocalSandbox, cwd: str, env: dict[str, str], argv: list[str]) -> list[str]:
        assert self.layout is not None
        full_env = {**self.base_env, **sb.env, **env}
        return jail.bwrap_argv(self.layout, sb.workspace.merged, sb.workspace.scratch, SCRATCH_DIRS, cwd, full_env,
                               argv, privileged_userns=not self.real_root, shm_mb=self.shm_mb, extra_binds=sb.binds)

    async def exec(self, sandbox_id: str, req: ExecRequest) -> ExecOutput:
        sb = self._get(sandbox_id)
        unit = sb.next_unit("x")
        cont, kill_tree = self._containment(sb, unit)
        try:
            return await run_contained(self._argv(sb, req.cwd, req.env, req.argv), cont, stdin=req.stdin,
                                       timeout=req.timeout, max_output=req.max_output,
                                       merge_stderr=req.merge_stderr, kill_tree=kill_tree)
        finally:
            if sb.cgroups:
                await asyncio.to_thread(sb.cgroups.kill_unit, unit)

    async def read_file(self, sandbox_id: str, path: str, max_bytes: int) -> bytes:
        try:
            return await self._direct(sandbox_id, path, fileio.read, max_bytes)
        except fileio.TooLarge:
            self.file_ops["direct"] += 1   # answered here: no second read of it in the sandbox
            raise too_large(path, max_bytes) from None
        except fileio.Fallback:
            self.file_ops["sandboxed"] += 1
            return await super().read_file(sandbox_id, path, max_bytes)

    async def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int | None = None) -> None:
        max_file = self._get(sandbox_id).limits.file_size_mb * 1024 * 1024
        try:
            await self._direct(sandbox_id, path, fileio.write, data, mode, max_file)
        except fileio.Fallback:
            self.file_ops["sandboxed"] += 1
            await super().write_file(sandbox_id, path, data, mode)

    async def _direct(self, sandbox_id: str, path: str, op: Callable[..., Any], *args: Any) -> Any:
        """``op(host dir, components, *args)`` on the file threads (fileio.py); ``fileio.Fallback`` where
        the sandbox itself must answer (no file threads, a path outside its own trees, or ``op``'s word)."""
        if self.files is None or (where := fileio.host_location(self._get(sandbox_id).workspace.run_dir, path)) is None:
            raise fileio.Fallback(path)
        result = await asyncio.wrap_future(self.files.pool.submit(op, *where, *args))
        self.file_ops["direct"] += 1
        return result

    async def create_session(self, sandbox_id: str, session: str, env: dict[str, str] | None = None,
                             startup_source: list[str] | None = None) -> str:
        sb = self._get(sandbox_id)
        if session in sb.sessions and sb.sessions[session].alive:
            raise Conflict(f"session {session!r} already exists")
        unit = f"s-{session}-{sb.next_unit('s')}"
        cont, kill_tree = self._containment(sb, unit)
        argv = self._argv(sb, "/workspace", {}, ["/bin/bash", "--noprofile", "--norc"])
        try:
            s, output = await BashSession.start(session, argv, cont, kill_tree, env, startup_source)
        except RuntimeError as e:
            raise BadRequest(str(e)) from e
        sb.sessions[session] = s
        return output

    async def run_in_session(self, sandbox_id: str, session: str, command: str, timeout: float,
                             max_output: int) -> SessionOutput:
        sb = self._get(sandbox_id)
        s = sb.sessions.get(session)
        if s is None:
            raise BadRequest(f"unknown session {session!r}; create it first")
        out = await s.run(command, timeout, max_output)
        if not s.alive:
            sb.sessions.pop(session, None)
            await s.close()
        return out

    async def close_session(self, sandbox_id: str, session: str) -> None:
        sb = self._get(sandbox_id)
        s = sb.sessions.pop(session, None)
        if s is None:
            raise BadRequest(f"unknown session {session!r}")
        await s.close()


def _bind_sources(value: Any) -> list[str] | None:
    if value is None:
        return None
    return [str(p if os.path.isabs(p) else REPO_ROOT / p) for p in value]


def _in_user_namespace() -> bool:
    """True inside a user namespace we created (uid_map is not the identity over all uids)."""
    try:
        line = Path("/proc/self/uid_map").read_text().split()
        return not (line[0] == "0" and line[1] == "0" and int(line[2]) >= 4294967295)
    except OSError:
        return False
