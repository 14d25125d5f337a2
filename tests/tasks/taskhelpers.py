"""Helpers for the task-library tests: tiny git repos and task copies built in tmp dirs."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MICRO = REPO / "datasets" / "micro"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1"}


def run(coro):
    return asyncio.run(coro)


def git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=repo, capture_output=True, text=True,
                       env={**os.environ, **GIT_ENV}, check=True)
    return r.stdout.strip()


def commit_all(repo: Path, msg: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", msg)
    return git(repo, "rev-parse", "HEAD")


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def copy_micro(tmp_path: Path, name: str = "clamp") -> Path:
    """A fresh copy of one micro task that a test may break."""
    dest = tmp_path / name
    shutil.copytree(MICRO / name, dest)
    return dest
