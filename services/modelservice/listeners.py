"""The ModelService's listening sockets: a Unix socket bound into sandboxes, and loopback TCP. Shared by
`python -m services.modelservice` and the in-process ModelService of agent_runner.py (own module: no import
circle between the two)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path


def unix_listener(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o755)                 # the sandbox uid must traverse to it
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise RuntimeError(f"{path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX)
        try:
            probe.connect(str(path))
            raise RuntimeError(f"another ModelService is listening on {path}")
        except (ConnectionRefusedError, FileNotFoundError):
            path.unlink()                        # stale socket of a dead process
        finally:
            probe.close()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    os.chmod(path, 0o666)                        # sandbox processes run as another uid
    s.listen(256)
    s.setblocking(False)
    return s


def tcp_listener(host: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(256)
    s.setblocking(False)
    return s
