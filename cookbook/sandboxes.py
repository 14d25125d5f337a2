"""Where a run's rollouts get their sandboxes: the sandbox manager (isolated; local, Docker or a ROCK admin) or,
for development only, the host."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from services.common.config import load_config
from services.sandbox.client import SandboxManagerClient
from services.tasks.grading.bases import ImageRef
from services.tasks.preparation.hostsandbox import HostSandbox

from .runs import Endpoints


def sandbox_factory(ep: Endpoints, kind: str):
    """``manager`` (isolated sandboxes from the sandbox manager) or ``host`` (dev only, NO isolation)."""
    if kind == "host":
        async def host(base: Path):
            if isinstance(base, ImageRef):
                raise SystemExit(f"image {base}: tasks whose repo lives in their image need the sandbox manager's "
                                 "docker backend (--sandbox manager --sandbox-backend docker)")
            return await HostSandbox.create(base_dir=base)
        return host
    clients: dict[Any, SandboxManagerClient] = {}
    rock = load_config("harbor").get("sandbox") or {}   # a ROCK admin: sandbox.image and default_limits

    async def manager(base: Path, binds: list[dict[str, str]] | None = None):
        loop = asyncio.get_running_loop()
        if loop not in clients:
            clients[loop] = SandboxManagerClient(ep.sandbox_url, ep.sandbox_key, flavor=ep.sandbox_flavor)
        if isinstance(base, ImageRef):   # docker backend: the task's scrubbed image
            return await clients[loop].create(image=str(base), limits=base.limits, binds=binds,
                                              network=base.network)
        if ep.sandbox_flavor == "rock":   # the base dir is uploaded into a container of sandbox.image
            return await clients[loop].create(base_dir=str(base), image=rock.get("image"),
                                              limits=rock.get("default_limits"), binds=binds)
        return await clients[loop].create(base_dir=str(base), binds=binds)
    return manager
