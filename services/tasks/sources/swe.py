"""Writing SWE-style Harbor task directories (used by the micro set, the synthesiser and the
SWE-bench / R2E-Gym adapters).

Layout written by :func:`write_swe_task`::

    instruction.md
    task.toml                    schema 1.4, [metadata] tags include "swe-bench"
    environment/Dockerfile       docker backend: COPY repo/ /workspace (repo = the scrubbed base)
    environment/repo/            workspace at the base commit (inline snapshot), or
    environment/repo.json        {"git": <local checkout>, "commit": <base sha>}
    tests/test.sh                runs tests/grade.py (a verbatim copy of services/tasks/grading/grade.py)
    tests/grade.py
    tests/config.json            FAIL_TO_PASS, PASS_TO_PASS, test_cmd, test_files, instance record
    tests/files/<path>           the test files as the verifier runs them (overwrite the workspace's)
    solution/solve.sh            applies solution/patch.diff
    solution/patch.diff          the gold patch (never shown to the agent)
"""

from __future__ import annotations

import difflib
import json
import shutil
from pathlib import Path
from typing import Any

from ..grading import grade
from ..task_toml import SCHEMA_VERSION

GRADER_SOURCE = Path(grade.__file__)   # copied verbatim into each task as tests/grade.py

TEST_SH = """#!/bin/bash
# Verifier of an SWE-style task: restore the task's test files over /workspace, run them, and
# grade FAIL_TO_PASS / PASS_TO_PASS (reward 1 only if all pass). Writes /logs/verifier/reward.txt
# and report.json. Needs a Python with pytest: $LTS_PYTHON, else python3 on PATH.
mkdir -p /logs/verifier
cd /workspace
"${LTS_PYTHON:-python3}" /tests/grade.py --config /tests/config.json --files /tests/files --workspace /workspace --out /logs/verifier
"""  # noqa: E501 (written into every task's tests/test.sh: changing it changes the tasks)

SOLVE_SH = """#!/bin/bash
# Reference solution (oracle): apply the gold patch to /workspace.
set -eu
cd /workspace
git apply --whitespace=nowarn /solution/patch.diff || patch -p1 --forward --fuzz=5 < /solution/patch.diff
"""

DOCKERFILE = """# Image for the docker backend. prepare_sandbox.py places the scrubbed workspace base (one commit,
# no history) in repo/ of the build context; the verifier needs python3 with pytest and git.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git patch && rm -rf /var/lib/apt/lists/* \\
    && pip install --no-cache-dir pytest==9.2.0
RUN mkdir -p /logs/verifier /logs/agent
WORKDIR /workspace
COPY repo/ /workspace/
"""


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dump_toml(data: dict[str, Any]) -> str:
    """Minimal TOML writer for task.toml (scalars, lists of scalars, nested tables)."""
    lines: list[str] = []

    def table(d: dict[str, Any], prefix: str) -> None:
        scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in d.items() if isinstance(v, dict)}
        if prefix and (scalars or not tables):
            lines.append(f"\n[{prefix}]")
        for k, v in scalars.items():
            if v is not None:
                lines.append(f"{k} = {toml_value(v)}")
        for k, v in tables.items():
            table(v, f"{prefix}.{k}" if prefix else k)

    table(data, "")
    return "\n".join(lines).lstrip("\n") + "\n"


def task_toml(name: str, *, description: str = "", source: str | None = None, tags: list[str] = (),
              difficulty: str = "easy", metadata: dict[str, Any] | None = None, agent_timeout: float = 600,
              verifier_timeout: float = 120, memory_mb: int = 2048, storage_mb: int = 2048) -> str:
    data = {
        "schema_version": SCHEMA_VERSION,
        "source": source,
        "task": {"name": name, "description": description},
        "metadata": {"difficulty": difficulty, "category": "debugging",
                     "tags": ["debugging", "swe-bench", *tags], **(metadata or {})},
        "agent": {"timeout_sec": float(agent_timeout)},
        "verifier": {"timeout_sec": float(verifier_timeout)},
        "environment": {"build_timeout_sec": 600.0, "cpus": 1, "memory_mb": memory_mb,
                        "storage_mb": storage_mb, "network_mode": "no-network", "workdir": "/workspace"},
    }
    return dump_toml(data)


def write_swe_task(dest: Path, *, name: str, instruction: str, gold_patch: str,
                   test_files: dict[str, str], fail_to_pass: list[str], pass_to_pass: list[str],
                   test_cmd: list[str], repo_dir: Path | None = None, repo_git: tuple[Path, str] | None = None,
                   test_env: dict[str, str] | None = None, remove_files: list[str] = (),
                   record: dict[str, Any] | None = None, description: str = "", source: str | None = None,
                   tags: list[str] = (), metadata: dict[str, Any] | None = None, difficulty: str = "easy",
                   verifier_timeout: float = 120, test_timeout: float | None = None,
                   extra_solution_files: dict[str, str] | None = None) -> Path:
    """Write one SWE-style Harbor task (see module docstring); replaces ``dest``."""
    if (repo_dir is None) == (repo_git is None):
        raise ValueError("give exactly one of repo_dir (inline snapshot) or repo_git (checkout, commit)")
    if not fail_to_pass:
        raise ValueError(f"{name}: FAIL_TO_PASS is empty")
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "environment").mkdir(parents=True)
    (dest / "tests" / "files").mkdir(parents=True)
    (dest / "solution").mkdir()

    (dest / "instruction.md").write_text(instruction.rstrip() + "\n")
    (dest / "task.toml").write_text(task_toml(name, description=description, source=source, tags=list(tags),
                                              metadata=metadata, difficulty=difficulty,
                                              verifier_timeout=verifier_timeout))
    (dest / "environment" / "Dockerfile").write_text(DOCKERFILE)
    if repo_dir is not None:
        shutil.copytree(repo_dir, dest / "environment" / "repo", symlinks=True,
                        ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"))
    else:
        git_dir, commit = repo_git
        (dest / "environment" / "repo.json").write_text(
            json.dumps({"git": str(Path(git_dir).resolve()), "commit": commit}, indent=1) + "\n")

    config = dict(record or {})
    config.update({
        "instance_id": config.get("instance_id", name),
        "FAIL_TO_PASS": list(fail_to_pass), "PASS_TO_PASS": list(pass_to_pass),
        "test_cmd": list(test_cmd), "test_files": sorted(test_files), "remove_files": list(remove_files),
        "test_env": dict(test_env or {}),
        "timeout_sec": float(test_timeout or max(10.0, verifier_timeout - 10)),
    })
    tests = dest / "tests"
    (tests / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    for rel, content in test_files.items():
        p = tests / "files" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
    (tests / "test.sh").write_text(TEST_SH)
    shutil.copyfile(GRADER_SOURCE, tests / "grade.py")
    (dest / "solution" / "patch.diff").write_text(gold_patch)
    (dest / "solution" / "solve.sh").write_text(SOLVE_SH)
    for rel, content in (extra_solution_files or {}).items():
        (dest / "solution" / rel).write_text(content)
    for sh in (tests / "test.sh", dest / "solution" / "solve.sh"):
        sh.chmod(0o755)
    return dest


def unified_diff(path: str, old: str, new: str) -> str:
    """A git-style unified diff of one file (``a/path`` → ``b/path``)."""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=f"a/{path}", tofile=f"b/{path}", n=3)
    text = "".join(l if l.endswith("\n") else l + "\n\\ No newline at end of file\n" for l in lines)
    return f"diff --git a/{path} b/{path}\n{text}" if text else ""
