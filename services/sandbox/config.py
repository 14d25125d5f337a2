"""Configuration of the sandbox manager (config/admin.yaml, defaults in templates/admin.yaml)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from services.common.config import load_config
from services.common.paths import REPO_ROOT, TEMPLATES_DIR

from .errors import BadRequest
from .limits import Limits


def load(path: str | Path | None = None) -> dict[str, Any]:
    """config/admin.yaml (or ``path``) laid over the defaults in templates/admin.yaml."""
    cfg = _merge(load_config("admin", TEMPLATES_DIR / "admin.yaml"), load_config("admin", path))
    cfg.setdefault("auth", {})
    if os.environ.get("LTS_SANDBOX_KEY"):
        cfg["auth"]["key"] = os.environ["LTS_SANDBOX_KEY"]
    if not cfg["auth"].get("key"):
        raise ValueError("auth.key must be set in config/admin.yaml (or LTS_SANDBOX_KEY)")
    cfg["state_dir"] = str(resolve(cfg.get("state_dir", "state/sandboxes")))
    return cfg


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
