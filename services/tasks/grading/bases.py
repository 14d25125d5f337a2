"""What a sandbox is made from, as the task library hands it to a sandbox factory: a base directory (the
local backend's scrubbed workspace, ``preparation/workspace.py``) or an :class:`ImageRef` (the scrubbed task
image of the docker backend, ``services.sandbox.docker_images``). Grading takes a patch against it,
preparation builds it (``preparation/prepare.py`` ``base_of`` reads one from a manifest entry)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Awaitable, Callable

from services.common.sandbox_api import Sandbox


class ImageRef(str):
    """A docker image name handed to a sandbox factory instead of a base directory; ``commit`` is
    the base commit of the repo inside it (what a patch is taken against)."""

    commit: str | None = None
    limits: dict[str, Any] | None = None   # the task's [environment] cpus / memory_mb / storage_mb (as disk_mb)
    network: str | None = None             # the sandbox's network mode (grading/network.py)

    def __new__(cls, image: str, commit: str | None = None, limits: dict[str, Any] | None = None,
                network: str | None = None) -> "ImageRef":
        ref = super().__new__(cls, image)
        ref.commit, ref.limits, ref.network = commit, limits, network
        return ref

    def with_network(self, network: str | None) -> "ImageRef":
        return ImageRef(str(self), self.commit, self.limits, network)


SandboxFactory = Callable[[Path | ImageRef], Awaitable[Sandbox]]
