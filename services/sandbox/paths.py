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
