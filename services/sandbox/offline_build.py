"""Opt-in offline builds of a task's ``environment/Dockerfile`` (docs/tasks.md "Offline builds").

Harbor builds a task's Dockerfile with the host's network; the published SWE-bench Verified
tasks need it for exactly one line, the uv installer::

    RUN curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh

On a host without that network (``LTS_OFFLINE_BUILD=1`` or ``prepare_sandbox.py --offline-build``)
the build context is copied and that line, and only that line, is replaced by an install of the
same uv version from the ``uv`` wheel on PyPI, downloaded on the host (pip) and copied into the
context: the binaries land where the installer puts them (``$HOME/.local/bin/uv``, ``uvx`` and
the ``env`` file). The substitution is recorded (image label ``lts.offline_build``, copied into the
preparation manifest) with the original Dockerfile's sha256. Any other instruction that needs the
network is refused before building, with an error naming the Dockerfile line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from services.common.hashing import sha256_file

ENV_FLAG = "LTS_OFFLINE_BUILD"
LABEL = "lts.offline_build"
UV_LINE = re.compile(r"^\s*RUN\s+curl\s+-LsSf\s+https://astral\.sh/uv/(?P<version>\d+(?:\.\d+)*)/install\.sh\s*\|\s*sh\s*$")
# instructions that reach the network (checked after the substitution; offline builds refuse them)
NETWORK = re.compile(r"\b(curl|wget|apt-get|apt|apk|yum|dnf|git\s+clone|git\s+fetch|npm|conda\s+(install|create|env)|"
                     r"mamba|uv\s+(pip|add|sync|tool|python)|pip3?\s+install(?![^&;|]*--no-index)|"
                     r"python3?\s+-m\s+pip\s+install(?![^&;|]*--no-index))\b")
ADD_URL = re.compile(r"^\s*ADD\s+(--\S+\s+)*https?://", re.IGNORECASE)
WHEEL_DIR = ".lts-offline"


class OfflineBuildError(RuntimeError):
    """The Dockerfile needs the network for something the offline substitution does not cover."""


def enabled(explicit: bool | None = None) -> bool:
    if explicit is not None:
        return explicit
    return os.environ.get(ENV_FLAG, "").lower() in ("1", "true", "yes")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Dockerfile instructions with continuation lines joined: (first line number, text)."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for i, line in enumerate(text.splitlines(), 1):
        if not buf:
            start = i
            if not line.strip() or line.lstrip().startswith("#"):
                continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def uv_wheel(version: str, cache: Path) -> Path:
    """The ``uv==version`` wheel for linux x86_64 (pip download on the host, cached)."""
    dest = cache / f"uv-{version}"
    found = sorted(dest.glob(f"uv-{version}-*.whl")) if dest.is_dir() else []
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                        "--only-binary", ":all:", "--platform", "manylinux_2_17_x86_64", "--python-version", "3.11",
                        "-d", str(dest), f"uv=={version}"], capture_output=True, text=True)
    found = sorted(dest.glob(f"uv-{version}-*.whl"))
    if r.returncode != 0 or not found:
        raise OfflineBuildError(f"offline build: pip download uv=={version} failed (the host needs a package "
                                f"index for the uv wheel):\n{r.stderr[-1500:]}")
    return found[0]


def _replacement(version: str, wheel: str) -> str:
    data = f"/tmp/uvw/uv-{version}.data/scripts"
    return (f"COPY {WHEEL_DIR}/{wheel} /tmp/{wheel}\n"
            f"RUN python3 -m zipfile -e /tmp/{wheel} /tmp/uvw 2>/dev/null \\\n"
            f"    || /opt/miniconda3/bin/python -m zipfile -e /tmp/{wheel} /tmp/uvw; \\\n"
            f"    mkdir -p \"$HOME/.local/bin\" && install -m 755 {data}/uv {data}/uvx \"$HOME/.local/bin/\" \\\n"
            f"    && printf 'export PATH=\"$HOME/.local/bin:$PATH\"\\n' > \"$HOME/.local/bin/env\" \\\n"
            f"    && rm -rf /tmp/uvw /tmp/{wheel}")


def offline_context(env_dir: Path, work: Path, cache: Path, dockerfile: str = "Dockerfile") -> dict[str, Any]:
    """Copy the build context ``env_dir`` to ``work`` with the uv installer line substituted.
    Returns the record (stored as the image label / in the manifest). Raises
    :class:`OfflineBuildError` naming the line when another instruction needs the network."""
    src = env_dir / dockerfile
    original = src.read_bytes()
    text = original.decode()
    record: dict[str, Any] = {"dockerfile": dockerfile, "original_sha256": hashlib.sha256(original).hexdigest(),
                              "substitutions": []}
    lines = text.splitlines()
    out: list[str] = []
    for no, line in enumerate(lines, 1):
        m = UV_LINE.match(line)
        if not m:
            out.append(line)
            continue
        wheel = uv_wheel(m.group("version"), cache)
        record["substitutions"].append({"line": no, "original": line.strip(), "uv_version": m.group("version"),
                                        "wheel": wheel.name,
                                        "wheel_sha256": sha256_file(wheel)})
        out.append(_replacement(m.group("version"), wheel.name))
    new_text = "\n".join(out) + "\n"
    subst_lines = {s["line"] for s in record["substitutions"]}
    for no, instr in _logical_lines(text):
        if no in subst_lines:
            continue
        cmd = instr.strip()
        if ADD_URL.match(cmd) or (cmd.upper().startswith("RUN") and NETWORK.search(cmd[3:])):
            raise OfflineBuildError(f"{src}:{no}: `{cmd[:200]}` needs the network, and this offline build "
                                    f"substitutes only the uv installer line ({UV_LINE.pattern}); build the image "
                                    "on a host with network, or provide it ([environment].docker_image)")
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(env_dir, work, symlinks=True)
    (work / WHEEL_DIR).mkdir(exist_ok=True)
    for s in record["substitutions"]:
        shutil.copyfile(uv_wheel(s["uv_version"], cache), work / WHEEL_DIR / s["wheel"])
    (work / dockerfile).write_text(new_text)
    record["dockerfile_sha256"] = hashlib.sha256(new_text.encode()).hexdigest()
    return record


def label_of(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"))
