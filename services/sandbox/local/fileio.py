"""A local sandbox's file reads and writes without starting a process in it.

``read_file`` / ``write_file`` on the other backends run ``cat`` in the sandbox: one bubblewrap with fresh
namespaces each (~3.5-6.5 ms of CPU, most of a one-edit rollout's sandbox CPU on the embedded default).
Here the manager opens the file itself, in the sandbox's own directories on the host (the overlay's
merged view for /workspace, the tmpfs dirs for /tmp, /root, /logs, /tests, /solution), on threads whose
file-system identity is the sandbox user's (``setfsuid``/``setfsgid``, no supplementary groups): the
kernel checks permissions as it would for the sandbox's ``cat`` (root's file capabilities are dropped with
the fsuid), and new files and directories belong to the sandbox user.

What a sandbox controls cannot redirect it: every component is opened relative to the previous one's
descriptor with ``O_NOFOLLOW`` (a symlink anywhere, which would resolve in the sandbox's view, not the
host's, is not followed), the file itself with ``O_NONBLOCK`` and must be a regular file (a FIFO cannot
block the manager). Whatever the fast path cannot settle (a symlink, a missing file, a permission error, a
non-regular file, an oversized write) raises ``Fallback`` and the caller runs the sandboxed ``cat``, which
gives the same answer and the same error text as before. Only for a manager that is real root (in a user
namespace its threads keep capabilities the sandbox lacks).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .workspace import SCRATCH_DIRS

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
# setgroups as a raw syscall: per thread (glibc's setgroups() changes every thread of the process)
_SYS_SETGROUPS_BY_ARCH = {"x86_64": 116, "aarch64": 159}

MOUNTS = {"/workspace": "merged", **{inside: f"scratch/{name}" for name, inside, _ in SCRATCH_DIRS}}


class Fallback(Exception):
    """The fast path cannot answer this request: run it inside the sandbox."""


class TooLarge(Exception):
    """The file is above the read cap (answered as such, without reading it again in the sandbox)."""


def host_location(run_dir: Path, path: str) -> tuple[Path, list[str]] | None:
    """(host directory, components below it) of an absolute, normalised sandbox ``path`` in one of the
    sandbox's own writable trees; None for anything else (the read-only system binds, /proc...)."""
    for inside, sub in MOUNTS.items():
        if path.startswith(inside + "/"):
            parts = path[len(inside) + 1:].split("/")
            if all(p not in ("", ".", "..") for p in parts):
                return run_dir / sub, parts
    return None


def _set_identity(uid: int, gid: int) -> None:
    """This thread's file-system identity becomes the sandbox user's (and nothing else of it)."""
    nr = _SYS_SETGROUPS_BY_ARCH.get(os.uname().machine)
    if nr is None or _libc.syscall(nr, 0, None) != 0:
        raise OSError(ctypes.get_errno(), "setgroups for the sandbox file thread")
    _libc.setfsgid(gid)
    _libc.setfsuid(uid)
    if _libc.setfsuid(-1) != uid or _libc.setfsgid(-1) != gid:   # (-1: only reads the current value)
        raise OSError(errno.EPERM, "setfsuid/setfsgid for the sandbox file thread")


def identity_ok() -> bool:
    """The file threads' identity can be set on this host (real root on a known architecture)."""
    return os.geteuid() == 0 and os.uname().machine in _SYS_SETGROUPS_BY_ARCH


class FileThreads:
    """Two threads with the sandbox user's file-system identity, for every sandbox of one backend."""

    def __init__(self, uid: int, gid: int):
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sandbox-files",
                                       initializer=_set_identity, initargs=(uid, gid))

    def check(self) -> None:
        """Fails here (at start) rather than at the first file, if the identity cannot be set."""
        self.pool.submit(lambda: None).result()

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True)


def _open_dir(root: Path, parts: list[str], create: bool) -> int:
    """A descriptor of the directory ``root/parts...`` (each component opened below the previous one,
    symlinks not followed); missing ones are made (mode 0777 less the umask) when ``create``."""
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in parts:
            try:
                nxt = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise Fallback(name) from None
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass   # made meanwhile (or a symlink: the open below refuses it)
                nxt = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError as e:   # a symlink (ELOOP / ENOTDIR), a file in the way, no permission...
        os.close(fd)
        raise Fallback(str(e)) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_file(root: Path, parts: list[str], flags: int, create_dirs: bool) -> int:
    """A descriptor of the regular file ``root/parts...`` opened with ``flags`` (never through a symlink,
    never blocking on a FIFO); ``Fallback`` for anything else."""
    dfd = _open_dir(root, parts[:-1], create=create_dirs)
    try:
        fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666, dir_fd=dfd)
    except OSError as e:   # a symlink, a FIFO without a reader (ENXIO), a directory, no permission
        raise Fallback(str(e)) from None
    finally:
        os.close(dfd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Fallback("not a regular file")
    return fd


def read(root: Path, parts: list[str], max_bytes: int) -> bytes:
    """The file's bytes; ``TooLarge`` above ``max_bytes``, ``Fallback`` for anything but a readable regular
    file."""
    fd = _open_file(root, parts, os.O_RDONLY, create_dirs=False)
    try:
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise TooLarge()
        return b"".join(chunks)
    finally:
        os.close(fd)


def write(root: Path, parts: list[str], data: bytes, mode: int | None, max_file_bytes: int) -> None:
    """``mkdir -p`` of the parent, the file truncated and written, ``chmod mode``; ``Fallback`` where the
    sandboxed ``cat >`` would follow a symlink or could fail (it then answers with its own error)."""
    if len(data) > max_file_bytes:
        raise Fallback("larger than the sandbox's file size limit")
    fd = _open_file(root, parts, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, create_dirs=True)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if mode is not None:
            os.fchmod(fd, mode)
    except OSError as e:   # ENOSPC on the sandbox's size-capped tmpfs...
        raise Fallback(str(e)) from None
    finally:
        os.close(fd)
