"""python -m services.sandbox admin|worker — see docs/sandbox.md."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from services.common.config import ConfigError
from services.common.logs import setup_logging
from services.common.preflight import Refused, check_limits_fit_host, check_port
from services.common.server import SignalServer

from . import config as sbconfig
from .admin import build_app
from .backends import make_backend
from .local.namespace import ensure_private_namespace
from .manager import LifecycleConfig, SandboxManager
from .store import Store
from .worker import build_worker_app

DESCRIPTION = """Sandbox manager.
  admin   HTTP API (ROCK sandbox API subset), lifecycle, leases, reaper; runs sandboxes itself
          (backend local|docker|rock) or through a separate worker (backend: worker)
  worker  runs sandboxes on this host for an admin (internal HTTP API)
Both bind 127.0.0.1 by default, need the key from the config, log to state/logs/, and remove
every sandbox they hold on SIGINT/SIGTERM."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m services.sandbox", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", choices=["admin", "worker"])
    p.add_argument("--config", default=None, help="YAML config (default: config/admin.yaml, else templates/admin.yaml)")
    p.add_argument("--host", default=None, help="bind address (default from config: 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default from config: admin 18080, worker 22555)")
    p.add_argument("--backend", default=None, help="local | docker | rock | worker (admin only; overrides config)")
    p.add_argument("--log-file", default=None, help="log file (default from config, under state/logs/)")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def running_worker(conf: sbconfig.AdminFile, backend: str = "local") -> str | None:
    """The URL of a sandbox worker running ``backend`` (local, or docker for tasks whose repo lives in their image)
    that already answers at ``worker.url`` and takes our key (`serve.sh worker` started first, as the seed's two
    terminals do), else None."""
    w = conf.worker
    url = str(w.url or f"http://{w.host}:{w.port}").rstrip("/")
    try:
        health = httpx.get(url + "/health", timeout=2)
        if health.status_code != 200 or (health.json().get("result") or {}).get("backend") != backend:
            return None
        key = httpx.get(url + "/worker/v1/list", headers={conf.auth.header: conf.auth.key or ""}, timeout=5)
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return url if key.status_code == 200 else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = sbconfig.load(args.config)
    except ConfigError as e:   # a typo in admin.yaml: refused before anything starts
        print(f"error: {e}", file=sys.stderr)
        return 2
    conf = sbconfig.settings(cfg)
    section = conf.admin if args.role == "admin" else conf.worker
    backend_name = args.backend or section.backend
    own_backend = backend_name
    worker_url = (running_worker(conf, backend_name) if args.role == "admin" and backend_name in ("local", "docker")
                  else None)
    if worker_url:   # its sandboxes share our state dir / worker name: run them there instead of a second backend
        backend_name = "worker"
        cfg["worker"] = {**(cfg.get("worker") or {}), "url": worker_url}
    if backend_name == "local":
        # Must happen before any thread exists: re-executes this command in a private mount ns.
        ensure_private_namespace()
    log_file = args.log_file or section.log_file or f"state/logs/sandbox-{args.role}.log"
    log = setup_logging(f"sandbox-{args.role}", sbconfig.resolve(log_file), args.log_level)
    if worker_url:
        log.info("a sandbox worker (backend %s) answers on %s: sandboxes run there (as admin.backend: worker)",
                 own_backend, worker_url)
    host = args.host or section.host
    port = args.port or section.port
    try:   # a busy port is refused before the backend starts, naming the process on it
        check_port(host, port, f"sandbox {args.role} port")
        if args.role == "admin" and backend_name == "local":   # sandboxes share this host
            check_limits_fit_host(dataclasses.asdict(sbconfig.default_limits(cfg)), "default_limits")
        if backend_name == "docker":   # a Docker engine answers, before anything starts
            from .backends.docker_backend import DockerBackend  # noqa: PLC0415 (the docker package: docker only)

            DockerBackend.check_engine(cfg)
    except Refused as e:
        log.error("refusing to start: %s", e.message)
        print(f"error: {e.message}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(args.role, cfg, backend_name, host, port))
    except Exception as e:
        log.exception("sandbox %s failed: %s", args.role, e)
        return 1
    return 0


async def serve(role: str, cfg: dict[str, Any], backend_name: str, host: str, port: int) -> None:
    log = logging.getLogger(f"sandbox-{role}")
    conf = sbconfig.settings(cfg)
    cfg = dict(cfg, worker_name=conf.worker.name)   # the backends read the rest of the mapping
    backend = make_backend(backend_name, cfg)
    if role == "admin":
        store = Store(Path(conf.state_dir) / "admin.db")
        lifecycle = conf.lifecycle.model_dump(exclude_none=True) if conf.lifecycle else None
        service = SandboxManager(backend, store, LifecycleConfig.from_mapping(lifecycle),
                                 sbconfig.default_limits(cfg), images=conf.images or {},
                                 base_sources=sbconfig.base_sources(cfg))
        app = build_app(service, cfg)
        start, stop = service.start, service.shutdown
    else:
        app = build_worker_app(backend, cfg)
        start, stop = backend.start, backend.shutdown

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        # Runs inside uvicorn's startup/shutdown, which handles SIGINT/SIGTERM (and then
        # re-raises the signal, so cleanup must happen here, not after serve()).
        await start()
        log.info("sandbox %s (backend %s) listening on http://%s:%d", role, backend_name, host, port)
        try:
            yield
        finally:
            log.info("sandbox %s stopping: removing its sandboxes", role)
            await stop()
            if role == "admin":
                store.close()
            log.info("sandbox %s stopped", role)

    app.router.lifespan_context = lifespan
    server = SignalServer(uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False,
                                    lifespan="on", timeout_graceful_shutdown=5))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.request_exit)
    await server.serve()
    if not server.started:
        raise RuntimeError(f"sandbox {role} did not start (see the log above)")


if __name__ == "__main__":
    sys.exit(main())
