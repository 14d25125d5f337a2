"""The sandbox manager as a Harbor environment: Harbor's own runner drives our sandboxes.

    LTS_SANDBOX_URL=http://127.0.0.1:18080 LTS_SANDBOX_KEY=... \\
    .venv-harbor/bin/harbor run -p datasets/swebench-sample/sample__stats-202 -a oracle \\
        -e services.tasks.harbor_env:LtsSandboxEnvironment

Needs Harbor (``bash setup.sh harbor``: harbor==0.26.0 on Python 3.12 in .venv-harbor) and a
sandbox manager running its docker backend. ``start`` builds and history-scrubs the task's image
(``services.sandbox.docker_images``, on the Docker host of ``DOCKER_HOST``) and creates one
sandbox of it with the task's cpus / memory; every Harbor call (exec, uploads, downloads) is a call
of the manager's API.

Network per phase (Harbor's ``[agent]`` / ``[verifier] network_mode``, switched by Harbor through
``set_network_policy``; the capability ``dynamic_network_policy``): ``no-network`` is the manager's ``none``
(loopback only), ``public`` its ``registry`` (loopback plus the manager's package-registry / upstream-file
mirror, nothing else: what our own validation gives a published SWE-bench verifier, whose ``uv run parser.py``
installs swebench and fetches upstream requirement files); ``allowlist`` is refused (Harbor says so before the
trial). A sandbox's network is fixed when it is created, so a switch moves the trial into a fresh sandbox of the
scrubbed image in the new mode: the workspace's diff against the base commit
(``grading.cleangrade.extract_patch`` / ``apply_patch``, as clean grading moves an agent's patch) and ``/logs``
(but ``/logs/verifier``) carry over; anything else the previous phase left outside the workspace does not. A
SWE-bench task (agent ``no-network``, verifier ``public``) thus runs its agent without network and its verifier
on the mirror, as ``prepare_sandbox.py --validate`` and rollouts do. Set ``LTS_MIRROR_DIR`` to the manager's
mirror dir (``docker.mirror.dir``) when it is not the default: ``start`` exports the task's upstream files there.

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
from harbor.models.task.config import NetworkMode, NetworkPolicy

from services.sandbox.client import SandboxManagerClient
from services.sandbox.docker_images import docker_client, task_image

from .grading.cleangrade import apply_patch, extract_patch
from .task import load_task


def sandbox_network(policy: NetworkPolicy) -> str:
    """The manager's network mode for a Harbor network policy (see module docstring)."""
    if policy.network_mode == NetworkMode.NO_NETWORK:
        return "none"
    if policy.network_mode == NetworkMode.PUBLIC:
        return "registry"
    raise ValueError(f"network_mode={policy.network_mode.value!r} is not supported by the lts-sandbox environment")


class LtsSandboxEnvironment(BaseEnvironment):
    """One sandbox of the sandbox manager (docker backend) per Harbor environment."""

    @staticmethod
    def type() -> str:
        return "lts-sandbox"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True, dynamic_network_policy=True)

    def _validate_definition(self) -> None:
        if not (self.environment_dir / "Dockerfile").is_file() and not self.task_env_config.docker_image:
            raise FileNotFoundError(f"{self.environment_dir}/Dockerfile is missing (and no [environment].docker_image)")

    async def start(self, force_build: bool) -> None:

        task = load_task(self.environment_dir.parent)
        image = await asyncio.to_thread(task_image, docker_client(), task)
        self._image, self._commit, self._workdir = image["image"], image["commit"], image["workdir"]
        self._client = SandboxManagerClient(os.environ.get("LTS_SANDBOX_URL", "http://127.0.0.1:18080"),
                                            os.environ.get("LTS_SANDBOX_KEY"))
        # the first phase's network (setup runs in it too), else the environment's own
        first = self._phase_network_policies[0] if self._phase_network_policies else self.network_policy
        self._network = sandbox_network(first)
        self._sandbox = await self._create(self._network)

    async def _create(self, network: str):
        limits = {}
        if self.task_env_config.cpus:
            limits["cpus"] = float(self.task_env_config.cpus)
        if self.task_env_config.memory_mb:
            limits["memory_mb"] = int(self.task_env_config.memory_mb)
        sb = await self._client.create(image=self._image, limits=limits or None, network=network)
        await sb.run("mkdir -p /logs/agent /logs/verifier /logs/artifacts", cwd="/")
        return sb

    async def _apply_network_policy(self, network_policy: NetworkPolicy) -> None:
        """Move the trial into a fresh sandbox of the policy's network (see module docstring)."""
        network = sandbox_network(network_policy)
        if network == self._network:
            return
        old = self._sandbox
        ex = await extract_patch(old, self._commit)
        if ex.error:
            raise RuntimeError(f"switching to network {network!r}: {ex.error}")
        tmp = f"/tmp/.lts-logs-{os.urandom(4).hex()}.tar.gz"
        r = await old.run(f"tar -czf {tmp} -C /logs --exclude=./verifier . && cat {tmp} >/dev/null", cwd="/")
        logs = await old.read_bytes(tmp) if r.exit_code == 0 else b""
        new = await self._create(network)
        try:
            err = await apply_patch(new, ex.patch)
            if err:
                raise RuntimeError(f"switching to network {network!r}: {err}")
            if logs:
                await new.write_file(tmp, logs)
                await new.run(f"tar -xzf {tmp} -C /logs; rm -f {tmp}", cwd="/")
        except BaseException:
            await new.close()
            raise
        self._sandbox, self._network = new, network
        await old.close()

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
