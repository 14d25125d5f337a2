"""Workspaces: a cached, read-only *base* (the overlay's lower layer) per task repository,
and per sandbox a size-capped tmpfs holding the overlay's upper/work dirs plus the
sandbox's writable /tmp, $HOME (/root), /logs, /tests and /solution.

Never hardlinks: with ``cp -al`` an edit in a copy changes the base (shared doc §3.4).
Reset = unmount both and mount them again (milliseconds; the tmpfs content is discarded).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadRequest
from . import namespace

log = logging.getLogger(__name__)

# Writable directories of a sandbox, all on its tmpfs: (name on the tmpfs, path in sandbox, mode)
SCRATCH_DIRS = (("tmp", "/tmp", 0o1777), ("home", "/root", 0o755), ("logs", "/logs", 0o755),
                ("tests", "/tests", 0o755), ("solution", "/solution", 0o755))


@dataclass(frozen=True)
class Base:
    base_id: str
    lower: Path         # read-only lower layer, owned by the sandbox uid
    source: str | None  # host directory it was copied from (None: empty workspace)


class BaseCache:
    """Copies of task repositories, one per (path, content fingerprint), owned by the sandbox
    uid so the sandbox user can modify files (copy-up) in its overlay."""

    FINGERPRINT_TTL_S = 10.0

    def __init__(self, root: Path, uid: int, gid: int, chown: bool):
        self.root = root
        self.uid, self.gid, self.chown = uid, gid, chown
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fingerprints: dict[str, tuple[float, str]] = {}

    def prepare(self, source: str | None) -> Base:
        if source is None:
            return self._materialise("empty", None)
        src = os.path.realpath(source)
        if not os.path.isdir(src):
            raise BadRequest(f"base directory {source!r} does not exist")
        return self._materialise(self._fingerprint(src), src)

    def _fingerprint(self, src: str) -> str:
        """Hash of every entry's path, size and mtime (cached briefly: a walk per create of a
        big repository would dominate create latency)."""
        now = time.monotonic()
        cached = self._fingerprints.get(src)
        if cached and now - cached[0] < self.FINGERPRINT_TTL_S:
            return cached[1]
        h = hashlib.sha256(src.encode())
        for dirpath, dirnames, filenames in os.walk(src):
            dirnames.sort()
            for name in sorted(filenames) + dirnames:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue
                h.update(f"{dirpath}/{name}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\n".encode())
        digest = h.hexdigest()[:16]
        self._fingerprints[src] = (now, digest)
        return digest

    def _materialise(self, base_id: str, src: str | None) -> Base:
        final = self.root / base_id
        base = Base(base_id, final / "tree", src)
        if (final / "ready").exists():
            return base
        with self._lock:
            if (final / "ready").exists():
                return base
            tmp = self.root / f".{base_id}.{os.getpid()}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            (tmp / "tree").mkdir(parents=True)
            if src is not None:
                # cp -a keeps modes, symlinks and timestamps; it never hardlinks across trees.
                subprocess.run(["cp", "-a", "--no-preserve=ownership", f"{src}/.", str(tmp / "tree")], check=True)
            if self.chown:
                subprocess.run(["chown", "-R", "--no-dereference", f"{self.uid}:{self.gid}", str(tmp / "tree")], check=True)
            os.chmod(tmp, 0o755)
            if (tmp / "tree" / ".git").exists():
                self._refresh_git_index(tmp / "tree")
            shutil.rmtree(final, ignore_errors=True)
            os.rename(tmp, final)
            (final / "ready").write_text(src or "")
            log.info("prepared base %s from %s", base_id, src or "(empty)")
        return base

    def _refresh_git_index(self, tree: Path) -> None:
        """Refresh stat info so git does not rehash every file in each sandbox (423 ms vs
        42 ms). Runs as the sandbox uid with hooks and fsmonitor off: the repo is data."""
        def drop() -> None:
            if self.chown:
                os.setgroups([])
                os.setgid(self.gid)
                os.setuid(self.uid)
        subprocess.run(["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
                        "update-index", "-q", "--refresh"], cwd=tree, preexec_fn=drop,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin", "HOME": "/"})


class Workspace:
    """The mounts of one sandbox under ``run_dir``: scratch (tmpfs) and merged (overlay)."""

    def __init__(self, run_dir: Path, base: Base, uid: int, gid: int, userns: bool):
        self.run_dir = run_dir
        self.scratch = run_dir / "scratch"
        self.merged = run_dir / "merged"
        self.base = base
        self.uid, self.gid = uid, gid
        self.userns = userns   # mounting inside our own user namespace (non-root manager)

    def mount(self, disk_mb: int) -> None:
        self.run_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        self.scratch.mkdir(exist_ok=True)
        self.merged.mkdir(exist_ok=True)
        namespace.mount("lts-sandbox", str(self.scratch), "tmpfs", namespace.MS_NOSUID | namespace.MS_NODEV,
                        f"size={disk_mb}m,mode=0755")
        try:
            for name in ("upper", "work"):
                (self.scratch / name).mkdir()
            os.chown(self.scratch / "upper", self.uid, self.gid)
            for name, _, mode in SCRATCH_DIRS:
                d = self.scratch / name
                d.mkdir()
                os.chown(d, self.uid, self.gid)
                os.chmod(d, mode)
            opts = f"lowerdir={self.base.lower},upperdir={self.scratch}/upper,workdir={self.scratch}/work"
            if self.userns:
                opts += ",userxattr"
            namespace.mount("overlay", str(self.merged), "overlay", namespace.MS_NOSUID | namespace.MS_NODEV, opts)
        except BaseException:
            namespace.umount(str(self.scratch))
            raise

    def resize(self, disk_mb: int) -> None:
        namespace.mount("lts-sandbox", str(self.scratch), "tmpfs",
                        namespace.MS_REMOUNT | namespace.MS_NOSUID | namespace.MS_NODEV, f"size={disk_mb}m")

    def unmount(self) -> None:
        namespace.umount(str(self.merged))
        namespace.umount(str(self.scratch))

    def remove(self) -> None:
        """Unmount and delete the run dir. Refuses to delete through a mount."""
        self.unmount()
        remove_run_dir(self.run_dir)


def remove_run_dir(run_dir: Path) -> None:
    for sub in ("merged", "scratch"):
        p = run_dir / sub
        if p.exists() and namespace.is_mount(str(p)):
            namespace.umount(str(p))
            if namespace.is_mount(str(p)):
                raise RuntimeError(f"{p} is still mounted; not deleting")
    shutil.rmtree(run_dir, ignore_errors=True)
