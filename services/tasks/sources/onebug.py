"""One-line-bug package tasks, shared by the *multiturn* and *generalise* sets: a repository with a micro spec's
function (renamed, with a one-line bug) in ``<package>/<module>.py`` and its visible test ``test_<fn>.py`` at
the root. The instruction names the file and the failing assertion, never the line or the fix (read, then
edit); the verifier runs the hidden version of the test; ``solution/edit.json`` is the gold edit.

A set is a list of :class:`BugTask` plus :func:`write_bug_dataset` (the test file, the instruction and the
writer live here once); ``multiturn.py`` and ``generalise.py`` only choose names, packages and splits.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .micro import MicroSpec, check_spec
from .swe import unified_diff, write_swe_task


@dataclass(frozen=True)
class BugTask:
    name: str            # task id: <org>/<name>
    package: str         # the repository's package (one per task)
    module: str          # <package>/<module>.py holds the function
    spec: MicroSpec      # the (renamed) spec: function, bug line, tests
    split: str
    base_fn: str         # the micro spec it comes from
    prefix: str = ""     # correct code above the function ('' or a function + two blank lines)

    @property
    def path(self) -> str:
        return f"{self.package}/{self.module}.py"

    @property
    def test_file(self) -> str:
        return f"test_{self.spec.fn}.py"

    @property
    def line(self) -> int:
        return self.spec.line + len(self.prefix.splitlines())

    def source(self, buggy: bool) -> str:
        return self.prefix + (self.spec.buggy_code() if buggy else self.spec.code)


def rename(code: str, mapping: dict[str, str]) -> str:
    """``code`` with its identifier tokens renamed (strings and comments untouched)."""
    out, last = [], (1, 0)
    lines = code.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.NAME and tok.string in mapping:
            start = offsets[tok.start[0] - 1] + tok.start[1]
            out.append(code[offsets[last[0] - 1] + last[1]: start] + mapping[tok.string])
            last = tok.end
    out.append(code[offsets[last[0] - 1] + last[1]:])
    return "".join(out)


def renamed_spec(spec: MicroSpec, new_fn: str, renames: dict[str, str]) -> MicroSpec:
    """``spec`` with its function named ``new_fn`` and the identifiers of ``renames`` renamed (code, bug, tests)."""
    mapping = {spec.fn: new_fn, **renames}
    call = re.compile(rf"\b{re.escape(spec.fn)}\(")
    return MicroSpec(new_fn, rename(spec.code, mapping), spec.line, rename(spec.bug, mapping),
                     tuple(call.sub(f"{new_fn}(", e) for e in spec.visible),
                     tuple(call.sub(f"{new_fn}(", e) for e in spec.hidden))


def source_of_test(t: BugTask, hidden: bool) -> str:
    """``test_<fn>.py``: the visible test (in the repository), or with ``hidden`` the verifier's version."""
    fn = t.spec.fn
    body = f"from {t.package}.{t.module} import {fn}\n\n\ndef test_{fn}():\n"
    body += "".join(f"    assert {e}\n" for e in t.spec.visible)
    if hidden:
        body += f"\n\ndef test_{fn}_hidden():\n" + "".join(f"    assert {e}\n" for e in t.spec.hidden)
    return body


def instruction(t: BugTask, failing_assert: str) -> str:
    return (f"Fix the bug in {t.path}.\n"
            f"Failing test: {t.test_file}::test_{t.spec.fn}\n"
            f"    assert {failing_assert}\n")


def write_bug_dataset(dest: Path, tasks: list[BugTask], *, set_name: str, org: str, description: str,
                      task_description: Callable[[BugTask], str], metadata: Callable[[BugTask], dict[str, Any]],
                      entry: Callable[[BugTask], dict[str, Any]]) -> Path:
    """(Re)write a set: one task dir per task (``<org>/<name>``, source ``<org>``, tags ``[set_name, split]``)
    plus manifest.json (``{"name": set_name, "description", "tasks": [{"path", "name", "split", **entry(t)}]}``);
    task dirs of ``dest`` that are not in ``tasks`` are removed."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    names = [t.name for t in tasks]
    if len(set(names)) != len(names) or len({t.package for t in tasks}) != len(tasks):
        raise ValueError(f"{set_name} task names and packages must be unique")
    for old in dest.iterdir():
        if old.is_dir() and old.name not in names:
            shutil.rmtree(old)
    entries = []
    for t in tasks:
        failing, f2p, p2p = check_spec(t.spec)
        buggy, good = t.source(buggy=True), t.source(buggy=False)
        src = Path(tempfile.mkdtemp(prefix=f"{set_name}-{t.name}-"))
        (src / t.package).mkdir()
        (src / t.path).write_text(buggy)
        (src / t.test_file).write_text(source_of_test(t, hidden=False))
        edit = {"path": t.path, "line": t.line, "old": t.spec.bug, "new": t.spec.code.splitlines()[t.spec.line - 1],
                "failing_test": f2p[0], "test_file": t.test_file}
        tmp_task = dest / f".{t.name}.tmp"
        write_swe_task(
            tmp_task, name=f"{org}/{t.name}", instruction=instruction(t, failing),
            gold_patch=unified_diff(t.path, buggy, good),
            test_files={t.test_file: source_of_test(t, hidden=True)}, fail_to_pass=f2p, pass_to_pass=p2p,
            test_cmd=["python3", "-m", "pytest", "-rA", "--color=no", "-p", "no:cacheprovider", "-q", t.test_file],
            repo_dir=src, description=task_description(t), source=org, tags=[set_name, t.split],
            metadata=metadata(t), verifier_timeout=60, test_timeout=30,
            extra_solution_files={"edit.json": json.dumps(edit, indent=1) + "\n"})
        shutil.rmtree(src)
        if (dest / t.name).exists():
            shutil.rmtree(dest / t.name)
        tmp_task.rename(dest / t.name)
        entries.append({"path": t.name, "name": f"{org}/{t.name}", "split": t.split, **entry(t)})
    manifest = {"name": set_name, "description": description, "tasks": entries}
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return dest
