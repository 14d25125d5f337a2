"""The network each phase of a task gets (docs/sandbox.md "Network per phase").

* **agent**: none during RL, whatever ``[agent] network_mode`` says (the fix of a public task is on
  the internet); the override is logged once per task. ``agent_network="task"`` (run.sh / cookbook
  ``--agent-network task``) follows the task: ``public`` becomes the docker backend's ``public``
  network, ``allowlist`` is not implemented and stays ``none`` (logged).
* **verifier**: ``[verifier] network_mode = "public"`` (SWE-bench tasks: ``uv run parser.py`` needs
  ``swebench`` and ``datasets``, and swebench fetches files from raw.githubusercontent.com) gets
  ``registry``: no interface but loopback, and through it only the manager's package-registry /
  upstream-file mirror (services.sandbox.mirror). Anything else: ``none``.

Only tasks whose repo lives in their image (an :class:`~services.tasks.grading.bases.ImageRef` base,
docker backend) carry a network mode; directory bases (local backend) never have a network.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..task import Task

log = logging.getLogger(__name__)
AGENT_POLICIES = ("none", "task")
_logged: set[tuple[str, str]] = set()


def _mode(value: Any) -> str | None:
    return getattr(value, "value", value)


def agent_network(task: Task, policy: str = "none") -> str:
    """The agent sandbox's network mode for ``task`` under ``policy`` (see module docstring)."""
    if policy not in AGENT_POLICIES:
        raise ValueError(f"agent network policy must be one of {', '.join(AGENT_POLICIES)}, not {policy!r}")
    want = _mode(task.config.agent.network_mode) or _mode(task.config.environment.network_mode) or "public"
    if policy == "none":
        if want != "no-network" and (task.name, "none") not in _logged:
            _logged.add((task.name, "none"))
            log.info("task %s: [agent] network_mode = %r overridden: the agent gets no network during RL "
                     "(--agent-network task follows the task)", task.name, want)
        return "none"
    if want == "public":
        return "public"
    if want == "allowlist" and (task.name, "allowlist") not in _logged:
        _logged.add((task.name, "allowlist"))
        log.warning("task %s: [agent] network_mode = 'allowlist' is not implemented; the agent gets no network",
                    task.name)
    return "none"


def verifier_network(task: Task) -> str:
    """``registry`` for ``[verifier] network_mode = "public"`` (or ``allowlist``), else ``none``."""
    return "registry" if _mode(task.config.verifier.network_mode) in ("public", "allowlist") else "none"


def with_network(base: Any, network: str) -> Any:
    """``base`` for a sandbox of the given network mode: an ImageRef carries it, a directory has none."""
    if isinstance(base, Path) or not hasattr(base, "with_network"):
        return base
    return base.with_network(None if network == "none" else network)
