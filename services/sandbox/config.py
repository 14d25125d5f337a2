"""Configuration of the sandbox manager (config/admin.yaml, defaults in templates/admin.yaml).

``AdminFile`` mirrors admin.yaml: an unknown key (a typo) or a wrong type is refused at start, naming the file
and the key (services/common/config_schema.py). ``None`` marks a key whose default belongs to the code that
reads it (the backend named in the comment); templates/admin.yaml writes the usual values."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from services.common.config import ConfigModel, check_config, read_config
from services.common.paths import REPO_ROOT, TEMPLATES_DIR
from services.common.service_configs import LimitsSection

from .errors import BadRequest
from .limits import Limits

Number = int | float
Paths = str | list[str] | None   # "auto" / ["auto"] / a list of host dirs


class Auth(ConfigModel):
    key: str | None = None           # required (here or LTS_SANDBOX_KEY)
    header: str = "X-Key"


class AdminSection(ConfigModel):
    """``admin:`` (``python -m services.sandbox admin``); the limits: admin.py."""

    host: str = "127.0.0.1"
    port: int = 18080
    log_file: str | None = None      # None: state/logs/sandbox-admin.log
    backend: str = "local"           # local | docker | rock | worker
    max_upload_mb: Number | None = None
    max_read_mb: Number | None = None
    default_timeout_s: Number | None = None
    max_tar_members: int | None = None
    max_tar_unpacked_mb: Number | None = None


class WorkerSection(ConfigModel):
    """``worker:`` (``python -m services.sandbox worker``, and where an admin with backend worker finds it)."""

    host: str = "127.0.0.1"
    port: int = 22555
    url: str | None = None           # None: http://host:port
    urls: list[str] | None = None    # several workers: backends/worker_pool.py
    health_interval_s: Number | None = None
    name: str = "local"              # several workers on one host need different names
    backend: str = "local"
    log_file: str | None = None      # None: state/logs/sandbox-worker.log


class WarmPool(ConfigModel):
    size: int | None = None
    max_age_s: Number | None = None


class Lifecycle(ConfigModel):
    """``lifecycle:`` (manager.py ``LifecycleConfig`` holds the defaults)."""

    lease_s: Number | None = None
    ttl_s: Number | None = None
    max_ttl_s: Number | None = None
    reaper_interval_s: Number | None = None
    max_sandboxes: int | None = None
    warm_pool: WarmPool | None = None


class LocalSection(ConfigModel):
    """``local:`` (local/backend.py ``LocalBackend.from_config``)."""

    sandbox_uid: int | None = None
    sandbox_gid: int | None = None
    runtime_paths: Paths = None
    venv_bin: str | None = None
    cgroups: bool | None = None
    shm_mb: int | None = None
    base_cache_mb: Number | None = None
    bind_sources: list[str] | None = None


class Mirror(ConfigModel):
    """``docker.mirror:`` (mirror.py ``Mirror.from_config``)."""

    dir: str | None = None
    index_url: str | None = None
    file_hosts: list[str] | None = None
    raw_hosts: list[str] | None = None
    raw_online: bool | None = None


class DockerSection(ConfigModel):
    """``docker:`` (backends/docker_backend.py ``DockerBackend.from_config``)."""

    base_url: str | None = None
    default_image: str | None = None
    user: str | None = None
    workdir: str | None = None
    bind_sources: list[str] | None = None
    runtime_paths: Paths = None
    mirror: Mirror | None = None


class RockSection(ConfigModel):
    """``rock:`` (backends/rock_backend.py ``RockBackend.from_config``)."""

    base_url: str | None = None
    cluster: str | None = None
    extra_headers: dict[str, str] | None = None
    default_image: str | None = None
    startup_timeout: Number | None = None


class AdminFile(ConfigModel):
    """admin.yaml: the sandbox manager's admin and worker."""

    auth: Auth = Auth()
    admin: AdminSection = AdminSection()
    worker: WorkerSection = WorkerSection()
    state_dir: str = "state/sandboxes"
    base_sources: list[str] | None = None     # None: DEFAULT_BASE_SOURCES
    lifecycle: Lifecycle | None = None
    default_limits: LimitsSection | None = None
    max_limits: LimitsSection | None = None
    images: dict[str, str | None] | None = None
    local: LocalSection | None = None
    docker: DockerSection | None = None
    rock: RockSection | None = None


def load(path: str | Path | None = None) -> dict[str, Any]:
    """config/admin.yaml (or ``path``) laid over the defaults in templates/admin.yaml, each file checked against
    ``AdminFile`` first (ConfigError naming the file and the key)."""
    cfg: dict[str, Any] = {}
    for name in (TEMPLATES_DIR / "admin.yaml", path):
        data, source = read_config("admin", name)
        check_config(data, AdminFile, source)
        cfg = _merge(cfg, data)
    cfg.setdefault("auth", {})
    if os.environ.get("LTS_SANDBOX_KEY"):
        cfg["auth"]["key"] = os.environ["LTS_SANDBOX_KEY"]
    if not cfg["auth"].get("key"):
        raise ValueError("auth.key must be set in config/admin.yaml (or LTS_SANDBOX_KEY)")
    cfg["state_dir"] = str(resolve(cfg.get("state_dir", "state/sandboxes")))
    return cfg


def settings(cfg: dict[str, Any]) -> AdminFile:
    """The loaded config (``load``) as its typed model: attribute access, the defaults filled in."""
    return check_config(cfg, AdminFile, "admin config")


def resolve(path: str | Path) -> Path:
    """Relative paths in the config are relative to the repository root."""
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


DEFAULT_BASE_SOURCES = ("sandbox-preparation", "datasets")


def base_sources(cfg: dict[str, Any]) -> list[str]:
    """Host directories under which ``base_dir`` / an absolute ``image`` may lie (real paths)."""
    value = cfg.get("base_sources")
    return [os.path.realpath(resolve(p)) for p in (DEFAULT_BASE_SOURCES if value is None else value)]


def default_limits(cfg: dict[str, Any]) -> Limits:
    return Limits.from_mapping(cfg.get("default_limits"))


def clamp_limits(cfg: dict[str, Any], requested: dict[str, Any]) -> dict[str, Any]:
    """Requested limits above ``max_limits`` are lowered to it."""
    out = dict(requested)
    for key, cap in (cfg.get("max_limits") or {}).items():
        value = out.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadRequest(f"limit {key} must be a number, got {value!r}")
        if float(value) > float(cap):
            out[key] = cap
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
