#!/usr/bin/env python3
"""In-sandbox TCP -> Unix-socket forwarder (stdlib only; copied into the sandbox as one file).

A sandbox has no network: only its own loopback. Agent harnesses speak HTTP over TCP, so this
listens on 127.0.0.1:PORT *inside the sandbox's network namespace* and forwards every connection
byte for byte to the ModelService's Unix socket, which is bind-mounted (read-only) into the
sandbox. With a command after ``--`` it runs that command and exits with its status (the
listener lives exactly as long as the agent); without one it serves until killed.

    python3 shim.py --listen 127.0.0.1:18990 --socket /run/lts-model/model.sock -- mini -y ...
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


def _handle(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError as e:
        msg = f"modelservice socket {path} unreachable: {e}\n".encode()
        client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                       b"Content-Length: " + str(len(msg)).encode() + b"\r\n\r\n" + msg)
        client.close()
        upstream.close()
        return
    t = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    t.start()
    _pump(client, upstream)
    t.join()
    client.close()
    upstream.close()


def serve(listener: socket.socket, path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_handle, args=(client, path), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", default="127.0.0.1:18990", help="HOST:PORT to listen on (inside the sandbox)")
    p.add_argument("--socket", required=True, help="the ModelService Unix socket")
    args = p.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host or "127.0.0.1", int(port)))
    listener.listen(64)
    t = threading.Thread(target=serve, args=(listener, args.socket), daemon=True)
    t.start()
    if not cmd:
        t.join()
        return 0
    try:
        return subprocess.call(cmd)
    finally:
        listener.close()


if __name__ == "__main__":
    sys.exit(main())
