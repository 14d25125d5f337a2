"""The *generalise* task set: one-line-bug repositories that a generalising model can fix and a memorising
one cannot (issue 32). 212 tasks: 152 train, 60 held-out, for the multi-turn 8-tool agent (``--preset agent``
tools: read / search / edit / run_test / submit ...), graded by the same verifier as every Harbor task.

Split by function, file and repository:

* **function**: the 50 micro specs (services/tasks/micro.py) are divided: every 4th (12) is held out,
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
import json
import keyword
import random
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .micro import SPECS as MICRO_SPECS
from .micro import MicroSpec, check_spec
from .multiturn import rename
from .swe import unified_diff, write_swe_task

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


@dataclass(frozen=True)
class GenTask:
    name: str            # task id: lts-generalise/<name>
    package: str         # the repository's package (one per task)
    module: str          # <package>/<module>.py holds the function
    spec: MicroSpec      # the renamed spec
    prefix: str          # correct code above the function ('' or a function + two blank lines)
    split: str
    base_fn: str         # the micro spec it comes from

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
    mapping = {spec.fn: new_fn, **dict(zip(olds, rng.sample(pool, len(olds)), strict=True))}
    call = re.compile(rf"\b{re.escape(spec.fn)}\(")
    return MicroSpec(new_fn, rename(spec.code, mapping), spec.line, rename(spec.bug, mapping),
                     tuple(call.sub(f"{new_fn}(", e) for e in spec.visible),
                     tuple(call.sub(f"{new_fn}(", e) for e in spec.hidden))


def tasks() -> list[GenTask]:
    out: list[GenTask] = []
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
                out.append(GenTask(f"{package}-{new.fn}", package, module, new, prefix, split, spec.fn))
    return out


def _test_file(t: GenTask, hidden: bool) -> str:
    fn = t.spec.fn
    body = f"from {t.package}.{t.module} import {fn}\n\n\ndef test_{fn}():\n"
    body += "".join(f"    assert {e}\n" for e in t.spec.visible)
    if hidden:
        body += f"\n\ndef test_{fn}_hidden():\n" + "".join(f"    assert {e}\n" for e in t.spec.hidden)
    return body


def instruction(t: GenTask, failing_assert: str) -> str:
    return (f"Fix the bug in {t.path}.\n"
            f"Failing test: {t.test_file}::test_{t.spec.fn}\n"
            f"    assert {failing_assert}\n")


def write_generalise_dataset(dest: Path) -> Path:
    """(Re)write the dataset: one task dir per task plus manifest.json with the splits."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    all_tasks = tasks()
    names = [t.name for t in all_tasks]
    if len(set(names)) != len(names) or len({t.package for t in all_tasks}) != len(all_tasks):
        raise ValueError("generalise task names and packages must be unique")
    for old in dest.iterdir():
        if old.is_dir() and old.name not in names:
            shutil.rmtree(old)
    entries = []
    for t in all_tasks:
        failing, f2p, p2p = check_spec(t.spec)
        buggy, good = t.source(buggy=True), t.source(buggy=False)
        src = Path(tempfile.mkdtemp(prefix=f"generalise-{t.name}-"))
        (src / t.package).mkdir()
        (src / t.path).write_text(buggy)
        (src / t.test_file).write_text(_test_file(t, hidden=False))
        edit = {"path": t.path, "line": t.line, "old": t.spec.bug, "new": t.spec.code.splitlines()[t.spec.line - 1],
                "failing_test": f2p[0], "test_file": t.test_file}
        tmp_task = dest / f".{t.name}.tmp"
        write_swe_task(
            tmp_task, name=f"{ORG}/{t.name}", instruction=instruction(t, failing),
            gold_patch=unified_diff(t.path, buggy, good),
            test_files={t.test_file: _test_file(t, hidden=True)}, fail_to_pass=f2p, pass_to_pass=p2p,
            test_cmd=["python3", "-m", "pytest", "-rA", "--color=no", "-p", "no:cacheprovider", "-q", t.test_file],
            repo_dir=src, description=f"one-line bug in {t.path} (from micro spec {t.base_fn})",
            source="lts-generalise", tags=["generalise", t.split],
            metadata={"split": t.split, "base_fn": t.base_fn}, verifier_timeout=60, test_timeout=30,
            extra_solution_files={"edit.json": json.dumps(edit, indent=1) + "\n"})
        shutil.rmtree(src)
        if (dest / t.name).exists():
            shutil.rmtree(dest / t.name)
        tmp_task.rename(dest / t.name)
        entries.append({"path": t.name, "name": f"{ORG}/{t.name}", "split": t.split, "base_fn": t.base_fn})
    manifest = {"name": "generalise", "description": (__doc__ or "").split("\n\n")[0], "tasks": entries}
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return dest
