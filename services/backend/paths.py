"""Paths of the backend's config: ``$VARS`` and ``~`` expanded, relative ones under the repo root."""

from __future__ import annotations

import os
from pathlib import Path

from services.common.paths import REPO_ROOT


def repo_path(p: str | os.PathLike) -> Path:
    p = Path(os.path.expandvars(str(p))).expanduser()
    return p if p.is_absolute() else REPO_ROOT / p
