"""Per-sandbox cgroups on this host's hybrid hierarchy (shared doc §3.1):
limits through cgroup v1 (memory, pids, cpu), teardown through a cgroup v2 directory's
``cgroup.kill`` (kills every process inside, setsid escapers included).

Layout: <v1 controller>/<parent>/<sandbox>         limits for the whole sandbox
        <v2 root>/<parent>/<sandbox>/<unit>         one v2 leaf per command or session
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from ..limits import Limits

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpu")


def v2_root() -> Path | None:
    for p in (CGROUP_ROOT / "unified", CGROUP_ROOT):
        if (p / "cgroup.procs").exists() and (p / "cgroup.subtree_control").exists():
            return p
    return None


def cgroups_usable(parent: str) -> bool:
    """True if we may create v1 limit groups and v2 kill groups here."""
    v2 = v2_root()
    if v2 is None:
        return False
    try:
        for d in [CGROUP_ROOT / c / parent for c in V1_CONTROLLERS] + [v2 / parent]:
            d.mkdir(exist_ok=True)
        probe = v2 / parent / ".probe"
        probe.mkdir(exist_ok=True)
        ok = (probe / "cgroup.kill").exists()
        probe.rmdir()
        return ok
    except OSError:
        return False


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class SandboxCgroups:
    def __init__(self, parent: str, sandbox_id: str):
        self.v1 = [CGROUP_ROOT / c / parent / sandbox_id for c in V1_CONTROLLERS]
        root = v2_root()
        assert root is not None
        self.v2 = root / parent / sandbox_id

    def create(self, limits: Limits) -> None:
        for d in self.v1 + [self.v2]:
            d.mkdir(parents=False, exist_ok=True)
        self.apply(limits)

    def apply(self, limits: Limits) -> None:
        mem, pids, cpu = self.v1
        _write(mem / "memory.limit_in_bytes", str(limits.memory_mb * 1024 * 1024))
        _write(pids / "pids.max", str(limits.pids))
        _write(cpu / "cpu.cfs_period_us", "100000")
        _write(cpu / "cpu.cfs_quota_us", str(max(1000, int(limits.cpus * 100000))))

    def unit(self, name: str) -> list[str]:
        """Create the v2 leaf for one command/session; returns the cgroup.procs files a
        process writes its pid into to join this sandbox (v1 groups + the v2 leaf)."""
        leaf = self.v2 / name
        leaf.mkdir(exist_ok=True)
        return [str(d / "cgroup.procs") for d in self.v1] + [str(leaf / "cgroup.procs")]

    def kill_unit(self, name: str) -> None:
        _kill_and_remove(self.v2 / name)

    def kill_all(self) -> None:
        """Kill every process of the sandbox and remove the v2 leaves (keeps the groups)."""
        if self.v2.exists():
            _kill(self.v2)
            for leaf in [p for p in self.v2.iterdir() if p.is_dir()]:
                _kill_and_remove(leaf)

    def memory_failcnt(self) -> int:
        try:
            return int((self.v1[0] / "memory.failcnt").read_text())
        except OSError:
            return 0

    def destroy(self) -> None:
        self.kill_all()
        _kill_and_remove(self.v2)
        for d in self.v1:
            _rmdir_when_empty(d)


def _kill(d: Path) -> None:
    try:
        _write(d / "cgroup.kill", "1")
    except FileNotFoundError:
        pass


def _kill_and_remove(d: Path) -> None:
    if not d.exists():
        return
    for child in [p for p in d.iterdir() if p.is_dir()]:
        _kill_and_remove(child)
    _kill(d)
    _rmdir_when_empty(d)


def _rmdir_when_empty(d: Path, timeout: float = 5.0) -> None:
    """rmdir a cgroup once its (killed) processes are gone; cgroup.kill is asynchronous."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if time.monotonic() > deadline:
                log.error("cgroup %s still busy after %.0fs: %s", d, timeout, e)
                raise
            procs = d / "cgroup.procs"
            if procs.exists():
                for pid in procs.read_text().split():
                    try:
                        os.kill(int(pid), 9)
                    except (ProcessLookupError, ValueError):
                        pass
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def remove_stale(parent: str, keep: set[str]) -> list[str]:
    """Kill and remove sandbox groups under ``parent`` not in ``keep`` (leftovers of a dead
    manager). Returns the removed sandbox ids."""
    removed: set[str] = set()
    v2 = v2_root()
    roots = [CGROUP_ROOT / c / parent for c in V1_CONTROLLERS] + ([v2 / parent] if v2 else [])
    # v2 first: kill everything, then the v1 dirs can be removed.
    for root in reversed(roots):
        if not root.exists():
            continue
        for d in root.iterdir():
            if d.is_dir() and d.name not in keep and not d.name.startswith("."):
                if root.parent == v2:
                    _kill_and_remove(d)
                else:
                    _rmdir_when_empty(d)
                removed.add(d.name)
    return sorted(removed)
