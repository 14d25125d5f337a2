"""Sandbox backends behind one interface (``base.SandboxBackend``).

* ``local``  – bubblewrap + overlayfs + cgroups on this host (services/sandbox/local/)
* ``docker`` – one container per sandbox through the Docker SDK
* ``rock``   – a real ROCK admin through rl-rock's ``Sandbox`` client
* ``worker`` – a sandbox worker process (``python -m services.sandbox worker``) over HTTP, or several
  (``worker.urls``: ``worker_pool.WorkerPool``, least-loaded placement)
"""

from __future__ import annotations

from typing import Any

from .base import ExecOutput, ExecRequest, SandboxBackend, SandboxSpec, SessionOutput


def make_backend(name: str, config: dict[str, Any]) -> SandboxBackend:
    """Build the backend ``name`` from the whole sandbox config mapping. Only the chosen backend's module
    is imported (they need different packages, and local.backend imports this package)."""
    if name == "local":
        from ..local.backend import LocalBackend  # noqa: PLC0415 (see the docstring)
        return LocalBackend.from_config(config)
    if name == "docker":
        from .docker_backend import DockerBackend  # noqa: PLC0415 (see the docstring)
        return DockerBackend.from_config(config)
    if name == "rock":
        from .rock_backend import RockBackend  # noqa: PLC0415 (see the docstring)
        return RockBackend.from_config(config)
    if name == "worker" and (config.get("worker") or {}).get("urls"):
        from .worker_pool import WorkerPool  # noqa: PLC0415 (see the docstring)
        return WorkerPool.from_config(config)
    if name == "worker":
        from .worker_client import WorkerBackend  # noqa: PLC0415 (see the docstring)
        return WorkerBackend.from_config(config)
    raise ValueError(f"unknown sandbox backend {name!r} (local | docker | rock | worker)")


__all__ = ["SandboxBackend", "ExecOutput", "ExecRequest", "SandboxSpec", "SessionOutput", "make_backend"]
