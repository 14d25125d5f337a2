"""The *generalise* task set: one-line-bug repositories that a generalising model can fix and a memorising
one cannot (issue 32). 212 tasks: 152 train, 60 held-out, for the multi-turn 8-tool agent (``--preset agent``
tools: read / search / edit / run_test / submit ...), graded by the same verifier as every Harbor task.

Split by function, file and repository:

* **function**: the 50 micro specs (services/tasks/sources/micro.py) are divided: every 4th (12) is held out,
  the other 38 train. A held-out task's function, its bug and its tests are never in a train task.
* **names**: each spec becomes several tasks (4 train, 5 held-out), each with the function renamed
  (``compute_<fn>``, ``<fn>_value`` ...), every parameter and local renamed from a seeded pool, in a
  module file and a package (the repository) whose names come from word pools disjoint between the
  splits: no held-out package, module path or function name occurs in the train split.
* **code**: odd variants put a second, correct function of the same split above the buggy one, so the
  bug's line number and the file's content differ between a spec's variants; the instruction names the
  file and the failing assertion, never the line or the fix (read, then edit).

``prepare_sandbox.py write-generalise`` regenerates ``datasets/generalise`` (deterministic; a test checks the
committed copy matches and that the splits are disjoint).
"""

from __future__ import annotations

import ast
import builtins
import keyword
import random
from pathlib import Path

from . import SetWriter
from .micro import SPECS as MICRO_SPECS
from .micro import MicroSpec
from .onebug import BugTask, renamed_spec, write_bug_dataset

ORG = "lts-generalise"
HELDOUT_EVERY = 4
VARIANTS = {"train": 4, "heldout": 5}
FN_FORMS = ("{fn}", "compute_{fn}", "{fn}_value", "get_{fn}", "calc_{fn}")
WORDS = {
    "train": (("red", "blue", "green", "quick", "lazy", "bright", "calm", "bold", "dark", "fresh", "grand", "happy",
               "keen", "light", "merry", "noble"),
              ("fox", "owl", "lynx", "bear", "wolf", "hawk", "seal", "crab", "deer", "frog", "goat", "hare", "ibis",
               "kiwi", "lark", "mole")),
    "heldout": (("amber", "coral", "ivory", "olive", "silver", "violet", "copper", "indigo", "scarlet", "teal"),
                ("river", "canyon", "meadow", "glacier", "harbor", "island", "summit", "valley", "prairie",
                 "lagoon")),
}
MODULES = {"train": ("utils", "helpers", "core", "ops", "tools", "funcs", "lib", "misc"),
           "heldout": ("common", "base", "routines", "calc", "procs", "support", "shared", "kernel")}
IDENTS = ("a", "b", "c", "d", "e", "f", "g", "k", "m", "n", "p", "q", "r", "t", "u", "v", "w", "x", "y", "z",
          "val", "num", "item", "items", "seq", "data", "arr", "vals", "lst", "acc", "res", "cur", "idx", "elem",
          "count", "text", "word", "left", "right", "low", "high", "step", "size", "value", "other", "first")


def split_of(index: int) -> str:
    return "heldout" if index % HELDOUT_EVERY == HELDOUT_EVERY - 1 else "train"


def _locals(code: str) -> list[str]:
    tree = ast.parse(code)
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    names = [a.arg for a in fn.args.args]
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in names:
            names.append(node.id)
    return names


def _all_names(code: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Attribute)}


def variant_spec(spec: MicroSpec, new_fn: str, rng: random.Random) -> MicroSpec:
    """``spec`` with its function named ``new_fn`` and its parameters and locals renamed from IDENTS."""
    olds = _locals(spec.code)
    taken = (_all_names(spec.code) - set(olds)) | set(dir(builtins)) | set(keyword.kwlist) | {new_fn}
    pool = [n for n in IDENTS if n not in taken]
    return renamed_spec(spec, new_fn, dict(zip(olds, rng.sample(pool, len(olds)), strict=True)))


def tasks() -> list[BugTask]:
    out: list[BugTask] = []
    by_split: dict[str, list[MicroSpec]] = {"train": [], "heldout": []}
    for i, s in enumerate(MICRO_SPECS):
        by_split[split_of(i)].append(s)
    for split, specs in by_split.items():
        rng = random.Random(f"generalise-{split}")
        adjs, nouns = WORDS[split]
        packages = [f"{a}_{n}" for a in adjs for n in nouns]
        rng.shuffle(packages)
        for j, spec in enumerate(specs):
            for k in range(VARIANTS[split]):
                new = variant_spec(spec, FN_FORMS[k].format(fn=spec.fn), rng)
                prefix = ""
                if k % 2 == 1:     # a correct neighbour from the same split above the buggy function
                    other = specs[(j + k) % len(specs)]
                    if other.fn != spec.fn:
                        prefix = other.code + "\n\n"
                package = packages.pop()
                module = MODULES[split][(j + k) % len(MODULES[split])]
                out.append(BugTask(f"{package}-{new.fn}", package, module, new, split, spec.fn, prefix))
    return out


def write_generalise_dataset(dest: Path) -> Path:
    """(Re)write the dataset: one task dir per task plus manifest.json with the splits."""
    return write_bug_dataset(dest, tasks(), set_name="generalise", org=ORG,
                             description=(__doc__ or "").split("\n\n")[0],
                             task_description=lambda t: f"one-line bug in {t.path} (from micro spec {t.base_fn})",
                             metadata=lambda t: {"split": t.split, "base_fn": t.base_fn},
                             entry=lambda t: {"base_fn": t.base_fn})


SOURCE = SetWriter("generalise", "generalise tasks", write_generalise_dataset, lambda: [t.name for t in tasks()])
