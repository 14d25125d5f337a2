"""`task.toml` schema: a small pydantic mirror of Harbor's ``TaskConfig`` (schema_version 1.4).

Field names and defaults follow Harbor (see ../shared/docs/sandboxes-and-tasks.md §1.2) so a task
written for Harbor loads here and vice versa. We do not depend on Harbor itself (it needs Python
3.12 and ~470 MB of dependencies); only the fields this project reads are typed strictly, the rest
are accepted as Harbor accepts them. Schema versions 1.0 (the published SWE-bench Verified tasks) to
1.4 load. Unknown keys are kept (each model's ``model_extra``, e.g. ``config.verifier.model_extra``)
and reported by :func:`unknown_keys` (``Task.warnings``, recorded in the preparation manifest) so a
typo such as ``timeout_secs`` does not go unnoticed.
"""

from __future__ import annotations

import math
import os
import re
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION = "1.4"
# [metadata.grading]: the hack flags a task may set a policy for (grading/hacks.py raises them), the policies
KINDS = ("hack:test-file", "hack:conftest", "hack:test-config", "hack:interpreter", "hack:shadow-module",
         "hack:compiled", "hack:git-internals", "hack:path-escape", "hack:reward-file", "hack:test-runner",
         "hack:outside-workspace")
POLICIES = ("zero", "flag")


class NetworkMode(str, Enum):
    PUBLIC = "public"
    NO_NETWORK = "no-network"
    ALLOWLIST = "allowlist"


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)   # unknown keys kept, reported


class Author(_Model):
    name: str
    email: str | None = None


class PackageInfo(_Model):
    """``[task]``: package identity, ``org/name``."""

    name: str
    version: str | None = None
    description: str = ""
    authors: list[Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _org_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*/[A-Za-z0-9_-][A-Za-z0-9._-]*", v) or ".." in v:
            raise ValueError(f"must be 'org/name' (letters, digits, '-', '_', '.'), got {v!r}")
        return v


class AgentConfig(_Model):
    timeout_sec: float | None = None  # Harbor: no limit by default
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)


class VerifierEnvironment(_Model):
    docker_image: str | None = None


class CollectConfig(_Model):
    path: str
    name: str | None = None


class VerifierConfig(_Model):
    timeout_sec: float = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    environment_mode: str = "shared"  # shared | separate
    environment: VerifierEnvironment | None = None
    collect: list[CollectConfig] = Field(default_factory=list)
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)

    @field_validator("timeout_sec")
    @classmethod
    def _positive(cls, v: float) -> float:
        if not v > 0:
            raise ValueError(f"must be > 0, got {v}")
        return v

    @field_validator("environment_mode")
    @classmethod
    def _mode(cls, v: str) -> str:
        if v not in ("shared", "separate"):
            raise ValueError(f"must be 'shared' or 'separate', got {v!r}")
        return v


class HealthcheckConfig(_Model):
    command: str
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


def _size_to_mb(size: str) -> int:
    s = size.strip().upper()
    units = {"G": 1024, "M": 1, "K": 1 / 1024}
    if not s or s[-1] not in units:
        raise ValueError(f"size must look like '4G' or '512M', got {size!r}")
    return int(float(s[:-1]) * units[s[-1]])


class EnvironmentConfig(_Model):
    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    os: str = "linux"
    cpus: int = 1
    memory_mb: int = 2048
    storage_mb: int = 10240
    gpus: int = 0
    gpu_types: list[str] | None = None
    tpu: Any = None
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    healthcheck: HealthcheckConfig | None = None
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)
    skills_dir: str | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)
    allow_internet: bool = True  # legacy
    memory: str | None = Field(default=None, exclude=True)  # legacy "4G"
    storage: str | None = Field(default=None, exclude=True)  # legacy "10G"

    @model_validator(mode="after")
    def _legacy_sizes(self) -> "EnvironmentConfig":
        if self.memory is not None:
            self.memory_mb, self.memory = _size_to_mb(self.memory), None
        if self.storage is not None:
            self.storage_mb, self.storage = _size_to_mb(self.storage), None
        if self.os not in ("linux", "windows"):
            raise ValueError(f"os must be 'linux' or 'windows', got {self.os!r}")
        return self


class SolutionConfig(_Model):
    env: dict[str, str] = Field(default_factory=dict)


class TaskConfig(_Model):
    schema_version: str = Field(default=SCHEMA_VERSION, alias="version")
    source: str | None = None
    multi_step_reward_strategy: str = "mean"
    artifacts: list[Any] = Field(default_factory=list)
    task: PackageInfo | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    steps: list[dict[str, Any]] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _version_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "schema_version" in data and "version" in data:
            data = dict(data)
            data.pop("version")
        return data


_ENV_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def resolve_env(env: dict[str, str], host_env: dict[str, str] | None = None) -> dict[str, str]:
    """Expand Harbor's ``${VAR}`` / ``${VAR:-default}`` templates from the host environment."""
    host = os.environ if host_env is None else host_env

    def sub(m: re.Match) -> str:
        name, default = m.group(1), m.group(2)
        val = host.get(name)
        if val in (None, "") and default is not None:
            return default
        return val or ""

    return {k: _ENV_TEMPLATE.sub(sub, str(v)) for k, v in env.items()}


def unknown_keys(data: dict[str, Any], model: type[BaseModel] = TaskConfig, prefix: str = "") -> list[str]:
    """Dotted names of keys in ``data`` that ``model`` does not define (typo detection)."""
    out: list[str] = []
    fields = model.model_fields
    names = set(fields) | {f.alias for f in fields.values() if f.alias}
    for key, value in data.items():
        if key not in names:
            out.append(prefix + key)
            continue
        field = fields.get(key) or next(f for f in fields.values() if f.alias == key)
        ann = field.annotation
        sub = getattr(ann, "__args__", None)
        candidates = [ann] + list(sub or [])
        for c in candidates:
            if isinstance(c, type) and issubclass(c, BaseModel) and isinstance(value, dict) and key != "metadata":
                out.extend(unknown_keys(value, c, f"{prefix}{key}."))
                break
    return out


def grading_policy(config_metadata: dict[str, Any] | None) -> tuple[tuple[float, float], dict[str, str]]:
    """(reward range, {flag: policy}) from ``[metadata.grading]`` of task.toml (the flags: grading/hacks.py)::

        [metadata.grading]
        reward_range = [0.0, 1.0]          # rewards outside are rejected (reward 0)
        hacks = { "hack:test-runner" = "flag" }   # "zero" (default: reward 0) or "flag" (recorded only)
    """
    g = (config_metadata or {}).get("grading") or {}
    if not isinstance(g, dict):
        raise ValueError(f"[metadata.grading] must be a table, got {g!r}")
    rng = g.get("reward_range", (0.0, 1.0))
    try:
        lo, hi = (float(x) for x in rng)
    except (TypeError, ValueError):
        raise ValueError(f"reward_range must be [low, high], got {rng!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError(f"reward_range must be finite with low <= high, got {rng!r}")
    policies = {str(k): str(v) for k, v in (g.get("hacks") or {}).items()}
    bad = {k: v for k, v in policies.items() if v not in POLICIES or k not in KINDS}
    if bad:
        raise ValueError(f"[metadata.grading] hacks: unknown flag or policy {bad}; flags {KINDS}, policies {POLICIES}")
    return (lo, hi), policies
