"""The built-in *micro* task set: tiny one-line-bug tasks the embedded tiny model can learn.

Each task is a two-file repository: ``<fn>.py`` (one 2-6 line function with a one-line bug) and
``test_<fn>.py`` (the visible test, which fails). The verifier runs the hidden version of
``test_<fn>.py`` (visible test + ``test_<fn>_hidden`` with more cases, so ``return <constant>``
hacks fail). The gold trajectory is ~3 tool calls: read the file, edit one line, submit; the data
for it is in ``solution/edit.json`` (path, line, old, new, failing test).

The specs below are the source of truth; ``prepare_sandbox.py micro --write`` regenerates
``datasets/micro`` from them (a test checks the committed copy matches).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import SetWriter
from .swe import unified_diff, write_swe_task

ORG = "lts-micro"
HELDOUT_EVERY = 5  # every 5th spec (by position) is held out


@dataclass(frozen=True)
class MicroSpec:
    fn: str
    code: str                   # correct function source
    line: int                   # 1-based line of the bug
    bug: str                    # the buggy line (full line, with indentation)
    visible: tuple[str, ...]    # assert expressions of the visible test (>= 1 fails on the bug)
    hidden: tuple[str, ...]     # extra hidden cases (distinct outputs: block constant returns)

    def buggy_code(self) -> str:
        lines = self.code.splitlines()
        lines[self.line - 1] = self.bug
        return "\n".join(lines) + "\n"


def S(fn, code, line, bug, visible, hidden) -> MicroSpec:
    return MicroSpec(fn, code.strip("\n") + "\n", line, bug, tuple(visible), tuple(hidden))


SPECS: list[MicroSpec] = [
    S("clamp", """
def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x
""", 4, "    if x < hi:", ["clamp(2, 0, 3) == 2", "clamp(5, 0, 3) == 3"],
      ["clamp(-1, 0, 3) == 0", "clamp(9, 1, 4) == 4", "clamp(1, 0, 3) == 1"]),
    S("is_even", """
def is_even(n):
    return n % 2 == 0
""", 2, "    return n % 2 == 1", ["is_even(4) == True", "is_even(7) == False"],
      ["is_even(0) == True", "is_even(3) == False", "is_even(10) == True"]),
    S("absolute", """
def absolute(x):
    if x < 0:
        return -x
    return x
""", 2, "    if x > 0:", ["absolute(-3) == 3", "absolute(2) == 2"],
      ["absolute(0) == 0", "absolute(-7) == 7", "absolute(5) == 5"]),
    S("maximum", """
def maximum(a, b):
    if a > b:
        return a
    return b
""", 2, "    if a < b:", ["maximum(3, 1) == 3", "maximum(1, 2) == 2"],
      ["maximum(5, 9) == 9", "maximum(-1, -4) == -1", "maximum(2, 2) == 2"]),
    S("minimum", """
def minimum(a, b):
    if a < b:
        return a
    return b
""", 2, "    if a > b:", ["minimum(3, 1) == 1", "minimum(1, 2) == 1"],
      ["minimum(5, 9) == 5", "minimum(-1, -4) == -4", "minimum(2, 2) == 2"]),
    S("sign", """
def sign(x):
    if x > 0:
        return 1
    if x < 0:
        return -1
    return 0
""", 5, "        return 1", ["sign(-5) == -1", "sign(4) == 1"],
      ["sign(0) == 0", "sign(-1) == -1", "sign(9) == 1"]),
    S("count_vowels", """
def count_vowels(s):
    n = 0
    for c in s:
        if c in "aeiou":
            n += 1
    return n
""", 5, "            n += 2", ["count_vowels('hello') == 2", "count_vowels('xyz') == 0"],
      ["count_vowels('banana') == 3", "count_vowels('a') == 1", "count_vowels('queue') == 4"]),
    S("sum_list", """
def sum_list(xs):
    total = 0
    for x in xs:
        total += x
    return total
""", 2, "    total = 1", ["sum_list([1, 2, 3]) == 6", "sum_list([]) == 0"],
      ["sum_list([5]) == 5", "sum_list([-1, 1, 4]) == 4", "sum_list([10, 20]) == 30"]),
    S("product", """
def product(xs):
    p = 1
    for x in xs:
        p *= x
    return p
""", 2, "    p = 0", ["product([2, 3, 4]) == 24", "product([]) == 1"],
      ["product([5]) == 5", "product([1, 2, 3]) == 6", "product([-2, 3]) == -6"]),
    S("factorial", """
def factorial(n):
    r = 1
    for i in range(2, n + 1):
        r *= i
    return r
""", 3, "    for i in range(2, n):", ["factorial(4) == 24", "factorial(0) == 1"],
      ["factorial(1) == 1", "factorial(3) == 6", "factorial(5) == 120"]),
    S("fib", """
def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
""", 5, "    return b", ["fib(5) == 5", "fib(0) == 0"],
      ["fib(1) == 1", "fib(2) == 1", "fib(7) == 13"]),
    S("last", """
def last(xs):
    return xs[-1]
""", 2, "    return xs[0]", ["last([1, 2, 3]) == 3", "last([7]) == 7"],
      ["last([4, 5]) == 5", "last(['a', 'b', 'c']) == 'c'", "last([9, 8, 1]) == 1"]),
    S("first_word", """
def first_word(s):
    return s.split()[0]
""", 2, "    return s.split()[1]", ["first_word('hello big world') == 'hello'"],
      ["first_word('one two') == 'one'", "first_word('solo') == 'solo'", "first_word('a b c') == 'a'"]),
    S("reverse_string", """
def reverse_string(s):
    return s[::-1]
""", 2, "    return s[::1]", ["reverse_string('abc') == 'cba'", "reverse_string('') == ''"],
      ["reverse_string('ab') == 'ba'", "reverse_string('level') == 'level'", "reverse_string('xyz') == 'zyx'"]),
    S("is_palindrome", """
def is_palindrome(s):
    return s == s[::-1]
""", 2, "    return s != s[::-1]", ["is_palindrome('racecar') == True", "is_palindrome('abc') == False"],
      ["is_palindrome('a') == True", "is_palindrome('ab') == False", "is_palindrome('noon') == True"]),
    S("square", """
def square(x):
    return x * x
""", 2, "    return x + x", ["square(3) == 9", "square(0) == 0"],
      ["square(4) == 16", "square(-5) == 25", "square(1) == 1"]),
    S("cube", """
def cube(x):
    return x ** 3
""", 2, "    return x ** 2", ["cube(2) == 8", "cube(1) == 1"],
      ["cube(3) == 27", "cube(-2) == -8", "cube(0) == 0"]),
    S("average", """
def average(xs):
    return sum(xs) / len(xs)
""", 2, "    return sum(xs) / (len(xs) + 1)", ["average([2, 4]) == 3", "average([5]) == 5"],
      ["average([1, 2, 3]) == 2", "average([10, 20, 30, 40]) == 25", "average([-2, 2]) == 0"]),
    S("count_positive", """
def count_positive(xs):
    return len([x for x in xs if x > 0])
""", 2, "    return len([x for x in xs if x >= 0])", ["count_positive([0, 1, -2, 3]) == 2"],
      ["count_positive([]) == 0", "count_positive([5, 6]) == 2", "count_positive([0, 0, 1]) == 1"]),
    S("double_all", """
def double_all(xs):
    return [2 * x for x in xs]
""", 2, "    return [x * x for x in xs]", ["double_all([1, 3]) == [2, 6]", "double_all([]) == []"],
      ["double_all([5]) == [10]", "double_all([0, -1]) == [0, -2]", "double_all([4, 2]) == [8, 4]"]),
    S("evens", """
def evens(xs):
    return [x for x in xs if x % 2 == 0]
""", 2, "    return [x for x in xs if x % 2 != 0]", ["evens([1, 2, 3, 4]) == [2, 4]"],
      ["evens([]) == []", "evens([5, 7]) == []", "evens([0, 6, 9]) == [0, 6]"]),
    S("to_fahrenheit", """
def to_fahrenheit(c):
    return c * 9 / 5 + 32
""", 2, "    return c * 5 / 9 + 32", ["to_fahrenheit(100) == 212", "to_fahrenheit(0) == 32"],
      ["to_fahrenheit(-40) == -40", "to_fahrenheit(10) == 50", "to_fahrenheit(20) == 68"]),
    S("area", """
def area(w, h):
    return w * h
""", 2, "    return w + h", ["area(3, 4) == 12", "area(2, 2) == 4"],
      ["area(5, 1) == 5", "area(0, 7) == 0", "area(6, 3) == 18"]),
    S("perimeter", """
def perimeter(w, h):
    return 2 * (w + h)
""", 2, "    return 2 * w + h", ["perimeter(3, 4) == 14", "perimeter(0, 0) == 0"],
      ["perimeter(1, 1) == 4", "perimeter(5, 2) == 14", "perimeter(10, 0) == 20"]),
    S("is_leap", """
def is_leap(y):
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
""", 2, "    return y % 4 == 0 and (y % 100 == 0 or y % 400 == 0)", ["is_leap(2024) == True", "is_leap(2023) == False"],
      ["is_leap(1900) == False", "is_leap(2000) == True", "is_leap(1996) == True"]),
    S("in_range", """
def in_range(x, lo, hi):
    return lo <= x < hi
""", 2, "    return lo < x < hi", ["in_range(0, 0, 5) == True", "in_range(5, 0, 5) == False"],
      ["in_range(3, 0, 5) == True", "in_range(-1, 0, 5) == False", "in_range(2, 2, 3) == True"]),
    S("count_char", """
def count_char(s, ch):
    n = 0
    for c in s:
        if c == ch:
            n += 1
    return n
""", 4, "        if c != ch:", ["count_char('hello', 'l') == 2", "count_char('', 'x') == 0"],
      ["count_char('abc', 'z') == 0", "count_char('aaaa', 'a') == 4", "count_char('banana', 'n') == 2"]),
    S("index_of", """
def index_of(xs, v):
    for i, x in enumerate(xs):
        if x == v:
            return i
    return -1
""", 5, "    return 0", ["index_of([4, 5, 6], 6) == 2", "index_of([1, 2], 9) == -1"],
      ["index_of([], 1) == -1", "index_of([7, 8], 7) == 0", "index_of([3, 3, 4], 4) == 2"]),
    S("contains", """
def contains(xs, v):
    for x in xs:
        if x == v:
            return True
    return False
""", 5, "    return True", ["contains([1, 2, 3], 2) == True", "contains([1, 2, 3], 5) == False"],
      ["contains([], 1) == False", "contains(['a'], 'a') == True", "contains([4, 5], 6) == False"]),
    S("max_list", """
def max_list(xs):
    best = xs[0]
    for x in xs:
        if x > best:
            best = x
    return best
""", 4, "        if x < best:", ["max_list([3, 9, 2]) == 9", "max_list([5]) == 5"],
      ["max_list([1, 2, 3]) == 3", "max_list([-5, -2]) == -2", "max_list([7, 7, 1]) == 7"]),
    S("min_list", """
def min_list(xs):
    best = xs[0]
    for x in xs:
        if x < best:
            best = x
    return best
""", 2, "    best = 0", ["min_list([3, 9, 2]) == 2", "min_list([5]) == 5"],
      ["min_list([4, 6, 8]) == 4", "min_list([-5, -2]) == -5", "min_list([7, 1, 9]) == 1"]),
    S("repeat", """
def repeat(s, n):
    return s * n
""", 2, "    return s * (n - 1)", ["repeat('ab', 3) == 'ababab'", "repeat('x', 0) == ''"],
      ["repeat('z', 1) == 'z'", "repeat('hi', 2) == 'hihi'", "repeat('q', 4) == 'qqqq'"]),
    S("join_words", """
def join_words(words):
    return " ".join(words)
""", 2, "    return \"\".join(words)", ["join_words(['a', 'b']) == 'a b'", "join_words([]) == ''"],
      ["join_words(['hi']) == 'hi'", "join_words(['x', 'y', 'z']) == 'x y z'", "join_words(['ab', 'cd']) == 'ab cd'"]),
    S("capitalize", """
def capitalize(s):
    return s[:1].upper() + s[1:]
""", 2, "    return s[:1].upper() + s[2:]", ["capitalize('hello') == 'Hello'", "capitalize('') == ''"],
      ["capitalize('a') == 'A'", "capitalize('world') == 'World'", "capitalize('xY') == 'XY'"]),
    S("countdown", """
def countdown(n):
    return list(range(n, 0, -1))
""", 2, "    return list(range(n, -1, -1))", ["countdown(3) == [3, 2, 1]", "countdown(1) == [1]"],
      ["countdown(0) == []", "countdown(2) == [2, 1]", "countdown(5) == [5, 4, 3, 2, 1]"]),
    S("squares", """
def squares(n):
    return [i * i for i in range(n)]
""", 2, "    return [i * i for i in range(1, n)]", ["squares(3) == [0, 1, 4]", "squares(0) == []"],
      ["squares(1) == [0]", "squares(2) == [0, 1]", "squares(4) == [0, 1, 4, 9]"]),
    S("gcd", """
def gcd(a, b):
    while b:
        a, b = b, a % b
    return a
""", 4, "    return b", ["gcd(12, 8) == 4", "gcd(7, 3) == 1"],
      ["gcd(10, 5) == 5", "gcd(9, 6) == 3", "gcd(5, 0) == 5"]),
    S("power", """
def power(b, e):
    r = 1
    for _ in range(e):
        r *= b
    return r
""", 4, "        r += b", ["power(2, 3) == 8", "power(5, 0) == 1"],
      ["power(3, 2) == 9", "power(2, 5) == 32", "power(7, 1) == 7"]),
    S("safe_div", """
def safe_div(a, b):
    if b == 0:
        return 0
    return a / b
""", 4, "    return a // b", ["safe_div(7, 2) == 3.5", "safe_div(1, 0) == 0"],
      ["safe_div(9, 3) == 3", "safe_div(1, 4) == 0.25", "safe_div(5, 2) == 2.5"]),
    S("dedupe", """
def dedupe(xs):
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out
""", 4, "        if x in out:", ["dedupe([1, 1, 2]) == [1, 2]", "dedupe([]) == []"],
      ["dedupe([3]) == [3]", "dedupe([2, 2, 2]) == [2]", "dedupe([1, 2, 1, 3]) == [1, 2, 3]"]),
    S("word_count", """
def word_count(s):
    return len(s.split())
""", 2, "    return len(s)", ["word_count('a bc d') == 3", "word_count('') == 0"],
      ["word_count('hello') == 1", "word_count('x y') == 2", "word_count('one two three four') == 4"]),
    S("is_sorted", """
def is_sorted(xs):
    for i in range(len(xs) - 1):
        if xs[i] > xs[i + 1]:
            return False
    return True
""", 3, "        if xs[i] < xs[i + 1]:", ["is_sorted([1, 2, 3]) == True", "is_sorted([3, 1]) == False"],
      ["is_sorted([]) == True", "is_sorted([5, 5, 6]) == True", "is_sorted([1, 3, 2]) == False"]),
    S("midpoint", """
def midpoint(a, b):
    return (a + b) / 2
""", 2, "    return (a - b) / 2", ["midpoint(2, 4) == 3", "midpoint(0, 0) == 0"],
      ["midpoint(1, 2) == 1.5", "midpoint(-4, 4) == 0", "midpoint(10, 20) == 15"]),
    S("middle", """
def middle(xs):
    return xs[len(xs) // 2]
""", 2, "    return xs[len(xs) // 2 - 1]", ["middle([1, 2, 3]) == 2", "middle([7]) == 7"],
      ["middle([4, 5, 6, 7, 8]) == 6", "middle(['a', 'b', 'c']) == 'b'", "middle([9, 1]) == 1"]),
    S("starts_with", """
def starts_with(s, p):
    return s[:len(p)] == p
""", 2, "    return s[:len(p) - 1] == p", ["starts_with('hello', 'he') == True", "starts_with('abc', 'b') == False"],
      ["starts_with('abc', 'abc') == True", "starts_with('xy', 'xyz') == False", "starts_with('cat', 'c') == True"]),
    S("total_length", """
def total_length(words):
    return sum(len(w) for w in words)
""", 2, "    return sum(1 for w in words)", ["total_length(['ab', 'cde']) == 5", "total_length([]) == 0"],
      ["total_length(['x']) == 1", "total_length(['hello', 'hi']) == 7", "total_length(['', 'abc']) == 3"]),
    S("discount", """
def discount(price, pct):
    return price - price * pct / 100
""", 2, "    return price + price * pct / 100", ["discount(200, 10) == 180", "discount(50, 0) == 50"],
      ["discount(100, 50) == 50", "discount(80, 25) == 60", "discount(10, 100) == 0"]),
    S("sum_squares", """
def sum_squares(a, b):
    return a * a + b * b
""", 2, "    return a * a - b * b", ["sum_squares(3, 4) == 25", "sum_squares(0, 0) == 0"],
      ["sum_squares(1, 2) == 5", "sum_squares(2, 2) == 8", "sum_squares(5, 0) == 25"]),
    S("swap_pair", """
def swap_pair(p):
    a, b = p
    return (b, a)
""", 3, "    return (a, b)", ["swap_pair((1, 2)) == (2, 1)", "swap_pair((3, 3)) == (3, 3)"],
      ["swap_pair(('a', 'b')) == ('b', 'a')", "swap_pair((0, 9)) == (9, 0)", "swap_pair((5, 4)) == (4, 5)"]),
    S("tail", """
def tail(xs, n):
    return xs[-n:]
""", 2, "    return xs[n:]", ["tail([1, 2, 3, 4], 1) == [4]", "tail([5, 6], 2) == [5, 6]"],
      ["tail([1, 2, 3], 2) == [2, 3]", "tail([9], 1) == [9]", "tail([1, 2, 3, 4, 5], 3) == [3, 4, 5]"]),
]


def _run_asserts(code: str, fn: str, exprs: tuple[str, ...]) -> list[bool]:
    ns: dict = {}
    exec(compile(code, f"{fn}.py", "exec"), ns)  # noqa: S102 - our own spec code
    out = []
    for e in exprs:
        try:
            out.append(bool(eval(e, ns)))  # noqa: S307
        except Exception:  # noqa: BLE001
            out.append(False)
    return out


def _test_file(fn: str, visible: tuple[str, ...], hidden: tuple[str, ...] = ()) -> str:
    body = f"from {fn} import {fn}\n\n\ndef test_{fn}():\n" + "".join(f"    assert {e}\n" for e in visible)
    if hidden:
        body += f"\n\ndef test_{fn}_hidden():\n" + "".join(f"    assert {e}\n" for e in hidden)
    return body


def check_spec(spec: MicroSpec) -> tuple[str, list[str], list[str]]:
    """Checks a spec; returns (first failing visible assert, FAIL_TO_PASS, PASS_TO_PASS)."""
    n = len(spec.code.splitlines())
    if not 2 <= n <= 6:
        raise ValueError(f"{spec.fn}: function has {n} lines, want 2-6")
    if spec.code.splitlines()[spec.line - 1] == spec.bug:
        raise ValueError(f"{spec.fn}: bug line equals the correct line")
    if len(set(_expected_values(spec))) < 2:
        raise ValueError(f"{spec.fn}: hidden cases do not block a constant return")
    good_v = _run_asserts(spec.code, spec.fn, spec.visible)
    good_h = _run_asserts(spec.code, spec.fn, spec.hidden)
    if not all(good_v + good_h):
        raise ValueError(f"{spec.fn}: correct code fails its own tests")
    bad_v = _run_asserts(spec.buggy_code(), spec.fn, spec.visible)
    bad_h = _run_asserts(spec.buggy_code(), spec.fn, spec.hidden)
    if all(bad_v):
        raise ValueError(f"{spec.fn}: the visible test passes on the buggy code")
    test_file = f"test_{spec.fn}.py"
    f2p, p2p = [f"{test_file}::test_{spec.fn}"], []
    (f2p if not all(bad_h) else p2p).append(f"{test_file}::test_{spec.fn}_hidden")
    first_fail = spec.visible[bad_v.index(False)]
    return first_fail, f2p, p2p


def _expected_values(spec: MicroSpec) -> list[str]:
    return [e.rsplit("==", 1)[1].strip() for e in spec.visible + spec.hidden if "==" in e]


def instruction(spec: MicroSpec, failing_assert: str) -> str:
    return (f"Fix the bug in {spec.fn}.py.\n"
            f"Failing test: test_{spec.fn}.py::test_{spec.fn}\n"
            f"    assert {failing_assert}\n")


def split_of(index: int) -> str:
    return "heldout" if index % HELDOUT_EVERY == HELDOUT_EVERY - 1 else "train"


def write_micro_dataset(dest: Path, specs: list[MicroSpec] = SPECS) -> Path:
    """(Re)write the micro dataset: one task dir per spec plus manifest.json with the splits."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    names = [s.fn for s in specs]
    if len(set(names)) != len(names):
        raise ValueError("duplicate micro task names")
    for old in dest.iterdir():
        if old.is_dir() and old.name not in names:
            shutil.rmtree(old)
    entries = []
    for i, spec in enumerate(specs):
        failing, f2p, p2p = check_spec(spec)
        buggy = spec.buggy_code()
        test_file = f"test_{spec.fn}.py"
        src = Path(tempfile.mkdtemp(prefix=f"micro-{spec.fn}-"))
        (src / f"{spec.fn}.py").write_text(buggy)
        (src / test_file).write_text(_test_file(spec.fn, spec.visible))
        edit = {"path": f"{spec.fn}.py", "line": spec.line, "old": spec.bug,
                "new": spec.code.splitlines()[spec.line - 1], "failing_test": f2p[0], "test_file": test_file}
        split = split_of(i)
        task_dir = dest / spec.fn
        tmp_task = dest / f".{spec.fn}.tmp"
        write_swe_task(
            tmp_task, name=f"{ORG}/{spec.fn}", instruction=instruction(spec, failing),
            gold_patch=unified_diff(f"{spec.fn}.py", buggy, spec.code),
            test_files={test_file: _test_file(spec.fn, spec.visible, spec.hidden)},
            fail_to_pass=f2p, pass_to_pass=p2p,
            test_cmd=["python3", "-m", "pytest", "-rA", "--color=no", "-p", "no:cacheprovider", "-q", test_file],
            repo_dir=src, description=f"one-line bug in {spec.fn}()", source="lts-micro",
            tags=["micro", split], metadata={"split": split}, verifier_timeout=60, test_timeout=30,
            extra_solution_files={"edit.json": json.dumps(edit, indent=1) + "\n"})
        shutil.rmtree(src)
        if task_dir.exists():
            shutil.rmtree(task_dir)
        tmp_task.rename(task_dir)
        entries.append({"path": spec.fn, "name": f"{ORG}/{spec.fn}", "split": split})
    manifest = {"name": "micro", "description": __doc__.split("\n\n")[0], "tasks": entries}
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return dest


SOURCE = SetWriter("micro", "micro tasks", write_micro_dataset, lambda: [s.fn for s in SPECS])
