"""Hostile task data on the host: a task repo's own git config must never run a command while
the project exports its base commit (git archive ran ``filter.*.smudge`` from .git/config)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

from services.tasks.preparation.workspace import export_source

ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
       "PATH": "/usr/bin:/bin"}


def test_exporting_a_task_repo_runs_none_of_its_git_config(tmp_path):
    marker = tmp_path / "smudge-ran-on-host"
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "a.py").write_text("x = 1\n")
    (repo / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("pkg/a.py")
    (repo / ".gitattributes").write_text("* filter=evil\n")
    env = {**ENV, "HOME": str(tmp_path)}
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "base"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, env=env)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, env=env, capture_output=True,
                            text=True).stdout.strip()
    subprocess.run(["git", "config", "filter.evil.smudge", f"sh -c 'touch {marker}; cat'"], cwd=repo, check=True,
                   env=env)
    task = SimpleNamespace(path=tmp_path, workspace_source=lambda: {"git": repo, "commit": commit})
    dest = tmp_path / "out"
    export_source(task, dest)
    assert not marker.exists(), "the task repo's smudge filter ran on the host"
    assert (dest / "pkg" / "a.py").read_text() == "x = 1\n"
    assert (dest / "run.sh").stat().st_mode & 0o111 and (dest / "link").is_symlink()
    assert Path(dest / "link").resolve() == (dest / "pkg" / "a.py").resolve()
    assert not (dest / ".git").exists()
