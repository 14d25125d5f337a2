"""Checks a service makes before its slow start (loading models, starting Ray), so a set-up that
cannot work is refused in seconds with the exact reason and the fix:

* ``StateLock``: one service instance per state directory (an ``flock`` on ``<state_dir>/<name>.lock``
  that holds the owner's PID and port; the kernel drops it when the process dies, however it dies).
* ``check_port``: the port is free to bind, else the message names the process listening on it
  (from /proc, when it is visible to us).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from pathlib import Path


class Refused(SystemExit):
    """A set-up the service refuses at start (exit status 2, the message on stderr)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class StateLock:
    def __init__(self, state_dir: Path, name: str):
        self.path = Path(state_dir) / f"{name}.lock"
        self.name = name
        self.fd: int | None = None

    def acquire(self, port: int, extra: dict | None = None) -> "StateLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                owner = json.loads(os.read(fd, 4096) or b"{}")
            except ValueError:
                owner = {}
            os.close(fd)
            raise Refused(f"another {self.name} (PID {owner.get('pid', '?')}, port {owner.get('port', '?')}) is "
                          f"running on the state directory {self.path.parent}: stop it first (kill "
                          f"{owner.get('pid', '<pid>')}) or give this one its own --state-dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "port": port, "since": time.time(), **(extra or {})}).encode(),
                  0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _listeners(port: int) -> set[str]:
    """Socket inodes listening on ``port`` (IPv4 and IPv6)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    return inodes


def port_owner(port: int) -> str | None:
    """"PID n (command)" of a process listening on ``port``, if /proc shows it."""
    inodes = _listeners(port)
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    return f"PID {pid} ({cmd.strip()[:120]})"
            except OSError:
                continue
    return None


def check_port(host: str, port: int, what: str = "port") -> None:
    """Refused unless ``host:port`` can be bound now (SO_REUSEADDR, as uvicorn binds)."""
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            raise Refused(f"cannot bind {host}:{port} ({what}): {e.strerror}") from None
        owner = port_owner(port)
        raise Refused(f"{what} {port} on {host} is already in use" + (f" by {owner}" if owner else "")
                      + f": stop that process or choose another {what}") from None
    finally:
        s.close()


def host_memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 0


def check_limits_fit_host(limits: dict, where: str) -> None:
    """Refused if per-sandbox ``memory_mb`` / ``cpus`` (config section ``where``) exceed this host's."""
    mem, cpus = host_memory_mb(), os.cpu_count() or 1
    if mem and float(limits.get("memory_mb") or 0) > mem:
        raise Refused(f"{where}.memory_mb {limits['memory_mb']} is above this host's memory ({mem} MB): lower it in "
                      "config/admin.yaml")
    if float(limits.get("cpus") or 0) > cpus:
        raise Refused(f"{where}.cpus {limits['cpus']} is above this host's {cpus} CPUs: lower it in config/admin.yaml")
