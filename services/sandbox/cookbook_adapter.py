"""Our sandboxes as ``tinker_cookbook.sandbox.SandboxInterface`` (tinker-cookbook 0.5.8), so the
cookbook's harbor_rl recipe can use them instead of Modal:

    client = SandboxManagerClient.from_config()
    factory = harbor_sandbox_factory(client, base_for=lambda env_dir: env_dir.parent / "repo")
    # pass `factory` as sandbox_factory to tinker_cookbook.recipes.harbor_rl
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tinker_cookbook.sandbox.sandbox_interface import SandboxResult, SandboxTerminatedError

from .client import RemoteSandbox, SandboxManagerClient
from .errors import Conflict, NotFound

DEFAULT_MAX_OUTPUT = 128 * 1024


class CookbookSandbox:
    """Implements tinker_cookbook.sandbox.SandboxInterface over a RemoteSandbox."""

    def __init__(self, sandbox: RemoteSandbox):
        self._sb = sandbox

    @property
    def sandbox_id(self) -> str:
        return self._sb.sandbox_id

    async def send_heartbeat(self, timeout: int = 30) -> None:
        try:
            await self._sb.heartbeat()
        except (NotFound, Conflict) as e:
            raise SandboxTerminatedError(str(e)) from e

    async def run_command(self, command: str, workdir: str | None = None, timeout: int = 60,
                          max_output_bytes: int | None = None) -> SandboxResult:
        try:
            r = await self._sb.execute(command, timeout=timeout, cwd=workdir or "/workspace",
                                       max_output=max_output_bytes or DEFAULT_MAX_OUTPUT)
        except (NotFound, Conflict) as e:
            raise SandboxTerminatedError(str(e)) from e
        metrics: dict[str, Any] = {k: r[k] for k in ("timed_out", "truncated", "duration_s") if k in r}
        return SandboxResult(stdout=r.get("stdout", ""), stderr=r.get("stderr", ""),
                             exit_code=-1 if r.get("exit_code") is None else r["exit_code"], metrics=metrics)

    async def read_file(self, path: str, max_bytes: int | None = None, timeout: int = 60) -> SandboxResult:
        cmd = f"head -c {int(max_bytes)} -- {shlex.quote(path)}" if max_bytes is not None else f"cat -- {shlex.quote(path)}"
        return await self.run_command(cmd, workdir="/", timeout=timeout, max_output_bytes=max_bytes or 16 * 1024 * 1024)

    async def write_file(self, path: str, content: str | bytes, executable: bool = False,
                         timeout: int = 60) -> SandboxResult:
        try:
            await self._sb.write_file(path, content, mode=0o755 if executable else None)
        except (NotFound, Conflict) as e:
            raise SandboxTerminatedError(str(e)) from e
        except Exception as e:  # same contract as the cookbook's Modal sandbox: errors as a result
            return SandboxResult(stdout="", stderr=str(e), exit_code=1)
        return SandboxResult(stdout="", stderr="", exit_code=0)

    async def cleanup(self) -> None:
        await self._sb.close()


def harbor_sandbox_factory(client: SandboxManagerClient,
                           base_for: Callable[[Path], str | Path | None] = lambda env_dir: None,
                           limits: dict[str, Any] | None = None) -> Callable[[Path, int], Awaitable[CookbookSandbox]]:
    """A ``SandboxFactory`` for tinker_cookbook.recipes.harbor_rl: (env_dir, timeout) -> sandbox.
    ``base_for`` maps a task's environment/ dir to the host directory used as /workspace."""
    async def factory(env_dir: Path, timeout: int) -> CookbookSandbox:
        base = base_for(Path(env_dir))
        sb = await client.create(base_dir=str(base) if base else None, limits=limits, ttl_s=float(timeout))
        return CookbookSandbox(sb)
    return factory
