"""The built-in sample set in the public Harbor / SWE-bench Verified layout (datasets/swebench-sample/).

Generated offline by ``prepare_sandbox.py write-swebench-sample``. Each task is laid out as
Harbor's ``adapters/swebench`` writes one, and behaves like one:

* ``environment/Dockerfile``: ``FROM lts/base:bookworm`` (the offline base image of
  ``setup.sh docker``, standing in for ``swebench/sweb.eval.x86_64.<id>``); it clones
  ``environment/testbed.bundle`` (the repository's **whole history, the fixing commit and a
  later one included**) to ``/testbed`` and resets it to the base commit, as SWE-bench images do:
  ``git log --all`` in the image shows the fix until the history is scrubbed.
* ``tests/config.json``: the SWE-bench record (``instance_id``, ``repo``, ``base_commit``,
  ``FAIL_TO_PASS``, ``PASS_TO_PASS``, ``test_patch``, ``version``).
* ``tests/test.sh``: SWE-bench's eval script: ``git checkout <base_commit> -- <test files>``,
  apply the test patch, run the listed test files, grade FAIL_TO_PASS / PASS_TO_PASS from the
  log in the container (``tests/grade.py``), write ``/logs/verifier/report.json`` and
  ``reward.txt`` (1 iff every FAIL_TO_PASS test passes and every PASS_TO_PASS test still passes).
* ``solution/solve.sh``: writes the gold patch to ``/testbed/solution_patch.diff`` and applies it
  with ``patch --fuzz=5 -p1`` (the gold patch also sits in ``solution/patch.diff``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

BASE_IMAGE = "lts/base:bookworm"


@dataclass
class Spec:
    instance_id: str
    repo: str
    problem: str
    initial: dict[str, str]         # commit 1: the project
    base: dict[str, str]            # commit 2 (the base commit): files changed/added on top
    fix: dict[str, str]             # commit 3 (the fixing commit): source files
    fix_tests: dict[str, str]       # ... and its tests (the test patch)
    later: dict[str, str]           # commit 4: unrelated later work (still "future")
    fail_to_pass: list[str]
    pass_to_pass: list[str]


TEXTKIT_INIT = '''"""Small text helpers."""
import re


def slugify(text):
    """Lower-case words joined by single dashes: 'Hello, World!' -> 'hello-world'."""
    text = re.sub(r"[^a-z0-9]", "-", text.lower())
    return text.strip("-")


def title_case(text):
    return " ".join(w.capitalize() for w in text.split())
'''
TEXTKIT_FIXED = TEXTKIT_INIT.replace('re.sub(r"[^a-z0-9]", "-", text.lower())',
                                     're.sub(r"[^a-z0-9]+", "-", text.lower())')
TEXTKIT_TESTS = '''from textkit import slugify, title_case


def test_simple():
    assert slugify("hello") == "hello"


def test_title_case():
    assert title_case("a tale of two") == "A Tale Of Two"
'''
TEXTKIT_TESTS_FIX = TEXTKIT_TESTS + '''

def test_punctuation_collapses():
    assert slugify("Hello, World!") == "hello-world"


def test_spaces_collapse():
    assert slugify("a  b   c") == "a-b-c"
'''

STATS_INIT = '''"""Summary statistics."""


def mean(values):
    values = list(values)
    return sum(values) / len(values)
'''
STATS_BASE = STATS_INIT + '''

def median(values):
    """Middle value; the mean of the two middle values for an even count."""
    s = sorted(values)
    n = len(s)
    return s[n // 2]
'''
STATS_FIXED = STATS_BASE.replace('''    n = len(s)
    return s[n // 2]''', '''    n = len(s)
    if n % 2 == 0:
        return (s[n // 2 - 1] + s[n // 2]) / 2
    return s[n // 2]''')
STATS_TESTS = '''from stats import mean, median


def test_mean():
    assert mean([1, 2, 3]) == 2


def test_median_odd():
    assert median([3, 1, 2]) == 2
'''
STATS_TESTS_FIX = STATS_TESTS + '''

def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5
'''

INV_INIT = '''"""A tiny inventory."""


class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, qty=1):
        self.items[name] = self.items.get(name, 0) + qty

    def count(self, name):
        return self.items.get(name, 0)
'''
INV_BASE = INV_INIT + '''
    def add_weight(self, name, weight):
        """Record a weight such as '2kg' or '500g' (stored in grams)."""
        self.weights = getattr(self, "weights", {})
        self.weights[name] = int(weight.rstrip("g"))
        return self.weights[name]
'''
INV_FIXED = INV_INIT.replace('"""A tiny inventory."""\n', '"""A tiny inventory."""\nfrom inventory.units import '
                                                          'grams\n') + '''
    def add_weight(self, name, weight):
        """Record a weight such as '2kg' or '500g' (stored in grams)."""
        self.weights = getattr(self, "weights", {})
        self.weights[name] = grams(weight)
        return self.weights[name]
'''
INV_UNITS = '''"""Weight units."""

FACTORS = {"kg": 1000, "g": 1}


def grams(text):
    """'2kg' -> 2000, '500g' -> 500."""
    for unit in ("kg", "g"):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * FACTORS[unit])
    raise ValueError(f"unknown unit in {text!r}")
'''
INV_TESTS = '''from inventory import Inventory


def test_add_and_count():
    inv = Inventory()
    inv.add("apple", 3)
    inv.add("apple")
    assert inv.count("apple") == 4


def test_grams():
    assert Inventory().add_weight("flour", "500g") == 500
'''
INV_TESTS_FIX = INV_TESTS + '''

def test_kilograms():
    assert Inventory().add_weight("sugar", "2kg") == 2000


def test_units_module():
    from inventory.units import grams
    assert grams("1.5kg") == 1500
'''

SETUP_CFG = "[tool:pytest]\naddopts = -p no:cacheprovider\n"

SPECS = [
    Spec("sample__textkit-101", "sample/textkit",
         "`slugify` leaves runs of dashes: `slugify('Hello, World!')` returns `'hello--world'` instead of "
         "`'hello-world'`. Every run of characters that are not letters or digits should become a single dash.",
         {"textkit/__init__.py": TEXTKIT_INIT, "tests/test_textkit.py": TEXTKIT_TESTS, "setup.cfg": SETUP_CFG},
         {"README.md": "# textkit\n\nText helpers.\n"},
         {"textkit/__init__.py": TEXTKIT_FIXED}, {"tests/test_textkit.py": TEXTKIT_TESTS_FIX},
         {"README.md": "# textkit\n\nText helpers. Version 1.1.\n"},
         ["tests/test_textkit.py::test_punctuation_collapses", "tests/test_textkit.py::test_spaces_collapse"],
         ["tests/test_textkit.py::test_simple", "tests/test_textkit.py::test_title_case"]),
    Spec("sample__stats-202", "sample/stats",
         "`median` of an even number of values returns the upper middle value: `median([4, 1, 3, 2])` gives 3. "
         "It should return the mean of the two middle values (2.5).",
         {"stats/__init__.py": STATS_INIT,
          "tests/test_stats.py": STATS_TESTS.replace(", median", "").split("\n\ndef test_median_odd")[0] + "\n",
          "setup.cfg": SETUP_CFG},
         {"stats/__init__.py": STATS_BASE, "tests/test_stats.py": STATS_TESTS},
         {"stats/__init__.py": STATS_FIXED}, {"tests/test_stats.py": STATS_TESTS_FIX},
         {"CHANGES.md": "1.1: median of even counts\n"},
         ["tests/test_stats.py::test_median_even"],
         ["tests/test_stats.py::test_mean", "tests/test_stats.py::test_median_odd"]),
    Spec("sample__inventory-303", "sample/inventory",
         "`Inventory.add_weight` only understands grams: `add_weight('sugar', '2kg')` raises ValueError. "
         "Weights in kilograms ('2kg', '1.5kg') must be converted to grams. Put the unit conversion in a new "
         "module `inventory/units.py` with a function `grams(text)`.",
         {"inventory/__init__.py": INV_INIT, "tests/test_inventory.py": INV_TESTS.split("\n\ndef test_grams")[0] + "\n",
          "setup.cfg": SETUP_CFG},
         {"inventory/__init__.py": INV_BASE, "tests/test_inventory.py": INV_TESTS},
         {"inventory/__init__.py": INV_FIXED, "inventory/units.py": INV_UNITS},
         {"tests/test_inventory.py": INV_TESTS_FIX},
         {"README.md": "# inventory\n"},
         ["tests/test_inventory.py::test_kilograms", "tests/test_inventory.py::test_units_module"],
         ["tests/test_inventory.py::test_add_and_count", "tests/test_inventory.py::test_grams"]),
]

_DATES = ["2024-01-0%dT12:00:00+0000" % d for d in range(1, 6)]


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "Sample Dev",
           "GIT_AUTHOR_EMAIL": "dev@example.org",
           "GIT_COMMITTER_NAME": "Sample Dev", "GIT_COMMITTER_EMAIL": "dev@example.org"}
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    r = subprocess.run(["git", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", *args], cwd=repo,
                       env=env, capture_output=True, text=True, check=True)
    return r.stdout


def _commit(repo: Path, files: dict[str, str], message: str, date: str) -> str:
    for rel, text in files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message, date=date)
    return _git(repo, "rev-parse", "HEAD").strip()


def _diff(repo: Path, a: str, b: str, paths: list[str]) -> str:
    return _git(repo, "diff", "--no-color", "--no-renames", a, b, "--", *paths)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def write_task(spec: Spec, dest: Path) -> Path:
    task = dest / spec.instance_id
    shutil.rmtree(task, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        _git(repo, "init", "-q", "-b", "main")
        _commit(repo, spec.initial, "Initial project", _DATES[0])
        base = _commit(repo, spec.base, "Add features", _DATES[1])
        fix = _commit(repo, {**spec.fix, **spec.fix_tests}, f"Fix {spec.instance_id}", _DATES[2])
        _commit(repo, spec.later, "Later work", _DATES[3])
        gold = _diff(repo, base, fix, sorted(spec.fix))
        test_patch = _diff(repo, base, fix, sorted(spec.fix_tests))
        (task / "environment").mkdir(parents=True)
        _git(repo, "bundle", "create", "-q", str(task / "environment" / "testbed.bundle"), "--all")
    test_files = sorted(spec.fix_tests)
    _write(task / "environment" / "Dockerfile", f"""FROM {BASE_IMAGE}
# Stand-in for swebench/sweb.eval.x86_64.{spec.instance_id}: the repository with its whole history
# (the fixing commit included) at /testbed, checked out at the base commit.
COPY testbed.bundle /tmp/testbed.bundle
RUN git clone -q /tmp/testbed.bundle /testbed && cd /testbed && git reset -q --hard {base} \\
    && rm /tmp/testbed.bundle && mkdir -p /logs
WORKDIR /testbed
""")
    _write(task / "instruction.md", f"""# Task

{spec.problem}

---

**Repo:** `{spec.repo}`
**Version:** `1.0`
**Base commit:** `{base}`
**Instance ID:** `{spec.instance_id}`
""")
    _write(task / "task.toml", f"""schema_version = "1.4"
source = "swebench-sample"

[task]
name = "swebench-sample/{spec.instance_id}"

[metadata]
difficulty = "easy"
category = "debugging"
tags = ["debugging", "swe-bench"]

[agent]
timeout_sec = 600

[verifier]
timeout_sec = 300

[environment]
build_timeout_sec = 600
cpus = 1
memory_mb = 1024
storage_mb = 2048
""")
    record = {"instance_id": spec.instance_id, "repo": spec.repo, "base_commit": base, "version": "1.0",
              "problem_statement": spec.problem, "FAIL_TO_PASS": spec.fail_to_pass,
              "PASS_TO_PASS": spec.pass_to_pass, "test_patch": test_patch, "environment_setup_commit": base}
    _write(task / "tests" / "config.json", json.dumps(record, indent=2) + "\n")
    _write(task / "tests" / "grade.py", GRADE_PY)
    _write(task / "tests" / "test.sh", f"""#!/bin/bash
# SWE-bench evaluation script (the shape of Harbor's adapters/swebench test.sh).
set -uo pipefail
LOG_FILE=/logs/verifier/test-output.log
mkdir -p /logs/verifier
cd /testbed
git status --short
git checkout {base} -- {" ".join(test_files)}
git apply --verbose - <<'EOF_TEST_PATCH'
{test_patch}EOF_TEST_PATCH
python3 -m pytest -rA -p no:cacheprovider {" ".join(test_files)} 2>&1 | tee "$LOG_FILE"
git checkout {base} -- {" ".join(test_files)}
python3 /tests/grade.py "$LOG_FILE" /tests/config.json /logs/verifier/report.json
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
exit 0
""", 0o755)
    _write(task / "solution" / "patch.diff", gold)
    _write(task / "solution" / "solve.sh", f"""#!/bin/bash
set -euo pipefail
cd /testbed
cat > /testbed/solution_patch.diff <<'EOF_GOLD_PATCH'
{gold}EOF_GOLD_PATCH
patch --fuzz=5 -p1 -i /testbed/solution_patch.diff
rm -f /testbed/solution_patch.diff
""", 0o755)
    return task


GRADE_PY = '''"""Grade a pytest -rA log against the SWE-bench record (SWE-bench's get_eval_tests_report):
resolved iff every FAIL_TO_PASS test passed and every PASS_TO_PASS test still passed."""
import json
import re
import sys

log_path, config_path, report_path = sys.argv[1:4]
config = json.load(open(config_path))
status = {}
for line in open(log_path, errors="replace"):
    m = re.match(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\\S+)", line.strip())
    if m:
        status[m.group(2)] = m.group(1)
report = {}
for group in ("FAIL_TO_PASS", "PASS_TO_PASS"):
    tests = config[group]
    ok = [t for t in tests if status.get(t) in ("PASSED", "XFAIL")]
    report[group] = {"success": ok, "failure": [t for t in tests if t not in ok]}
resolved = not report["FAIL_TO_PASS"]["failure"] and not report["PASS_TO_PASS"]["failure"]
out = {config["instance_id"]: {"patch_is_None": False, "patch_exists": True, "patch_successfully_applied": True,
                               "resolved": resolved, "tests_status": report}}
json.dump(out, open(report_path, "w"), indent=2)
print("resolved" if resolved else "not resolved", json.dumps(report))
sys.exit(0 if resolved else 1)
'''


def write_sample(dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    return [write_task(s, dest) for s in SPECS]


class SampleSource:
    """The sample set as a :class:`~services.tasks.sources.TaskSource` (``prepare_sandbox.py
    write-swebench-sample``)."""

    name, noun = "swebench-sample", "SWE-bench-style tasks"

    def write(self, dest: Path) -> list[str]:
        return [p.name for p in write_sample(dest)]


SOURCE = SampleSource()
