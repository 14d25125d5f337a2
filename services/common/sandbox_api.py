"""The one sandbox interface every other part of the project codes against.

Implementations: ``services.sandbox.client.SandboxClient`` (talks to our sandbox manager or a
real ROCK admin over HTTP). Tests may use any object with these methods.
All paths are paths *inside* the sandbox; the workspace (task repository) is ``/workspace``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass
class ExecResult:
    exit_code: int            # -1 when killed by the timeout
    output: str               # stdout and stderr interleaved, capped at max_output characters
    timed_out: bool = False
    truncated: bool = False   # output was longer than max_output
    duration_s: float = 0.0


@runtime_checkable
class Sandbox(Protocol):
    sandbox_id: str

    async def run(self, cmd: str, timeout: float = 60.0, max_output: int = 100_000,
                  cwd: str = "/workspace", env: dict[str, str] | None = None) -> ExecResult: ...

    async def read_file(self, path: str) -> str: ...

    async def write_file(self, path: str, content: str) -> None: ...

    async def upload_dir(self, local_dir: str, remote_dir: str) -> None: ...

    async def heartbeat(self) -> None: ...

    async def close(self) -> None: ...
