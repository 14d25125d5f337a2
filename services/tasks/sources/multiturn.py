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

from dataclasses import dataclass
from pathlib import Path

from . import SetWriter
from .micro import SPECS as MICRO_SPECS
from .onebug import BugTask, renamed_spec, write_bug_dataset

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


def tasks() -> list[BugTask]:
    """The train task (the micro spec in ``<train_package>/<fn>.py``) and the held-out twin of every variant."""
    by_fn = {s.fn: s for s in MICRO_SPECS}
    train = [BugTask(v.fn, v.train_package, v.fn, by_fn[v.fn], "train", v.fn) for v in VARIANTS]
    heldout = [BugTask(v.heldout_fn, v.heldout_package, v.heldout_fn,
                       renamed_spec(by_fn[v.fn], v.heldout_fn, dict(v.renames)), "heldout", v.fn) for v in VARIANTS]
    return train + heldout


def write_multiturn_dataset(dest: Path) -> Path:
    """(Re)write the multiturn dataset: one task dir per task plus manifest.json with the splits."""
    return write_bug_dataset(dest, tasks(), set_name="multiturn", org=ORG, description=__doc__.split("\n\n")[0],
                             task_description=lambda t: f"one-line bug in {t.path} (read, then edit)",
                             metadata=lambda t: {"split": t.split}, entry=lambda t: {})


SOURCE = SetWriter("multiturn", "multiturn tasks", write_multiturn_dataset, lambda: [t.name for t in tasks()])
