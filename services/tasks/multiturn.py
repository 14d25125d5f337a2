"""The built-in *multiturn* task set: the embedded default's two-turn, two-tool family (``--preset agent``).

Each task is a repository with a one-line bug in ``<package>/<fn>.py`` and its visible test
``test_<fn>.py`` at the root; the instruction names the file and the failing assertion, never the
line or the fix. A solving trajectory takes two tool calls over two turns: ``read`` the file (the
line numbers and the code are only in the repository), then ``edit`` the wrong line. The verifier
runs the hidden version of the test (more cases: ``return <constant>`` hacks fail).

Splits: every spec gives one *train* task (the micro spec's function in its own package) and one
*heldout* task: the same bug pattern (same function shape, same wrong operator or constant, same
line) with other names (function, parameters, locals), in another package. What can be learned
(the bug patterns, reading then editing) is shared; what must be read from the repository (names,
file layout) differs, so an agent that memorised the training tasks' edits fails the held-out ones.
No held-out task shares a task id or a file's content with a training task (a test checks it).

``prepare_sandbox.py write-multiturn`` regenerates ``datasets/multiturn`` from the specs below (a
test checks the committed copy matches).
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

from .micro import SPECS as MICRO_SPECS
from .micro import MicroSpec, check_spec
from .swe import unified_diff, write_swe_task

ORG = "lts-multiturn"


@dataclass(frozen=True)
class Variant:
    """A held-out twin of a micro spec: its function and identifiers renamed, in another package."""

    fn: str                      # the micro spec's function
    train_package: str
    heldout_package: str
    heldout_fn: str
    renames: tuple[tuple[str, str], ...]   # (old identifier, new) inside the function


VARIANTS: list[Variant] = [
    Variant("is_even", "parity", "checks", "even", (("n", "k"),)),
    Variant("absolute", "signs", "magnitudes", "magnitude", (("x", "v"),)),
    Variant("maximum", "compare", "ordering", "larger", (("a", "p"), ("b", "q"))),
    Variant("square", "powers", "algebra", "squared", (("x", "t"),)),
    Variant("last", "seqs", "listing", "final_item", (("xs", "items"),)),
    Variant("area", "shapes", "geometry", "rect_area", (("w", "width"), ("h", "height"))),
    Variant("cube", "cubes", "volumes", "cubed", (("x", "z"),)),
    Variant("sum_list", "sums", "totals", "add_up", (("xs", "nums"), ("x", "num"), ("total", "acc"))),
]


@dataclass(frozen=True)
class MultiTurnTask:
    name: str           # task id (lts-multiturn/<name>)
    package: str
    spec: MicroSpec     # function, bug line and tests (the held-out twin's renamed)
    split: str

    @property
    def path(self) -> str:
        return f"{self.package}/{self.spec.fn}.py"

    @property
    def test_file(self) -> str:
        return f"test_{self.spec.fn}.py"


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


def _renamed_spec(spec: MicroSpec, v: Variant) -> MicroSpec:
    mapping = {spec.fn: v.heldout_fn, **dict(v.renames)}
    call = re.compile(rf"\b{re.escape(spec.fn)}\(")
    return MicroSpec(v.heldout_fn, rename(spec.code, mapping), spec.line, rename(spec.bug, mapping),
                     tuple(call.sub(f"{v.heldout_fn}(", e) for e in spec.visible),
                     tuple(call.sub(f"{v.heldout_fn}(", e) for e in spec.hidden))


def tasks() -> list[MultiTurnTask]:
    by_fn = {s.fn: s for s in MICRO_SPECS}
    train = [MultiTurnTask(v.fn, v.train_package, by_fn[v.fn], "train") for v in VARIANTS]
    heldout = [MultiTurnTask(v.heldout_fn, v.heldout_package, _renamed_spec(by_fn[v.fn], v), "heldout")
               for v in VARIANTS]
    return train + heldout


def _test_file(t: MultiTurnTask, hidden: bool) -> str:
    fn = t.spec.fn
    body = f"from {t.package}.{fn} import {fn}\n\n\ndef test_{fn}():\n"
    body += "".join(f"    assert {e}\n" for e in t.spec.visible)
    if hidden:
        body += f"\n\ndef test_{fn}_hidden():\n" + "".join(f"    assert {e}\n" for e in t.spec.hidden)
    return body


def instruction(t: MultiTurnTask, failing_assert: str) -> str:
    return (f"Fix the bug in {t.path}.\n"
            f"Failing test: {t.test_file}::test_{t.spec.fn}\n"
            f"    assert {failing_assert}\n")


def write_multiturn_dataset(dest: Path) -> Path:
    """(Re)write the multiturn dataset: one task dir per task plus manifest.json with the splits."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    all_tasks = tasks()
    names = [t.name for t in all_tasks]
    if len(set(names)) != len(names) or len({t.package for t in all_tasks}) != len(all_tasks):
        raise ValueError("multiturn task names and packages must be unique")
    for old in dest.iterdir():
        if old.is_dir() and old.name not in names:
            shutil.rmtree(old)
    entries = []
    for t in all_tasks:
        failing, f2p, p2p = check_spec(t.spec)
        buggy = t.spec.buggy_code()
        src = Path(tempfile.mkdtemp(prefix=f"multiturn-{t.name}-"))
        (src / t.package).mkdir()
        (src / t.path).write_text(buggy)
        (src / t.test_file).write_text(_test_file(t, hidden=False))
        edit = {"path": t.path, "line": t.spec.line, "old": t.spec.bug,
                "new": t.spec.code.splitlines()[t.spec.line - 1], "failing_test": f2p[0], "test_file": t.test_file}
        tmp_task = dest / f".{t.name}.tmp"
        write_swe_task(
            tmp_task, name=f"{ORG}/{t.name}", instruction=instruction(t, failing),
            gold_patch=unified_diff(t.path, buggy, t.spec.code),
            test_files={t.test_file: _test_file(t, hidden=True)}, fail_to_pass=f2p, pass_to_pass=p2p,
            test_cmd=["python3", "-m", "pytest", "-rA", "--color=no", "-p", "no:cacheprovider", "-q", t.test_file],
            repo_dir=src, description=f"one-line bug in {t.package}/{t.spec.fn}.py (read, then edit)",
            source="lts-multiturn", tags=["multiturn", t.split], metadata={"split": t.split}, verifier_timeout=60,
            test_timeout=30, extra_solution_files={"edit.json": json.dumps(edit, indent=1) + "\n"})
        shutil.rmtree(src)
        if (dest / t.name).exists():
            shutil.rmtree(dest / t.name)
        tmp_task.rename(dest / t.name)
        entries.append({"path": t.name, "name": f"{ORG}/{t.name}", "split": t.split})
    manifest = {"name": "multiturn", "description": __doc__.split("\n\n")[0], "tasks": entries}
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return dest
