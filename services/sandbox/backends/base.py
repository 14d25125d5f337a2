"""The interface every sandbox backend implements, plus shared helpers.

A backend owns the *resources* of sandboxes (processes, mounts, cgroups, containers). The
manager (services/sandbox/manager.py) owns their *records* (ids, leases, TTLs) and calls the
backend. Sandbox ids are chosen by the manager.

File operations have default implementations on top of ``exec`` (``cat``/``tar`` run inside the
sandbox as the sandbox user), so they obey the sandbox's own view and permissions and never
follow a sandbox-made symlink on the host.
"""

from __future__ import annotations

import abc
import base64
import shlex
from dataclasses import dataclass, field
from typing import Any

from ..errors import BadRequest, PayloadTooLarge, SandboxError
from ..limits import Limits
from ..paths import session_name


@dataclass
class SandboxSpec:
    image: str | None = None          # backend-specific: a docker/ROCK image, or a base name for local
    base_dir: str | None = None       # host directory whose copy becomes /workspace
    limits: Limits = field(default_factory=Limits)
    env: dict[str, str] = field(default_factory=dict)
    # host paths bound read-only into the sandbox: [{"source": host path, "target": path inside}]
    # (local backend only; sources must lie under config `local.bind_sources`). Used to hand a
    # sandbox one Unix socket (the ModelService) without giving it network.
    binds: list[dict[str, str]] = field(default_factory=list)
    # what the sandbox's network reaches (docker backend; every other backend: "none" only):
    # "none" (default: nothing), "registry" (only the manager's package-registry / upstream-file
    # mirror, services.sandbox.mirror: the verifier of tasks with [verifier] network_mode = "public"),
    # "public" (the engine's `lts-public` bridge network: whatever the Docker host routes)
    network: str = "none"


NETWORK_MODES = ("none", "registry", "public")


@dataclass
class ExecRequest:
    argv: list[str]
    stdin: bytes | None = None
    timeout: float = 60.0
    max_output: int = 100_000          # bytes kept per stream (stdout, stderr)
    cwd: str = "/workspace"
    env: dict[str, str] = field(default_factory=dict)
    merge_stderr: bool = False         # interleave stderr into stdout


@dataclass
class ExecOutput:
    exit_code: int                     # -1 when killed by the timeout
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    truncated: bool = False
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "stdout": base64.b64encode(self.stdout).decode(),
                "stderr": base64.b64encode(self.stderr).decode(), "timed_out": self.timed_out,
                "truncated": self.truncated, "duration_s": self.duration_s}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ExecOutput":
        return cls(exit_code=d["exit_code"], stdout=base64.b64decode(d["stdout"]), stderr=base64.b64decode(d["stderr"]),
                   timed_out=d["timed_out"], truncated=d["truncated"], duration_s=d["duration_s"])


@dataclass
class SessionOutput:
    output: str
    exit_code: int                     # -1 when the command timed out (the session is then closed)
    timed_out: bool = False
    truncated: bool = False
    failure_reason: str = ""


def bash(cmd: str) -> list[str]:
    return ["/bin/bash", "-c", cmd]


class SandboxBackend(abc.ABC):
    """Resources of sandboxes on one backend. All methods are coroutines and safe to call
    concurrently for different sandboxes."""

    supports_binds = False   # SandboxSpec.binds (read-only host binds)
    network_modes: tuple[str, ...] = ("none",)   # SandboxSpec.network values this backend honours

    name: str = "?"

    async def start(self) -> None:  # noqa: B027 (optional hook: a backend without set-up keeps it empty)
        """Prepare the backend; remove leftovers of a previous run of this backend."""

    def take_lost(self) -> list[tuple[str, str]]:
        """(sandbox id, reason) of sandboxes lost since the last call (a dead worker's); the
        admin's reaper records them failed."""
        return []

    def limits_info(self) -> dict[str, Any]:
        """Which resource limits this backend enforces, and how the others fall back (for /health)."""
        return {}

    def stats(self) -> dict[str, Any]:
        """Counters of this backend's work (for /health)."""
        return {}

    async def shutdown(self) -> None:
        """Destroy every sandbox this backend holds and release its resources."""
        for sid in list(await self.list_live()):
            await self.destroy(sid)

    @abc.abstractmethod
    async def create(self, sandbox_id: str, spec: SandboxSpec) -> dict[str, Any]:
        """Create and start a sandbox; returns backend info (host name, paths...)."""

    @abc.abstractmethod
    async def exec(self, sandbox_id: str, req: ExecRequest) -> ExecOutput: ...

    @abc.abstractmethod
    async def destroy(self, sandbox_id: str) -> None:
        """Kill everything of the sandbox and remove its resources. Idempotent."""

    @abc.abstractmethod
    async def list_live(self) -> list[str]:
        """Ids of sandboxes that currently hold resources on this backend."""

    async def reset(self, sandbox_id: str) -> None:
        """Return the workspace to its base (kills running commands and sessions)."""
        raise BadRequest(f"backend {self.name} cannot reset a workspace")

    # --- bash sessions (ROCK create_session / run_in_session / close_session) -----------------
    # Default: emulated with one exec per command, carrying cwd and exported variables in
    # files under /tmp/.lts-sessions/<name>. Background processes survive only where the
    # backend keeps them (docker: yes). The local backend overrides these with real shells.

    async def create_session(self, sandbox_id: str, session: str, env: dict[str, str] | None = None,
                             startup_source: list[str] | None = None) -> str:
        d = _session_dir(session)
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in (env or {}).items())
        sources = "".join(f"source {shlex.quote(p)}\n" for p in (startup_source or []))
        script = (f"mkdir -p {d} && cd /workspace 2>/dev/null || cd /; {exports}{sources}"
                  f"pwd > {d}/cwd; export -p > {d}/env")
        out = await self.exec(sandbox_id, ExecRequest(argv=bash(script), timeout=30, merge_stderr=True))
        if out.exit_code != 0:
            raise SandboxError(f"session {session!r} could not be created: {out.stdout.decode(errors='replace')}")
        return ""

    async def run_in_session(self, sandbox_id: str, session: str, command: str, timeout: float,
                             max_output: int) -> SessionOutput:
        d = _session_dir(session)
        script = (f"test -f {d}/env || {{ echo 'no such session: {session}'; exit 97; }}\n"
                  f"source {d}/env; cd \"$(cat {d}/cwd)\"\n"
                  f"eval {shlex.quote(command)} </dev/null\n__lts_rc=$?\n"
                  f"pwd > {d}/cwd; export -p > {d}/env; exit $__lts_rc")
        out = await self.exec(sandbox_id, ExecRequest(argv=bash(script), timeout=timeout, max_output=max_output,
                                                      merge_stderr=True))
        text = out.stdout.decode(errors="replace")
        if out.exit_code == 97 and text.startswith("no such session"):
            raise BadRequest(f"unknown session {session!r}")
        if out.timed_out:
            return SessionOutput(text, -1, True, out.truncated, f"timeout after {timeout}s")
        return SessionOutput(text, out.exit_code, False, out.truncated)

    async def close_session(self, sandbox_id: str, session: str) -> None:
        await self.exec(sandbox_id, ExecRequest(argv=["rm", "-rf", _session_dir(session)], timeout=30))

    # --- files (run inside the sandbox) --------------------------------------------------------

    async def read_file(self, sandbox_id: str, path: str, max_bytes: int) -> bytes:
        out = await self.exec(sandbox_id, ExecRequest(argv=["cat", "--", path], timeout=60, max_output=max_bytes))
        if out.exit_code != 0:
            raise BadRequest(f"cannot read {path}: {out.stderr.decode(errors='replace').strip()}")
        if out.truncated:
            raise too_large(path, max_bytes)
        return out.stdout

    async def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int | None = None) -> None:
        parent = path.rsplit("/", 1)[0] or "/"
        cmd = f'mkdir -p -- {shlex.quote(parent)} && cat > {shlex.quote(path)}'
        if mode is not None:
            cmd += f" && chmod {mode:o} -- {shlex.quote(path)}"
        out = await self.exec(sandbox_id, ExecRequest(argv=bash(cmd), stdin=data, timeout=60, merge_stderr=True))
        if out.exit_code != 0:
            raise BadRequest(f"cannot write {path}: {out.stdout.decode(errors='replace').strip()}")

    async def extract_tar(self, sandbox_id: str, target_dir: str, tar_bytes: bytes) -> None:
        z = "z" if tar_bytes[:2] == b"\x1f\x8b" else ""   # tar cannot sniff compression on a pipe
        cmd = (f"mkdir -p -- {shlex.quote(target_dir)} && "
               f"tar -x{z} --no-same-owner --no-same-permissions -f - -C {shlex.quote(target_dir)}")
        out = await self.exec(sandbox_id, ExecRequest(argv=bash(cmd), stdin=tar_bytes, timeout=300, merge_stderr=True))
        if out.exit_code != 0:
            raise BadRequest(f"cannot extract into {target_dir}: {out.stdout.decode(errors='replace').strip()}")


def too_large(path: str, max_bytes: int) -> PayloadTooLarge:
    """The answer to a read of a file above the read cap (every backend's words)."""
    return PayloadTooLarge(f"{path} is larger than {max_bytes} bytes")


def _session_dir(session: str) -> str:
    return f"/tmp/.lts-sessions/{session_name(session)}"
