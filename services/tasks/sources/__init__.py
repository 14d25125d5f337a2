"""Task sources: everything that writes Harbor task dirs (docs/tasks.md "Layout").

Generators of the built-in sets implement :class:`TaskSource` (``micro``, ``multiturn``, ``generalise``,
``swebench-sample``, ``swebench-verified-like``); ``prepare_sandbox.py write-<name> [--dest DIR]`` runs one
(``services/tasks/cli.py`` builds its command table from ``cli.SOURCES``). The converters that need an
input (``synth``: a local repository, ``real``: pinned sdists, ``adapters``: SWE-bench / R2E-Gym records,
``fetch``: one published task) have commands of their own. ``swe.py`` writes the SWE-style layout they
share, ``onebug.py`` the one-line-bug package tasks of multiturn and generalise.

Imports point down: sources -> preparation -> grading -> the schema (``task.py``, ``task_toml.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol


class TaskSource(Protocol):
    """A generator of one task set."""

    name: str    # the set's name: its folder datasets/<name> and the command write-<name>
    noun: str    # what it writes, as in "50 micro tasks written to DEST"

    def write(self, dest: Path) -> list[str]:
        """(Re)write the set under ``dest`` (deterministic; task dirs no longer in the set are removed): the
        names of the tasks written."""
        ...


@dataclass(frozen=True)
class SetWriter:
    """A :class:`TaskSource` from a set's writer function and the names of its tasks."""

    name: str
    noun: str
    writer: Callable[[Path], object]
    task_names: Callable[[], list[str]]

    def write(self, dest: Path) -> list[str]:
        self.writer(dest)
        return self.task_names()
