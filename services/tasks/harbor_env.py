"""The sandbox manager as a Harbor environment: Harbor's own runner drives our sandboxes.

    LTS_SANDBOX_URL=http://127.0.0.1:18080 LTS_SANDBOX_KEY=... \\
    .venv-harbor/bin/harbor run -p datasets/swebench-sample/sample__stats-202 -a oracle \\
        -e services.tasks.harbor_env:LtsSandboxEnvironment

Needs Harbor (``bash setup.sh harbor``: harbor==0.26.0 on Python 3.12 in .venv-harbor) and a
sandbox manager running its docker backend. ``start`` builds and history-scrubs the task's image
(``services.sandbox.docker_images``, on the Docker host of ``DOCKER_HOST``) and creates one
sandbox of it with the task's cpus / memory; every Harbor call (exec, uploads, downloads) is a call
of the manager's API. Containers have no network, so tasks asking for public network still get
none (the capability ``disable_internet`` is what we offer).

It lives in the task library, not in ``services/sandbox``: it loads the Harbor task (``task.py``) and uses the
sandbox manager only through its public modules (``client``, ``docker_images``), so imports point one way,
tasks -> sandbox.
"""

from __future__ import annotations

import asyncio
import io
import os
import shlex
import tarfile
from pathlib import Path

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities

from services.sandbox.client import SandboxManagerClient
from services.sandbox.docker_images import docker_client, task_image

from .task import load_task


class LtsSandboxEnvironment(BaseEnvironment):
    """One sandbox of the sandbox manager (docker backend) per Harbor environment."""

    @staticmethod
    def type() -> str:
        return "lts-sandbox"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True)

    def _validate_definition(self) -> None:
        if not (self.environment_dir / "Dockerfile").is_file() and not self.task_env_config.docker_image:
            raise FileNotFoundError(f"{self.environment_dir}/Dockerfile is missing (and no [environment].docker_image)")

    async def start(self, force_build: bool) -> None:

        task = load_task(self.environment_dir.parent)
        image = await asyncio.to_thread(task_image, docker_client(), task)
        self._workdir = image["workdir"]
        self._client = SandboxManagerClient(os.environ.get("LTS_SANDBOX_URL", "http://127.0.0.1:18080"),
                                            os.environ.get("LTS_SANDBOX_KEY"))
        limits = {}
        if self.task_env_config.cpus:
            limits["cpus"] = float(self.task_env_config.cpus)
        if self.task_env_config.memory_mb:
            limits["memory_mb"] = int(self.task_env_config.memory_mb)
        self._sandbox = await self._client.create(image=image["image"], limits=limits or None)
        await self._sandbox.run("mkdir -p /logs/agent /logs/verifier /logs/artifacts", cwd="/")

    async def stop(self, delete: bool) -> None:
        sb, client = getattr(self, "_sandbox", None), getattr(self, "_client", None)
        try:
            if sb is not None:
                await sb.close()
        finally:
            if client is not None:
                await client.aclose()

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        r = await self._sandbox.execute(command, timeout=float(timeout_sec or 3600), max_output=10_000_000,
                                        cwd=cwd or self._workdir, env=env)
        return ExecResult(stdout=r.get("stdout", ""), stderr=r.get("stderr", ""),
                          return_code=-1 if r.get("exit_code") is None else r["exit_code"])

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        await self._sandbox.write_file(target_path, Path(source_path).read_bytes())

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await self._sandbox.upload_dir(str(source_dir), target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        target = Path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(await self._sandbox.read_bytes(source_path))

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        tmp = f"/tmp/.lts-download-{os.urandom(4).hex()}.tar.gz"
        r = await self._sandbox.run(f"tar -czf {tmp} -C {shlex.quote(source_dir)} .", cwd="/")
        if r.exit_code != 0:
            raise FileNotFoundError(f"cannot pack {source_dir}: {r.output[-500:]}")
        try:
            data = await self._sandbox.read_bytes(tmp)
        finally:
            await self._sandbox.run(f"rm -f {tmp}", cwd="/")
        target = Path(target_dir)
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tf:
            tf.extractall(target, filter="data")
