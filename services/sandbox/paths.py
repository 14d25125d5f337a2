"""Validation of paths *inside* a sandbox given to the file APIs.

File operations run inside the sandbox (as the sandbox user, in its own mount namespace), so
they cannot escape it anyway; we still reject traversal and odd paths early with a clear 400.
"""

from __future__ import annotations

import posixpath

from .errors import BadRequest

WORKSPACE = "/workspace"


def sandbox_path(path: str, cwd: str = WORKSPACE) -> str:
    """Absolute, normalised path; relative paths are taken from ``cwd``. Rejects '..' and NUL."""
    if not isinstance(path, str) or not path.strip():
        raise BadRequest("path must be a non-empty string")
    if "\x00" in path:
        raise BadRequest("path contains a NUL byte")
    if ".." in path.split("/"):
        raise BadRequest(f"path traversal ('..') is not allowed: {path!r}")
    if len(path) > 4096:
        raise BadRequest("path too long")
    full = path if path.startswith("/") else posixpath.join(cwd, path)
    return posixpath.normpath(full)


def session_name(name: str) -> str:
    """Session names become file and cgroup names: letters, digits, '-', '_', '.' only."""
    if not name or len(name) > 64 or name.startswith(".") or not all(c.isalnum() or c in "-_." for c in name):
        raise BadRequest(f"invalid session name {name!r} (1-64 of letters, digits, '-', '_', '.')")
    return name


def host_dir_under(path: str, roots: list[str], what: str = "base_dir") -> str:
    """The real path of ``path``, an existing host directory inside one of ``roots`` (real paths).
    Task data and callers name host directories only through this: anything else (``/etc``,
    ``/root``, the project's config/) is a 400, symlinks resolved first."""
    if not isinstance(path, str) or not path or "\x00" in path or len(path) > 4096:
        raise BadRequest(f"{what} must be a non-empty path without NUL bytes")
    real = posixpath.realpath(path)
    if not any(real == root or real.startswith(root.rstrip("/") + "/") for root in roots):
        raise BadRequest(f"{what} {path!r} is outside the allowed base directories "
                         f"(config base_sources: {', '.join(roots) or 'none'})")
    if not posixpath.isdir(real):
        raise BadRequest(f"{what} {path!r} does not exist or is not a directory")
    return real
