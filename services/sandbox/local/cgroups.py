"""Per-sandbox cgroups, on either layout of the host (``detect``):

* hybrid (shared doc §3.1): limits through cgroup v1 (memory, pids, cpu), teardown through a
  cgroup v2 directory's ``cgroup.kill`` (kills every process inside, setsid escapers included);
* unified (cgroup v2 only, the systemd default on current distributions): memory.max,
  memory.swap.max, pids.max and cpu.max on the sandbox's v2 directory, the same ``cgroup.kill``.

Layout: <v1 controller>/<parent>/<sandbox>         limits for the whole sandbox (hybrid)
        <v2 root>/<parent>/<sandbox>                limits for the whole sandbox (unified)
        <v2 root>/<parent>/<sandbox>/<unit>         one v2 leaf per command or session

A limit the host cannot enforce falls back (see ``FALLBACK``); the backend logs it loudly and the
manager's /health lists what is enforced.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..limits import Limits

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpu")
LIMITS = ("memory", "pids", "cpu", "kill")
FALLBACK = {"memory": "RLIMIT_AS per process only (tmpfs and page cache uncapped)",
            "pids": "RLIMIT_NPROC, per host uid shared by every sandbox",
            "cpu": "no CPU cap (RLIMIT_CPU time backstop only)",
            "kill": "no cgroups at all: processes are killed by pid namespace only"}


@dataclass(frozen=True)
class Support:
    """What this host's cgroups can do for sandboxes: ``mode`` v1 (hybrid), v2 (unified) or None."""

    mode: str | None
    enforced: tuple[str, ...] = ()
    reason: str = ""

    @property
    def usable(self) -> bool:
        return "kill" in self.enforced  # teardown relies on cgroup.kill

    def describe(self) -> dict:
        return {"cgroups": self.mode, "enforced": list(self.enforced),
                "fallback": {k: FALLBACK[k] for k in LIMITS if k not in self.enforced}, "reason": self.reason}


def detect(parent: str) -> Support:
    """Create ``parent`` in the hierarchy this host has and report which limits sandboxes get."""
    v2 = v2_root()
    if v2 is None:
        return Support(None, reason="no cgroup v2 hierarchy mounted")
    if v2 != CGROUP_ROOT:  # hybrid: v1 controllers beside a v2 'unified' mount
        ok = cgroups_usable(parent)
        return Support("v1", LIMITS if ok else (), "" if ok else "cannot create the v1 limit and v2 kill groups")
    try:
        _mkdir(v2 / parent)
    except OSError as e:
        return Support(None, reason=f"cannot create {v2 / parent}: {e}")
    enforced, problems = [], []
    available = (v2 / "cgroup.controllers").read_text().split()
    for c in V1_CONTROLLERS:  # each controller enabled for the parent's children (the sandboxes)
        try:
            for d in (v2, v2 / parent):
                if c not in (d / "cgroup.subtree_control").read_text().split():
                    _write(d / "cgroup.subtree_control", f"+{c}")
            enforced.append(c)
        except OSError as e:
            problems.append(f"{c}: {'not available' if c not in available else e}")
    try:
        probe = v2 / parent / ".probe"
        _mkdir(probe)
        if (probe / "cgroup.kill").exists():
            enforced.append("kill")
        else:
            problems.append("kill: no cgroup.kill (kernel < 5.14)")
        _rmdir(probe)
    except OSError as e:
        problems.append(f"kill: {e}")
    return Support("v2", tuple(enforced), "; ".join(problems))


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
            _mkdir(d)
        probe = v2 / parent / ".probe"
        _mkdir(probe)
        ok = (probe / "cgroup.kill").exists()
        _rmdir(probe)
        return ok
    except OSError:
        return False


# The only file-system operations on cgroupfs (tests/sandbox/test_cgroups.py emulates the kernel's
# side of them over a plain directory).
def _mkdir(d: Path) -> None:
    d.mkdir(exist_ok=True)


def _rmdir(d: Path) -> None:
    d.rmdir()


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class SandboxCgroups:
    def __init__(self, parent: str, sandbox_id: str, support: Support | None = None):
        self.support = support or Support("v1", LIMITS)
        self.enforced = self.support.enforced
        unified = self.support.mode == "v2"
        self.v1 = [] if unified else [CGROUP_ROOT / c / parent / sandbox_id for c in V1_CONTROLLERS]
        root = v2_root()
        assert root is not None
        self.v2 = root / parent / sandbox_id

    def create(self, limits: Limits) -> None:
        for d in self.v1 + [self.v2]:
            _mkdir(d)
        self.apply(limits)

    def apply(self, limits: Limits) -> None:
        quota = max(1000, int(limits.cpus * 100000))
        if not self.v1:  # unified: the v2 interface files of the sandbox's directory
            files = {"memory": [("memory.max", str(limits.memory_mb * 1024 * 1024)), ("memory.swap.max", "0")],
                     "pids": [("pids.max", str(limits.pids))], "cpu": [("cpu.max", f"{quota} 100000")]}
            for c in self.enforced:
                for name, value in files.get(c, []):
                    if (self.v2 / name).exists() or name != "memory.swap.max":  # no swap accounting: nothing to cap
                        _write(self.v2 / name, value)
            return
        mem, pids, cpu = self.v1
        _write(mem / "memory.limit_in_bytes", str(limits.memory_mb * 1024 * 1024))
        _write(pids / "pids.max", str(limits.pids))
        _write(cpu / "cpu.cfs_period_us", "100000")
        _write(cpu / "cpu.cfs_quota_us", str(quota))

    def unit(self, name: str) -> list[str]:
        """Create the v2 leaf for one command/session; returns the cgroup.procs files a
        process writes its pid into to join this sandbox (v1 groups + the v2 leaf)."""
        leaf = self.v2 / name
        _mkdir(leaf)
        return [str(d / "cgroup.procs") for d in self.v1] + [str(leaf / "cgroup.procs")]

    def kill_unit(self, name: str) -> None:
        _kill_and_remove(self.v2 / name)

    def kill_all(self) -> None:
        """Kill every process of the sandbox and remove the v2 leaves (keeps the groups)."""
        if self.v2.exists():
            _kill(self.v2)
            for leaf in [p for p in self.v2.iterdir() if p.is_dir()]:
                _kill_and_remove(leaf)

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
            _rmdir(d)
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
