"""The verifier's only network: a package-registry and upstream-file mirror the manager runs.

A sandbox created with ``network="registry"`` (docker backend) has **no network interface but
loopback**. Its host directory ``<state>/net/<sandbox>/`` is bound read-only at ``/.lts-net``;
it holds a Unix socket served by this mirror, the mirror's CA certificate and a tiny forwarder
(stdlib Python, run by the container's PID 1 loop) that listens on ``127.0.0.1:3128`` inside the
container and relays each connection to the socket. The container's environment points the
tools at it (:data:`SANDBOX_ENV`):

* ``UV_DEFAULT_INDEX`` / ``UV_INDEX_URL`` / ``PIP_INDEX_URL`` = ``http://127.0.0.1:3128/simple``:
  a PEP 503 index proxied from the host's upstream index (``index_url``, PyPI by default; the host
  can reach it) with every file link rewritten to ``/files/<host>/<path>``; pages and files are
  cached under ``<dir>/pypi`` (files never change; a cached page is served without asking
  upstream), so a second ``uv run parser.py`` resolves offline. Only the index host and
  ``file_hosts`` are fetched from: the mirror is allow-listed to the registries.
* ``HTTPS_PROXY`` = ``http://127.0.0.1:3128``: ``CONNECT`` is accepted for ``raw_hosts`` only
  (``raw.githubusercontent.com``); the mirror terminates TLS there with a certificate of its own
  per-host CA (``<dir>/ca/ca.pem``, trusted through ``REQUESTS_CA_BUNDLE`` / ``SSL_CERT_FILE``) and
  serves ``GET /<owner>/<repo>/<commit>/<path>`` from ``<dir>/raw/<owner>/<repo>/<commit>/<path>``:
  files recorded when the host is online (``raw_online``: fetched upstream on a miss, then
  stored), or exported from the task image's own full history before its scrub
  (``services.sandbox.docker_images``) on offline hosts.

Every request the mirror could not satisfy (a file not in the store, the registry down) is
appended to ``/.lts-net/misses.log`` (one JSON line each, written by the host: the sandbox cannot
write there). The verifier reads it after test.sh: a grading run that could not reach what it
needed is an infrastructure failure, never a reward of 0 (``services.tasks.grading.verifier``). A request
for any other host is refused (403) and logged in ``denied.log``.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import posixpath
import re
import shutil
import ssl
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from services.common.paths import STATE_DIR

log = logging.getLogger(__name__)

PORT = 3128
MOUNT = "/.lts-net"
SANDBOX_ENV = {
    "UV_DEFAULT_INDEX": f"http://127.0.0.1:{PORT}/simple", "UV_INDEX_URL": f"http://127.0.0.1:{PORT}/simple",
    "PIP_INDEX_URL": f"http://127.0.0.1:{PORT}/simple", "PIP_TRUSTED_HOST": "127.0.0.1",
    "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1",
    "HTTPS_PROXY": f"http://127.0.0.1:{PORT}", "https_proxy": f"http://127.0.0.1:{PORT}",
    "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    "REQUESTS_CA_BUNDLE": f"{MOUNT}/ca.pem", "SSL_CERT_FILE": f"{MOUNT}/ca.pem", "CURL_CA_BUNDLE": f"{MOUNT}/ca.pem",
}
# PID 1 of a registry sandbox: keeps the forwarder running (``kill -9 -1`` after a timeout kills it too)
PID1 = ("while :; do for p in python3 /opt/miniconda3/bin/python3 /usr/bin/python3 /usr/local/bin/python3; do "
        f"if command -v $p >/dev/null 2>&1; then $p {MOUNT}/forward.py {PORT} 2>/dev/null; break; fi; done; "
        "sleep 1; done")

FORWARDER = '''\
import socket, sys, threading
SOCK = "%s/mirror.sock"
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def handle(c):
    u = socket.socket(socket.AF_UNIX)
    try:
        u.connect(SOCK)
    except OSError:
        c.close()
        return
    t = threading.Thread(target=pipe, args=(u, c), daemon=True)
    t.start()
    pipe(c, u)
    t.join()
    c.close()
    u.close()
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1])))
srv.listen(128)
while True:
    conn, _ = srv.accept()
    threading.Thread(target=handle, args=(conn,), daemon=True).start()
''' % MOUNT

def default_dir() -> Path:
    """The mirror's directory: ``$LTS_MIRROR_DIR``, else ``state/mirror`` (config ``docker.mirror.dir``
    overrides it for the manager; task preparation writes the raw store under the same default)."""
    return Path(os.environ.get("LTS_MIRROR_DIR") or STATE_DIR / "mirror")


_SAFE = re.compile(r"^[A-Za-z0-9._+~@=-]+$")


def safe_relpath(path: str) -> str | None:
    """``a/b/c`` with no empty, dot or odd component, else None."""
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if not parts or any(p in ("", ".", "..") or not _SAFE.match(p) for p in parts):
        return None
    return "/".join(parts)


class CA:
    """A per-host certificate authority (made once under ``<dir>/ca``) and leaf certs per host."""

    def __init__(self, directory: Path):
        self.dir = directory
        self._ctx: dict[str, ssl.SSLContext] = {}

    @property
    def pem(self) -> Path:
        return self.dir / "ca.pem"

    def ensure(self) -> None:
        if self.pem.exists() and (self.dir / "ca.key").exists():
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"lts sandbox mirror CA {os.uname().nodename}")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=3650))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False, data_encipherment=False,
                                             key_agreement=False, encipher_only=False, decipher_only=False),
                               critical=True)
                .sign(key, hashes.SHA256()))
        tmp = self.dir / f"ca.key.tmp{os.getpid()}"
        tmp.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
        tmp.chmod(0o600)
        tmp.replace(self.dir / "ca.key")
        self.pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def context(self, host: str) -> ssl.SSLContext:
        if host in self._ctx:
            return self._ctx[host]
        self.ensure()
        ca_key = serialization.load_pem_private_key((self.dir / "ca.key").read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate(self.pem.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
                .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=365))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        leaf = self.dir / "leaf" / f"{host}.pem"
        leaf.parent.mkdir(parents=True, exist_ok=True)
        leaf.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        leaf.chmod(0o600)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(leaf))
        self._ctx[host] = ctx
        return ctx


UPSTREAM_CONNECTIONS = 8   # concurrent connections to the registry / raw hosts (see Mirror.http)


class Mirror:
    """See the module docstring. One instance per manager; one Unix-socket server per sandbox."""

    def __init__(self, directory: str | Path, index_url: str = "https://pypi.org/simple",
                 file_hosts: list[str] | None = None, raw_hosts: list[str] | None = None, raw_online: bool = True,
                 timeout_s: float = 60):
        self.dir = Path(directory)
        self.index_url = index_url.rstrip("/")
        self.index_host = urlsplit(self.index_url).hostname or ""
        self.file_hosts = set(file_hosts or ["files.pythonhosted.org"]) | {self.index_host}
        self.raw_hosts = set(raw_hosts or ["raw.githubusercontent.com"])
        self.raw_online = raw_online
        self.ca = CA(self.dir / "ca")
        self.timeout_s = timeout_s
        self.servers: dict[str, asyncio.AbstractServer] = {}
        self._http: httpx.AsyncClient | None = None

    @classmethod
    def from_config(cls, cfg: dict[str, Any], default_dir: Path) -> "Mirror":
        return cls(cfg.get("dir") or default_dir, cfg.get("index_url") or "https://pypi.org/simple",
                   cfg.get("file_hosts"), cfg.get("raw_hosts"), bool(cfg.get("raw_online", True)))

    @property
    def raw_dir(self) -> Path:
        return self.dir / "raw"

    def http(self) -> httpx.AsyncClient:
        """One client for every upstream fetch, at most UPSTREAM_CONNECTIONS connections at once: uv in a few
        verifier sandboxes asks for ~60 wheels together, and 60 new TLS connections at once time out
        connecting on a NATed host (11 of 60 measured here; 0 of 60 through 8); the rest wait for a connection
        (no pool timeout: the request's own read timeout still holds)."""
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s, connect=10, pool=None),
                                           limits=httpx.Limits(max_connections=UPSTREAM_CONNECTIONS,
                                                               max_keepalive_connections=UPSTREAM_CONNECTIONS),
                                           follow_redirects=True)
        return self._http

    # --- sessions ---------------------------------------------------------------------------------

    async def open(self, sandbox_id: str, net_dir: Path) -> None:
        """Serve ``net_dir/mirror.sock`` for one sandbox and write what its container needs there."""
        await asyncio.to_thread(self.ca.ensure)
        net_dir.mkdir(parents=True, exist_ok=True)
        net_dir.chmod(0o755)
        shutil.copyfile(self.ca.pem, net_dir / "ca.pem")
        (net_dir / "forward.py").write_text(FORWARDER)
        sock = net_dir / "mirror.sock"
        sock.unlink(missing_ok=True)
        # a socket path is at most 107 bytes (sun_path): a deep state dir is reached through an O_PATH
        # descriptor of net_dir (/proc/self/fd/N/mirror.sock creates the socket in net_dir itself)
        fd = os.open(net_dir, os.O_PATH | os.O_DIRECTORY) if len(os.fsencode(str(sock))) > 100 else None
        try:
            path = str(sock) if fd is None else f"/proc/self/fd/{fd}/mirror.sock"
            srv = await asyncio.start_unix_server(lambda r, w: self._handle(r, w, net_dir), path=path)
        finally:
            if fd is not None:
                os.close(fd)
        sock.chmod(0o666)
        self.servers[sandbox_id] = srv

    async def close(self, sandbox_id: str, net_dir: Path | None = None) -> None:
        srv = self.servers.pop(sandbox_id, None)
        if srv is not None:
            srv.close()
        if net_dir is not None:
            shutil.rmtree(net_dir, ignore_errors=True)

    async def aclose(self) -> None:
        for sid in list(self.servers):
            await self.close(sid)
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # --- HTTP -------------------------------------------------------------------------------------

    @staticmethod
    def _note(net_dir: Path, name: str, **entry: Any) -> None:
        with open(net_dir / name, "a") as f:
            f.write(json.dumps({"t": round(time.time(), 3), **entry}) + "\n")

    @staticmethod
    async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]] | None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3:
            return None
        headers = {}
        for line in lines[1:]:
            k, sep, v = line.partition(":")
            if sep:
                headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0") or 0)
        if n:
            await reader.readexactly(min(n, 1 << 20))
        return parts[0].upper(), parts[1], headers

    @staticmethod
    async def _respond(writer: asyncio.StreamWriter, status: int, body: bytes = b"", ctype: str = "text/plain",
                       head_only: bool = False) -> None:
        reason = {200: "OK", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
                  502: "Bad Gateway"}.get(status, "Error")
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                     "Connection: close\r\n\r\n".encode() + (b"" if head_only else body))
        await writer.drain()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, net_dir: Path) -> None:
        try:
            req = await self._read_head(reader)
            if req is None:
                return
            method, target, headers = req
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                if host not in self.raw_hosts or port != "443":
                    self._note(net_dir, "denied.log", connect=target)
                    await self._respond(writer, 403, b"the verifier's network reaches the mirror only\n")
                    return
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await writer.start_tls(self.ca.context(host))
                inner = await self._read_head(reader)
                if inner is None:
                    return
                method, target, headers = inner
                status, body, ctype = await self._raw(host, method, target, net_dir)
            elif target.startswith("http://") or target.startswith("https://"):
                self._note(net_dir, "denied.log", url=target)
                status, body, ctype = 403, b"the verifier's network reaches the mirror only\n", "text/plain"
            elif method not in ("GET", "HEAD"):
                status, body, ctype = 405, b"", "text/plain"
            else:
                status, body, ctype = await self._registry(target, net_dir)
            await self._respond(writer, status, body, ctype, head_only=method == "HEAD")
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError) as e:
            log.debug("mirror connection ended: %s", e)
        except Exception:  # noqa: BLE001 - one bad request never stops the mirror
            log.exception("mirror request failed")
        finally:
            try:
                writer.close()
            except Exception:  # noqa: BLE001
                pass

    async def _fetch(self, url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, str]:
        """GET ``url`` upstream; a connection that could not be opened is tried twice more (1 s, 3 s later)
        before the miss is reported (and the verifier's run becomes an infrastructure failure)."""
        for wait in (1, 3, None):
            try:
                r = await self.http().get(url, headers=headers or {})
                break
            except (httpx.ConnectTimeout, httpx.ConnectError):
                if wait is None:
                    raise
                await asyncio.sleep(wait)
        return r.status_code, r.content, r.headers.get("content-type", "application/octet-stream")

    async def _registry(self, target: str, net_dir: Path) -> tuple[int, bytes, str]:
        path = urlsplit(target).path
        if path.startswith("/simple"):
            rel = safe_relpath(path[len("/simple"):] or "index") if path.strip("/") != "simple" else "index"
            if rel is None:
                return 404, b"bad path\n", "text/plain"
            cached = self.dir / "pypi" / "pages" / rel / "index.html"
            if cached.is_file():
                return 200, cached.read_bytes(), "text/html"
            url = f"{self.index_url}/{rel}/" if rel != "index" else f"{self.index_url}/"
            try:
                status, body, _ = await self._fetch(url, {"Accept": "text/html"})
            except httpx.HTTPError as e:
                self._note(net_dir, "misses.log", url=url, why=f"registry unreachable: {type(e).__name__}: {e}")
                return 502, b"registry unreachable\n", "text/plain"
            if status == 404:
                return 404, b"no such project\n", "text/plain"
            if status != 200:
                self._note(net_dir, "misses.log", url=url, why=f"registry answered {status}")
                return 502, b"registry error\n", "text/plain"
            page = self._rewrite(body.decode("utf-8", "replace")).encode()
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(page)
            tmp.replace(cached)
            return 200, page, "text/html"
        if path.startswith("/files/"):
            host, _, rest = path[len("/files/"):].partition("/")
            rel = safe_relpath(rest)
            if host not in self.file_hosts or rel is None:
                self._note(net_dir, "denied.log", url=path)
                return 403, b"not an allowed registry host\n", "text/plain"
            cached = self.dir / "pypi" / "files" / host / rel
            if cached.is_file():
                return 200, cached.read_bytes(), "application/octet-stream"
            url = f"https://{host}/{rel}"
            try:
                status, body, _ = await self._fetch(url)
            except httpx.HTTPError as e:
                self._note(net_dir, "misses.log", url=url, why=f"registry unreachable: {type(e).__name__}: {e}")
                return 502, b"registry unreachable\n", "text/plain"
            if status != 200:
                self._note(net_dir, "misses.log", url=url, why=f"registry answered {status}")
                return 502 if status >= 500 else 404, b"registry error\n", "text/plain"
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
            tmp.write_bytes(body)
            tmp.replace(cached)
            return 200, body, "application/octet-stream"
        return 404, b"the mirror serves /simple/ and /files/ only\n", "text/plain"

    def _rewrite(self, page: str) -> str:
        """Absolute links to an allowed file host become ``/files/<host>/<path>`` (relative to us)."""

        def sub(m: re.Match) -> str:
            host = m.group(2)
            return f'{m.group(1)}/files/{host}/' if host in self.file_hosts else m.group(0)
        return re.sub(r'(href=["\'])https?://([^/"\']+)/', sub, page)

    async def _raw(self, host: str, method: str, target: str, net_dir: Path) -> tuple[int, bytes, str]:
        if method not in ("GET", "HEAD"):
            return 405, b"", "text/plain"
        rel = safe_relpath(urlsplit(target).path)
        if rel is None or rel.count("/") < 3:
            return 404, b"bad path\n", "text/plain"
        stored = self.raw_dir / rel
        if stored.is_file():
            return 200, stored.read_bytes(), "text/plain; charset=utf-8"
        url = f"https://{host}/{rel}"
        why = "not in the mirror's store (recorded online or exported from the task image before its scrub)"
        if self.raw_online:
            try:
                status, body, _ = await self._fetch(url)
                if status == 200:
                    stored.parent.mkdir(parents=True, exist_ok=True)
                    stored.write_bytes(body)
                    return 200, body, "text/plain; charset=utf-8"
                why += f"; upstream answered {status}"
            except httpx.HTTPError as e:
                why += f"; upstream unreachable ({type(e).__name__})"
        self._note(net_dir, "misses.log", url=url, why=why)
        return 404, b"404: Not Found", "text/plain"


def store_raw(raw_dir: Path, repo: str, commit: str, files: dict[str, bytes]) -> list[str]:
    """Put upstream files (``{path: bytes}`` of ``repo`` at ``commit``) in the mirror's raw store."""
    out = []
    for path, data in files.items():
        rel = safe_relpath(posixpath.join(repo, commit, path))
        if rel is None:
            continue
        dest = raw_dir / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        out.append(rel)
    return out
