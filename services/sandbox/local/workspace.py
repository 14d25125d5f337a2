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
    RECENT_S = 60.0        # a base used this recently is never evicted

    def __init__(self, root: Path, uid: int, gid: int, chown: bool, max_bytes: int | None = None):
        self.root = root
        self.uid, self.gid, self.chown = uid, gid, chown
        self.max_bytes = max_bytes   # evict least recently used bases above this (None: never)
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
            _touch(final / "ready")
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
                subprocess.run(["chown", "-R", "--no-dereference", f"{self.uid}:{self.gid}", str(tmp / "tree")],
                               check=True)
            os.chmod(tmp, 0o755)
            if (tmp / "tree" / ".git").exists():
                self._refresh_git_index(tmp / "tree")
            size = _tree_bytes(tmp / "tree")
            shutil.rmtree(final, ignore_errors=True)
            os.rename(tmp, final)
            (final / "bytes").write_text(str(size))
            (final / "ready").write_text(src or "")
            log.info("prepared base %s from %s", base_id, src or "(empty)")
        return base

    def evict(self, in_use: set[str]) -> list[str]:
        """Delete least recently used bases until the cache holds at most ``max_bytes``; never
        one in ``in_use`` (lower layers of live overlays) or used in the last minute (a create
        may be about to mount it). Returns the evicted base ids."""
        if self.max_bytes is None:
            return []
        with self._lock:
            bases = []
            for d in self.root.iterdir():
                if (d / "ready").exists() and not d.name.startswith("."):
                    try:
                        bases.append(((d / "ready").stat().st_mtime, d, int((d / "bytes").read_text())))
                    except (OSError, ValueError):
                        bases.append(((d / "ready").stat().st_mtime, d, _tree_bytes(d / "tree")))
            total = sum(b[2] for b in bases)
            evicted, now = [], time.time()
            for used, d, size in sorted(bases):
                if total <= self.max_bytes:
                    break
                if d.name in in_use or now - used < self.RECENT_S:
                    continue
                (d / "ready").unlink()
                shutil.rmtree(d, ignore_errors=True)
                total -= size
                evicted.append(d.name)
        if evicted:
            log.info("evicted %d bases (LRU, cache limit %d bytes): %s", len(evicted), self.max_bytes,
                     ", ".join(evicted))
        return evicted

    def _refresh_git_index(self, tree: Path) -> None:
        """Refresh stat info so git does not rehash every file in each sandbox (423 ms vs
        42 ms). The repo is task data and this runs on the host: as the sandbox uid, with hooks
        and fsmonitor off, and with none of the repo's own config (a ``filter.*.clean`` there
        would run while files are rehashed): the config is swapped for a minimal one while git
        runs. A ``.git`` that is a file or symlink (it could point anywhere) is left alone."""
        git_dir = tree / ".git"
        if git_dir.is_symlink() or not git_dir.is_dir() or not (git_dir / "index").is_file():
            return
        env = {"PATH": "/usr/bin:/bin", "HOME": "/", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
               "GIT_ATTR_NOSYSTEM": "1"}
        config, saved = git_dir / "config", git_dir / ".lts-config"
        minimal = _minimal_git_config(config, env)
        env.update(GIT_DIR=str(git_dir), GIT_WORK_TREE=str(tree))
        if config.exists() or config.is_symlink():
            os.rename(config, saved)
        try:
            config.write_text(minimal)
            subprocess.run(["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
                            "-c", "core.attributesFile=/dev/null", "update-index", "-q", "--refresh"],
                           cwd=tree, preexec_fn=self._drop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=env)
        finally:
            config.unlink(missing_ok=True)
            if saved.exists() or saved.is_symlink():
                os.rename(saved, config)

    def _drop(self) -> None:
        if self.chown:
            os.setgroups([])
            os.setgid(self.gid)
            os.setuid(self.uid)


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _tree_bytes(tree: Path) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in filenames + dirnames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total


_FORMAT_KEYS = ("core.repositoryformatversion", "extensions.objectformat", "extensions.refstorage",
                "extensions.compatobjectformat")


def _minimal_git_config(config: Path, env: dict[str, str]) -> str:
    """Only the repository-format keys of ``config`` (read without includes; no command runs)."""
    if config.is_symlink() or not config.is_file():
        return ""
    out = subprocess.run(["git", "config", "--file", str(config), "--no-includes", "--get-regexp",
                          r"^(core\.repositoryformatversion|extensions\..*)$"],
                         capture_output=True, text=True, env=env, cwd="/").stdout
    lines = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        if key.lower() in _FORMAT_KEYS and value.replace("-", "").isalnum():
            lines[key.lower()] = value
    return "".join(f"[{k.split('.')[0]}]\n\t{k.split('.')[1]} = {v}\n" for k, v in lines.items())


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
