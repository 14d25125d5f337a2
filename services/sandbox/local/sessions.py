"""Persistent bash sessions inside a sandbox (ROCK's create_session / run_in_session).

One ``bash`` per session runs in its own bubblewrap (same workspace and /tmp as the rest of
the sandbox); state (cwd, variables, background jobs started with nohup) persists between
commands. Each command is sent base64-encoded and followed by a marker line carrying its exit
status; stdin of the command is /dev/null so it cannot eat the marker. On timeout or output
flood the session is killed (its whole cgroup leaf) and must be created again.
"""

from __future__ import annotations

import asyncio
import base64
import re
import secrets
import shlex
from collections.abc import Callable

from ..backends.base import SessionOutput
from .process import DRAIN_LIMIT, Containment, make_preexec


class BashSession:
    def __init__(self, name: str, proc: asyncio.subprocess.Process, kill_tree: Callable[[], None]):
        self.name = name
        self.proc = proc
        self._kill_tree = kill_tree
        self._lock = asyncio.Lock()
        self._buf = bytearray()
        self.alive = True

    @classmethod
    async def start(cls, name: str, argv: list[str], containment: Containment, kill_tree: Callable[[], None],
                    env: dict[str, str] | None, startup_source: list[str] | None) -> tuple["BashSession", str]:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            preexec_fn=make_preexec(containment), close_fds=True, start_new_session=True, env={"PATH": "/usr/bin:/bin"})
        session = cls(name, proc, kill_tree)
        setup = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in (env or {}).items())
        setup += "".join(f"source {shlex.quote(p)}\n" for p in (startup_source or []))
        out = await session.run(setup or "true", timeout=30, max_output=100_000)
        if out.exit_code == -1 or not session.alive:
            session.kill()
            raise RuntimeError(f"session {name!r} failed to start: {out.output or out.failure_reason}")
        return session, out.output

    async def run(self, command: str, timeout: float, max_output: int) -> SessionOutput:
        async with self._lock:
            if not self.alive:
                return SessionOutput("", -1, failure_reason=f"session {self.name!r} is closed")
            nonce = secrets.token_hex(8)
            encoded = base64.b64encode(command.encode()).decode()
            script = (f"__lts_c=$(printf %s {encoded} | base64 -d)\neval \"$__lts_c\" </dev/null\n"
                      f"printf '\\n__LTS_{nonce}_%s__\\n' \"$?\"\n")
            marker = re.compile(rb"\n__LTS_" + nonce.encode() + rb"_(\d+)__\n")
            self._buf.clear()
            try:
                self.proc.stdin.write(script.encode())
                await self.proc.stdin.drain()
                rc = await asyncio.wait_for(self._read_until(marker), timeout)
            except asyncio.TimeoutError:
                self.kill()
                return self._result(-1, max_output, timed_out=True, reason=f"timeout after {timeout}s; session closed")
            except (BrokenPipeError, ConnectionResetError):
                rc = None
            if rc is None:  # the shell exited (e.g. `exit`) or flooded its output
                code = await self.proc.wait()
                flooded = len(self._buf) > DRAIN_LIMIT
                self.kill()
                return self._result(code if not flooded else -1, max_output, flooded=flooded,
                                    reason="output flood; session closed" if flooded else "session shell exited")
            return self._result(rc, max_output)

    async def _read_until(self, marker: re.Pattern[bytes]) -> int | None:
        while True:
            m = marker.search(self._buf, max(0, len(self._buf) - 65536 - 64))
            if m:
                rc = int(m.group(1))  # read before truncating: the match views the buffer
                del self._buf[m.start():]
                return rc
            if len(self._buf) > DRAIN_LIMIT:
                return None
            chunk = await self.proc.stdout.read(65536)
            if not chunk:
                return None
            self._buf += chunk

    def _result(self, rc: int, max_output: int, timed_out: bool = False, flooded: bool = False,
                reason: str = "") -> SessionOutput:
        data = bytes(self._buf)
        self._buf.clear()
        return SessionOutput(data[:max_output].decode(errors="replace"), rc, timed_out,
                             flooded or len(data) > max_output, reason)

    def kill(self) -> None:
        self.alive = False
        try:
            self._kill_tree()
        finally:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass

    async def close(self) -> None:
        self.kill()
        await self.proc.wait()
