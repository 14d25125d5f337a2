"""Spawning one contained process: join the sandbox's cgroups, set rlimits, drop to the
sandbox uid (all in the child between fork and exec), then exec bubblewrap. Output is read
with a byte cap; a wall-clock timeout kills the process's whole cgroup (setsid children too).
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..backends.base import ExecOutput

# Past this many bytes on one stream we stop draining and kill the process (flood guard);
# up to it, bytes beyond max_output are read and discarded so ordinary chatty commands finish.
DRAIN_LIMIT = 32 * 1024 * 1024


@dataclass
class Containment:
    cgroup_procs: list[str]              # cgroup.procs files to join (empty: no cgroups)
    rlimits: list[tuple[int, int]]       # (resource.RLIMIT_*, value)
    uid: int | None                      # switch to this uid/gid (None: stay)
    gid: int | None


def _clamp_rlimits(rlimits: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Hard limits cannot be raised here (no CAP_SYS_RESOURCE): never ask above the current."""
    out = []
    for res, value in rlimits:
        _, hard = resource.getrlimit(res)
        out.append((res, value if hard == resource.RLIM_INFINITY else min(value, hard)))
    return out


def make_preexec(c: Containment) -> Callable[[], None]:
    procs = [p.encode() for p in c.cgroup_procs]
    rlimits = _clamp_rlimits(c.rlimits)

    def preexec() -> None:  # runs in the child after fork: only async-signal-safe-ish os calls
        pid = str(os.getpid()).encode()
        for p in procs:
            fd = os.open(p, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        for res, value in rlimits:
            resource.setrlimit(res, (value, value))
        if c.uid is not None:
            os.setgroups([])
            os.setgid(c.gid)
            os.setuid(c.uid)
    return preexec


async def _read_capped(stream: asyncio.StreamReader, keep: int, on_flood: Callable[[], None]) -> tuple[bytes, bool]:
    chunks, kept, total = [], 0, 0
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            break
        total += len(chunk)
        if kept < keep:
            chunks.append(chunk[: keep - kept])
            kept += len(chunks[-1])
        if total > DRAIN_LIMIT:
            on_flood()
            break
    return b"".join(chunks), total > keep


async def run_contained(argv: list[str], containment: Containment, *, stdin: bytes | None, timeout: float,
                        max_output: int, merge_stderr: bool, kill_tree: Callable[[], None]) -> ExecOutput:
    """Run ``argv`` (a bwrap command line) and collect its output.

    ``kill_tree`` kills every process of this command (its cgroup v2 leaf); it is called on
    timeout and on output flood, after which the launcher is SIGKILLed as well.
    """
    start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
        preexec_fn=make_preexec(containment), close_fds=True, start_new_session=True,
        env={"PATH": "/usr/bin:/bin"})
    killed = False

    def kill() -> None:
        nonlocal killed
        killed = True
        try:
            kill_tree()
        finally:
            try:
                proc.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass

    async def feed() -> None:
        if stdin is None or proc.stdin is None:
            return
        try:
            proc.stdin.write(stdin)
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            proc.stdin.close()

    readers = [asyncio.ensure_future(_read_capped(proc.stdout, max_output, kill))]
    if not merge_stderr:
        readers.append(asyncio.ensure_future(_read_capped(proc.stderr, max_output, kill)))
    feeder = asyncio.ensure_future(feed())
    waiter = asyncio.ensure_future(proc.wait())
    timed_out = False
    try:
        _, pending = await asyncio.wait([waiter, feeder, *readers], timeout=timeout)
        if pending:
            timed_out = True
            kill()
    except BaseException:  # cancelled (client went away): leave nothing running
        kill()
        raise
    finally:
        # After a kill the pipes close as soon as every process of the tree is gone.
        results = await asyncio.gather(*readers, return_exceptions=True)
        feeder.cancel()
        await waiter
    out = [r if isinstance(r, tuple) else (b"", False) for r in results]
    stdout, t1 = out[0]
    stderr, t2 = out[1] if len(out) > 1 else (b"", False)
    rc = proc.returncode if proc.returncode is not None else -1
    return ExecOutput(exit_code=-1 if timed_out else rc, stdout=stdout, stderr=stderr, timed_out=timed_out,
                      truncated=t1 or t2 or (killed and not timed_out), duration_s=time.monotonic() - start)
