"""HostSandbox: a dev/test fallback implementing ``services.common.sandbox_api.Sandbox`` with a
temporary directory and plain subprocesses.

**There is NO isolation**: commands run as the calling user on the host, can read and write the
whole file system and reach the network. Use it only for tests and development of the task
library / verifier (trusted code: our own gold solutions and test scripts). Real rollouts must use
the sandbox manager's client (``services.sandbox``), which provides the same interface.

Sandbox paths are mapped onto the temp dir: ``/workspace``, ``/tests``, ``/logs`` and ``/solution``
become ``<root>/workspace`` etc. The mapping is textual: those absolute paths are rewritten in
command strings, in ``cwd`` / ``env`` values, in the paths given to the file methods, and inside
``*.sh`` files uploaded with :meth:`upload_dir` (so Harbor's ``test.sh`` / ``solve.sh``, which use
the absolute paths, work unchanged). Other absolute paths are the host's. File contents written
with :meth:`write_file` are never rewritten.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

from services.common.sandbox_api import ExecResult

MAPPED = ("workspace", "tests", "logs", "solution")
_PATH_RE = re.compile(r"(?<![\w./~-])/(" + "|".join(MAPPED) + r")(?![\w.-])")


class HostSandbox:
    """One sandbox = one temp dir; see the module docstring (no isolation)."""

    def __init__(self, root: Path, sandbox_id: str | None = None):
        self.root = Path(root)
        self.sandbox_id = sandbox_id or f"host-{uuid.uuid4().hex[:12]}"
        self.closed = False
        for name in MAPPED:
            (self.root / name).mkdir(parents=True, exist_ok=True)
        (self.root / "logs" / "verifier").mkdir(exist_ok=True)
        (self.root / "logs" / "agent").mkdir(exist_ok=True)
        (self.root / "home").mkdir(exist_ok=True)

    @classmethod
    async def create(cls, base_dir: str | Path | None = None, parent: str | Path | None = None) -> "HostSandbox":
        """A new sandbox whose /workspace is a copy of ``base_dir`` (the cached lower layer)."""
        root = Path(tempfile.mkdtemp(prefix="lts-hostsbx-", dir=parent))
        if base_dir is not None:
            await asyncio.to_thread(shutil.copytree, base_dir, root / "workspace", symlinks=True,
                                    dirs_exist_ok=True)
        return cls(root)

    # path mapping ---------------------------------------------------------------------------
    def host_path(self, path: str) -> Path:
        """Host path of a sandbox path (unmapped absolute paths are the host's own)."""
        if not path.startswith("/"):
            path = "/workspace/" + path
        return Path(self.rewrite(path))

    def rewrite(self, text: str) -> str:
        return _PATH_RE.sub(lambda m: f"{self.root}/{m.group(1)}", text)

    # Sandbox protocol -----------------------------------------------------------------------
    async def run(self, cmd: str, timeout: float = 60.0, max_output: int = 100_000,
                  cwd: str = "/workspace", env: dict[str, str] | None = None) -> ExecResult:
        self._check_open()
        full_env = {
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(self.root / "home"),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        full_env.update({k: self.rewrite(str(v)) for k, v in (env or {}).items()})
        t0 = time.monotonic()
        with tempfile.TemporaryFile(dir=self.root) as out:
            proc = await asyncio.create_subprocess_exec(
                "bash", "-c", self.rewrite(cmd), cwd=self.host_path(cwd), env=full_env,
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True)
            timed_out = False
            try:
                code = await asyncio.wait_for(proc.wait(), timeout)
            except asyncio.TimeoutError:
                timed_out, code = True, -1
                _killpg(proc.pid)
                await proc.wait()
            except BaseException:  # cancelled: do not leave the process behind
                _killpg(proc.pid)
                await proc.wait()
                raise
            out.seek(0)
            data = out.read(max_output * 4 + 4)
        text = data.decode(errors="replace")
        truncated = len(text) > max_output
        return ExecResult(exit_code=code, output=text[:max_output], timed_out=timed_out,
                          truncated=truncated, duration_s=time.monotonic() - t0)

    async def read_file(self, path: str) -> str:
        self._check_open()
        return self.host_path(path).read_text(errors="replace")

    async def write_file(self, path: str, content: str) -> None:
        self._check_open()
        p = self.host_path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)

    async def upload_dir(self, local_dir: str, remote_dir: str) -> None:
        self._check_open()
        dst = self.host_path(remote_dir)

        def copy() -> None:
            shutil.copytree(local_dir, dst, symlinks=True, dirs_exist_ok=True)
            for sh in dst.rglob("*.sh"):
                if sh.is_file() and not sh.is_symlink():
                    sh.write_text(self.rewrite(sh.read_text(errors="replace")))

        await asyncio.to_thread(copy)

    async def heartbeat(self) -> None:
        self._check_open()

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await asyncio.to_thread(shutil.rmtree, self.root, True)

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"sandbox {self.sandbox_id} is closed")


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def host_sandbox_factory(base_dir: str | Path) -> HostSandbox:
    """``SandboxFactory`` for the verifier / prepare_sandbox: a HostSandbox over ``base_dir``."""
    return await HostSandbox.create(base_dir)
