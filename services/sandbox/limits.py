"""Resource limits of one sandbox, and parsing of ROCK-style sizes ("8g", "512m")."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from .errors import BadRequest

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNIT_MB = {"": 1 / (1024 * 1024), "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}


def parse_size_mb(value: str | int | float | None) -> int | None:
    """'8g' -> 8192, '512m' -> 512, 100 -> 100 (numbers are MB). None stays None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadRequest(f"a size is a number of MB or a string like '512m', got {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value > 2**40:
            raise BadRequest(f"size {value!r} is not a finite number of MB")
        return int(value)
    m = _SIZE.match(value)
    if not m:
        raise BadRequest(f"cannot parse size {value!r} (expected e.g. '512m', '8g')")
    return max(1, int(float(m.group(1)) * _UNIT_MB[m.group(2).lower()]))


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 2048        # memory cgroup (OOM kill at the limit)
    cpus: float = 1.0            # CFS quota in cores
    pids: int = 256              # pids cgroup: processes + threads
    disk_mb: int = 1024          # size of the tmpfs holding the workspace's writes, /tmp and $HOME
    nofile: int = 1024           # RLIMIT_NOFILE
    file_size_mb: int = 1024     # RLIMIT_FSIZE (single file)
    cpu_time_s: int = 3600       # RLIMIT_CPU per process (backstop; wall-clock timeouts do the real work)
    address_space_mb: int = 16384  # RLIMIT_AS per process (backstop for memory without cgroups)

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise BadRequest(f"limit {f.name} must be a positive number, got {v!r}")

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None, base: "Limits | None" = None) -> "Limits":
        """Build limits from a mapping (unknown keys rejected), on top of ``base``."""
        merged = asdict(base or cls())
        for key, value in (data or {}).items():
            if key not in merged:
                raise BadRequest(f"unknown limit {key!r}; known: {', '.join(merged)}")
            if value is None:
                continue
            if key.endswith("_mb"):
                value = parse_size_mb(value)
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise BadRequest(f"limit {key} must be a finite number, got {value!r}")
            merged[key] = type(merged[key])(value) if not isinstance(merged[key], float) else float(value)
        return cls(**merged)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
