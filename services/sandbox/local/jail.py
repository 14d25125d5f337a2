"""The bubblewrap command line of a sandboxed process, and the host pieces it binds.

Inside, a process sees: a read-only root built from individual binds (/usr, a minimal /etc,
the Python runtime and venv at their *original* paths), its workspace at /workspace, its own
/tmp, /root ($HOME), /logs, /tests, /solution (all on the sandbox's size-capped tmpfs), a fresh
/proc of its own pid namespace, a minimal /dev, and a network namespace with only loopback.
It runs as the sandbox uid with no capabilities, NoNewPrivs, no nested user namespaces and a
new session (no TIOCSTI on a host terminal).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from . import namespace

log = logging.getLogger(__name__)

BWRAP = "bwrap"

# Host /etc entries a sandbox needs (shared libraries, alternatives symlinks, time zone, CA
# certificates...). Nothing secret: never /etc/shadow, /etc/ssl/private, ssh keys.
ETC_COPY = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf",
            "debian_version", "os-release", "bash.bashrc", "inputrc", "mime.types", "ssl/certs", "gitconfig",
            "protocols", "services", "login.defs", "environment")
MERGED_USR_LINKS = ("bin", "lib", "lib32", "lib64", "libx32", "sbin")


@dataclass
class HostLayout:
    """Host-side pieces prepared once per backend start under ``dir``."""
    dir: Path
    etc: Path
    runtime_binds: list[tuple[str, str]]  # (source visible to the sandbox uid, path inside)
    root_links: list[tuple[str, str]]     # (link target, path) for merged-/usr symlinks
    root_binds: list[str]                 # top-level dirs bound as-is (non-merged-/usr systems)


def prepare_host_layout(dir: Path, runtime_paths: list[str], uid: int, gid: int, user: str) -> HostLayout:
    dir.mkdir(parents=True, exist_ok=True)
    os.chmod(dir, 0o755)
    etc = dir / "etc"
    shutil.rmtree(etc, ignore_errors=True)
    etc.mkdir()
    for name in ETC_COPY:
        src, dst = Path("/etc") / name, etc / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            if src.is_symlink() or src.is_file():
                shutil.copy2(src, dst, follow_symlinks=False)
            elif src.is_dir():
                shutil.copytree(src, dst, symlinks=True)
        except OSError as e:   # unreadable as non-root: the sandbox just goes without it
            log.warning("not copying %s into the sandbox /etc: %s", src, e)
    (etc / "passwd").write_text(f"root:x:0:0:root:/root:/bin/bash\n{user}:x:{uid}:{gid}:sandbox:/root:/bin/bash\n"
                                if uid != 0 else "root:x:0:0:root:/root:/bin/bash\n")
    (etc / "group").write_text(f"root:x:0:\n{user}:x:{gid}:\n" if gid != 0 else "root:x:0:\n")
    (etc / "hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost\n")
    (etc / "hostname").write_text("sandbox\n")
    (etc / "resolv.conf").write_text("")
    for p in etc.rglob("*"):
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)
    os.chmod(etc, 0o755)

    # Bind the runtime at its original path (pyvenv.cfg's absolute `home`, libpython's RPATH).
    # A path under a directory the sandbox uid cannot traverse (e.g. /root, 0700) cannot be a
    # bind source for bwrap running as that uid: expose it through a bind in our private mount
    # namespace under ``dir``/runtime/<n> first (shared doc §3.4 pitfalls).
    runtime_dir = dir / "runtime"
    runtime_dir.mkdir(exist_ok=True)
    os.chmod(runtime_dir, 0o755)
    binds: list[tuple[str, str]] = []
    for i, path in enumerate(dict.fromkeys(os.path.realpath(p) for p in runtime_paths if os.path.isdir(p))):
        if _traversable(path):
            binds.append((path, path))
            continue
        hop = runtime_dir / str(i)
        hop.mkdir(exist_ok=True)
        namespace.umount(str(hop))
        namespace.mount(path, str(hop), None, namespace.MS_BIND | namespace.MS_REC)
        binds.append((str(hop), path))
    links, root_binds = [], []
    for name in MERGED_USR_LINKS:
        p = Path("/") / name
        if p.is_symlink():
            links.append((os.readlink(p), f"/{name}"))
        elif p.is_dir():
            root_binds.append(f"/{name}")
    return HostLayout(dir, etc, binds, links, root_binds)


def _traversable(path: str) -> bool:
    """Every ancestor of ``path`` is world-executable (searchable)."""
    p = Path(path)
    for parent in [p, *p.parents]:
        try:
            if not parent.stat().st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


def bwrap_argv(layout: HostLayout, merged: Path, scratch: Path, scratch_dirs, cwd: str, env: dict[str, str],
               argv: list[str], privileged_userns: bool, shm_mb: int = 64,
               extra_binds: list[tuple[str, str]] = ()) -> list[str]:
    """``privileged_userns``: we are uid 0 (in our own user namespace) and cannot switch to a
    sandbox uid, so bwrap must drop every capability itself."""
    a = [BWRAP, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
         "--as-pid-1",
         "--hostname", "sandbox", "--clearenv"]
    if privileged_userns:
        a += ["--cap-drop", "ALL"]
    for k, v in env.items():
        a += ["--setenv", k, v]
    a += ["--ro-bind", "/usr", "/usr"]
    for target, link in layout.root_links:
        a += ["--symlink", target, link]
    for d in layout.root_binds:
        a += ["--ro-bind", d, d]
    a += ["--ro-bind", str(layout.etc), "/etc",
          "--bind", str(merged), "/workspace"]
    for name, inside, _ in scratch_dirs:
        a += ["--bind", str(scratch / name), inside]
    for src, dst in layout.runtime_binds:     # after /root: the runtime may live under it
        a += ["--ro-bind", src, dst]
    for src, dst in extra_binds:              # SandboxSpec.binds, validated by the backend
        a += ["--ro-bind", src, dst]
    a += ["--proc", "/proc", "--dev", "/dev",
          "--size", str(shm_mb * 1024 * 1024), "--tmpfs", "/dev/shm",
          "--remount-ro", "/", "--chdir", cwd, "--", *argv]
    return a
