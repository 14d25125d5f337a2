"""Task synthesis from any local Python repository: inject a realistic one-line bug that makes
existing tests fail, keep those tests as FAIL_TO_PASS and a sample of the still-passing ones as
PASS_TO_PASS, write an issue-style instruction from the *failure* (never the diff) and the gold
patch (the reverse of the bug). Deterministic for a given repo, seed, Python and pytest.

Mutations (via ``ast``, each touching one line, applied at exact token offsets so the diff is a
one-line change that looks hand-written):

* ``compare``   ``<``↔``<=``, ``>``↔``>=``, ``==``↔``!=``, ``in``↔``not in``, ``is``↔``is not``
* ``arith``     ``+``↔``-``, ``//``↔``/``
* ``boolop``    ``and``↔``or``
* ``negate``    ``if not x:`` → ``if x:`` (also ``while`` / ternaries)
* ``off_by_one`` an integer literal in a slice, index, comparison, ``+``/``-`` or ``range()`` ± 1
* ``return``    ``return True``↔``return False``, ``return <name>`` → ``return None``

**The repository's tests run on the host** (plain subprocesses, no sandbox) while synthesising:
use it on code you would install anyway (pinned sdists, your own repos).
"""

from __future__ import annotations

import ast
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..grading.grade import parse_pytest_log
from .swe import unified_diff, write_swe_task

PASSING = ("PASSED", "XFAIL")
SYNTH_VERSION = 5  # bump when the generated tasks change for the same repo and seed


@dataclass(frozen=True)
class Mutation:
    file: str          # relative path
    line: int          # 1-based
    start: int         # byte offsets in the line
    end: int
    new: bytes         # replacement for line[start:end]
    kind: str
    function: str      # qualified name of the enclosing function

    def apply(self, text: str) -> str:
        lines = text.splitlines(keepends=True)
        b = lines[self.line - 1].encode()
        lines[self.line - 1] = (b[:self.start] + self.new + b[self.end:]).decode()
        return "".join(lines)

    @property
    def key(self) -> tuple:
        return (self.file, self.line, self.start, self.kind)


# --------------------------------------------------------------------------------------------
# candidate enumeration

_CMP = {
    ast.Lt: (rb"(?<![<>=!])<(?![<=])", b"<="), ast.LtE: (rb"<=", b"<"),
    ast.Gt: (rb"(?<![<>=\-])>(?![>=])", b">="), ast.GtE: (rb">=", b">"),
    ast.Eq: (rb"==", b"!="), ast.NotEq: (rb"!=", b"=="),
    ast.In: (rb"(?<!not )\bin\b", b"not in"), ast.NotIn: (rb"\bnot\s+in\b", b"in"),
    ast.Is: (rb"\bis\b(?!\s+not\b)", b"is not"), ast.IsNot: (rb"\bis\s+not\b", b"is"),
}
_ARITH = {ast.Add: (rb"\+", b"-"), ast.Sub: (rb"-", b"+"), ast.FloorDiv: (rb"//", b"/"),
          ast.Div: (rb"(?<!/)/(?!/)", b"//")}
_BOOL = {ast.And: (rb"\band\b", b"or"), ast.Or: (rb"\bor\b", b"and")}


class _Finder(ast.NodeVisitor):
    def __init__(self, rel: str, source: str):
        self.rel = rel
        self.lines = [l.encode() for l in source.splitlines()]
        self.out: list[Mutation] = []
        self.stack: list[str] = []
        self.in_function = 0
        self.parents: dict[ast.AST, ast.AST] = {}

    # scope -----------------------------------------------------------------
    def visit_FunctionDef(self, node):  # noqa: N802
        self.stack.append(node.name)
        self.in_function += 1
        for stmt in node.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # docstring
            self.visit(stmt)
        self.in_function -= 1
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):  # noqa: N802
        self.stack.append(node.name)
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.visit(stmt)
        self.stack.pop()

    def visit_Assert(self, node):  # noqa: N802
        return  # never mutate assertions

    def generic_visit(self, node):
        for child in ast.iter_child_nodes(node):
            self.parents[child] = node
        if self.in_function:
            self._mutations(node)
        super().generic_visit(node)

    # helpers ---------------------------------------------------------------
    def _one_line(self, *nodes) -> bool:
        return all(getattr(n, "lineno", None) and n.lineno == n.end_lineno == nodes[0].lineno for n in nodes)

    def _add(self, node, start, end, new, kind):
        self.out.append(Mutation(self.rel, node.lineno, start, end, new, kind, ".".join(self.stack)))

    def _gap(self, node, left, right, pattern, new, kind):
        if not self._one_line(node, left, right):
            return
        line = self.lines[node.lineno - 1]
        a, b = left.end_col_offset, right.col_offset
        found = list(re.finditer(pattern, line[a:b]))
        if len(found) == 1:
            m = found[0]
            self._add(node, a + m.start(), a + m.end(), new, kind)

    def _mutations(self, node):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
            pat, new = _CMP[type(node.ops[0])]
            self._gap(node, node.left, node.comparators[0], pat, new, "compare")
        elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
            pat, new = _ARITH[type(node.op)]
            if not (isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)):
                self._gap(node, node.left, node.right, pat, new, "arith")
        elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
            pat, new = _BOOL[type(node.op)]
            self._gap(node, node.values[0], node.values[1], pat, new, "boolop")
        elif isinstance(node, (ast.If, ast.While, ast.IfExp)) and isinstance(node.test, ast.UnaryOp) \
                and isinstance(node.test.op, ast.Not) and self._one_line(node.test, node.test.operand):
            t = node.test
            seg = self.lines[t.lineno - 1][t.col_offset:t.operand.col_offset]
            if re.fullmatch(rb"not\s+", seg):
                self._add(t, t.col_offset, t.operand.col_offset, b"", "negate")
        elif isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 16 \
                and self._one_line(node):
            parent = self.parents.get(node)
            ok = isinstance(parent, (ast.Slice, ast.Compare)) \
                or (isinstance(parent, ast.Subscript) and parent.slice is node) \
                or (isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Add, ast.Sub))) \
                or (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "range")
            seg = self.lines[node.lineno - 1][node.col_offset:node.end_col_offset]
            if ok and seg == str(node.value).encode():
                new = node.value + 1 if node.value in (0, 1) or (node.lineno + node.col_offset) % 2 else node.value - 1
                self._add(node, node.col_offset, node.end_col_offset, str(new).encode(), "off_by_one")
        elif isinstance(node, ast.Return) and node.value is not None and self._one_line(node.value):
            v = node.value
            seg = self.lines[v.lineno - 1][v.col_offset:v.end_col_offset]
            if isinstance(v, ast.Constant) and v.value in (True, False) and type(v.value) is bool:
                self._add(v, v.col_offset, v.end_col_offset, b"False" if v.value else b"True", "return")
            elif isinstance(v, ast.Name) and seg == v.id.encode() and v.id not in ("None", "self"):
                self._add(v, v.col_offset, v.end_col_offset, b"None", "return")


def find_mutations(repo: Path, src_paths: list[str]) -> list[Mutation]:
    """All candidate mutations in the (non-test) Python files under ``src_paths``."""
    out: list[Mutation] = []
    files: list[Path] = []
    for sp in src_paths:
        p = repo / sp
        files += [p] if p.is_file() else sorted(p.rglob("*.py"))
    for f in files:
        rel = f.relative_to(repo).as_posix()
        if _is_test_file(rel):
            continue
        try:
            source = f.read_text()
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        finder = _Finder(rel, source)
        finder.visit(tree)
        out += finder.out
    return sorted(set(out), key=lambda m: m.key)


def _files_under(repo: Path, paths: list[str]) -> dict[str, str]:
    out = {}
    for sp in paths:
        p = repo / sp
        for f in [p] if p.is_file() else sorted(p.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                try:
                    out[f.relative_to(repo).as_posix()] = f.read_text()
                except UnicodeDecodeError:
                    continue  # binary fixtures stay as they are in the workspace
    return out


def _is_test_file(rel: str) -> bool:
    parts = rel.split("/")
    return any(p in ("tests", "test", "testing") for p in parts[:-1]) or parts[-1].startswith("test_") \
        or parts[-1].endswith("_test.py") or parts[-1] == "conftest.py"


# --------------------------------------------------------------------------------------------
# running tests on the host


def pytest_cmd(test_paths: list[str]) -> list[str]:
    return ["python3", "-m", "pytest", "-rA", "--color=no", "-p", "no:cacheprovider", "--rootdir=.",
            "-o", "addopts=", *test_paths]


def run_pytest(repo: Path, test_paths: list[str], pythonpath: str, timeout: float) -> tuple[dict[str, str], str, bool]:
    cmd = pytest_cmd(test_paths)
    cmd[0] = sys.executable
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONHASHSEED": "0", "PYTHONPATH": pythonpath}  # same environment as grading.run_tests
    try:
        r = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        return {}, (e.stdout or b"").decode(errors="replace"), True
    out = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
    return parse_pytest_log(out), out, False


# --------------------------------------------------------------------------------------------
# instruction from the failure


def failure_excerpt(output: str, test_id: str, max_lines: int = 12) -> str:
    """The ``E   `` lines of ``test_id``'s failure section in pytest output."""
    short = test_id.split("::")[-1]
    sections = re.split(r"^_{3,} (.+?) _{3,}$", output, flags=re.M)
    for i in range(1, len(sections) - 1, 2):
        title = sections[i].strip()
        if title.endswith(short) or title.split(".")[-1] == short:
            lines = [l for l in sections[i + 1].splitlines() if l.startswith("E ")]
            return "\n".join(lines[:max_lines])
    return ""


def issue_text(package: str, f2p: list[str], output: str) -> str:
    excerpt = failure_excerpt(output, f2p[0]) or "(no assertion message)"
    others = "".join(f"- `{t}`\n" for t in f2p[:8]) + (f"- ... and {len(f2p) - 8} more\n" if len(f2p) > 8 else "")
    return (f"# Regression in {package}: {len(f2p)} test(s) fail\n\n"
            f"After a recent change some of {package}'s tests fail. Running\n\n"
            f"    python -m pytest {f2p[0]}\n\n"
            f"fails with:\n\n```\n{excerpt}\n```\n\n"
            f"Failing tests:\n{others}\n"
            "Please fix the library code (not the tests) so that these tests pass again and the "
            "rest of the test suite keeps passing.\n")


# --------------------------------------------------------------------------------------------
# synthesis


@dataclass
class SynthResult:
    tasks: list[Path] = field(default_factory=list)
    tried: int = 0
    rejected: dict[str, int] = field(default_factory=dict)


def synthesize(repo: str | Path, out: str | Path, *, src: list[str], tests: list[str], pythonpath: str = ".",
               n: int = 5, seed: int = 0, org: str = "synth", package: str | None = None,
               max_f2p: int = 20, n_p2p: int = 10, max_tries: int | None = None, test_timeout: float = 120,
               kinds: tuple[str, ...] = ("compare", "arith", "boolop", "negate", "off_by_one", "return"),
               log=print) -> SynthResult:
    """Write up to ``n`` tasks synthesised from ``repo`` into ``out/<org>__<package>-<k>``."""
    repo, out = Path(repo).resolve(), Path(out)
    package = package or repo.name
    rng = random.Random(f"{package}:{seed}")
    res = SynthResult()
    with tempfile.TemporaryDirectory(prefix="lts-synth-") as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(repo, work, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc",
                                                                                 ".pytest_cache"))
        base_status, base_out, to = run_pytest(work, tests, pythonpath, test_timeout)
        again, _, to2 = run_pytest(work, tests, pythonpath, test_timeout)
        # keep tests that pass in two baseline runs under the same id (drops flaky tests and
        # ids that change between processes, e.g. parametrize over a set holding None)
        passing = sorted(t for t, s in base_status.items() if s in PASSING and again.get(t) in PASSING)
        to = to or to2
        if to or not passing:
            raise RuntimeError(f"{package}: the test suite does not pass at baseline "
                               f"({'timed out' if to else 'no passing tests'}):\n{base_out[-2000:]}")
        # the verifier runs the same command as here (test ids can depend on which files are
        # collected) and restores every file under the test paths
        test_files = _files_under(work, tests)
        cands = [m for m in find_mutations(work, src) if m.kind in kinds]
        rng.shuffle(cands)
        used_functions: set[str] = set()
        max_tries = max_tries or 6 * n + 10
        for m in cands:
            if len(res.tasks) >= n or res.tried >= max_tries:
                break
            if m.function in used_functions:
                continue
            res.tried += 1
            path = work / m.file
            original = path.read_text()
            mutated = m.apply(original)
            try:
                ast.parse(mutated)
            except SyntaxError:
                res.rejected["syntax"] = res.rejected.get("syntax", 0) + 1
                continue
            path.write_text(mutated)
            try:
                status, output, timed_out = run_pytest(work, tests, pythonpath, test_timeout)
            finally:
                path.write_text(original)
            broken = [t for t in passing if status.get(t) not in PASSING]
            reason = ("timeout" if timed_out else "no_failure" if not broken else
                      "too_many_failures" if len(broken) > max_f2p else None)
            if reason:
                res.rejected[reason] = res.rejected.get(reason, 0) + 1
                continue
            used_functions.add(m.function)
            still = [t for t in passing if t not in broken]
            same_file = {t.split("::")[0] for t in broken}
            pool = [t for t in still if t.split("::")[0] in same_file] or still
            p2p = sorted(rng.sample(pool, min(n_p2p, len(pool))))
            f2p = sorted(broken)
            k = len(res.tasks)
            name = f"{package}-{k}"
            snapshot = Path(tmp) / f"snap-{k}"
            shutil.copytree(work, snapshot, symlinks=True)
            (snapshot / m.file).write_text(mutated)
            task_dir = write_swe_task(
                out / f"{org}__{name}", name=f"{org}/{name}", instruction=issue_text(package, f2p, output),
                gold_patch=unified_diff(m.file, mutated, original),
                test_files=test_files,
                fail_to_pass=f2p, pass_to_pass=p2p, test_cmd=pytest_cmd(tests),
                test_env={"PYTHONPATH": pythonpath}, repo_dir=snapshot,
                record={"instance_id": f"{org}__{name}", "package": package, "mutation": {
                    "kind": m.kind, "file": m.file, "line": m.line, "function": m.function}, "seed": seed},
                description=f"synthesised {m.kind} bug in {package}", source=f"synth:{package}",
                tags=["synth", m.kind], difficulty="medium", verifier_timeout=max(60.0, test_timeout + 30),
                test_timeout=test_timeout)
            shutil.rmtree(snapshot)
            res.tasks.append(task_dir)
            log(f"  {name}: {m.kind} in {m.function} ({m.file}:{m.line}) -> {len(f2p)} FAIL_TO_PASS, {len(p2p)} "
                "PASS_TO_PASS")
    return res
