"""Private mount namespace for the process that manages local sandboxes, and mount syscalls.

Every overlay/tmpfs a sandbox needs is mounted in the manager's *private* mount namespace:
the host never sees them, and they vanish with the namespace if the manager is killed -9.
We enter it by re-executing the current command under ``unshare`` (a multi-threaded
process cannot unshare its mount namespace), before any thread is started.
As non-root, ``unshare --user --map-root-user`` gives a user namespace in which we may mount
tmpfs and overlayfs (no cgroups then; see backend.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import sys

_MARK = "LTS_SANDBOX_MNTNS_PID"

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_BIND = 4096
MS_REC = 16384
MNT_DETACH = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def in_private_namespace() -> bool:
    return os.environ.get(_MARK) == str(os.getpid())


def ensure_private_namespace(argv: list[str] | None = None) -> None:
    """Re-exec this Python command (``sys.orig_argv``, so ``-m module`` is kept) inside a
    private mount namespace unless already there. ``unshare`` execs in place: same pid."""
    if in_private_namespace():
        return
    unshare = shutil.which("unshare")
    if unshare is None:
        raise RuntimeError("`unshare` (util-linux) is required for the local sandbox backend")
    os.environ[_MARK] = str(os.getpid())
    args = [unshare, "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        args += ["--user", "--map-root-user"]
    args += ["--", sys.executable, *(argv if argv is not None else sys.orig_argv[1:])]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(unshare, args)


def mount(source: str, target: str, fstype: str | None, flags: int = 0, data: str | None = None) -> None:
    rc = _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                     data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype or 'bind'} {source} -> {target} ({data or ''}): {os.strerror(err)}")


def umount(target: str, detach: bool = True) -> None:
    """Unmount; silently ignores 'not mounted' and 'no such file'."""
    rc = _libc.umount2(target.encode(), MNT_DETACH if detach else 0)
    if rc != 0:
        err = ctypes.get_errno()
        if err not in (22, 2):  # EINVAL: not a mount point, ENOENT
            raise OSError(err, f"umount {target}: {os.strerror(err)}")


def is_mount(path: str) -> bool:
    return os.path.ismount(path)
