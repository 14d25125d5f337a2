"""A SWE-bench Verified export (the dataset's rows as users download them) -> the published Harbor layout, one
task dir per row (``prepare_sandbox.py swebench-export``; docs/tasks.md "A whole SWE-bench Verified export").

Rows come from JSONL (one record a line), a JSON array, or parquet (read with pyarrow, which the control venv
has). Each row is a SWE-bench record: ``instance_id, repo, base_commit, patch, test_patch, FAIL_TO_PASS,
PASS_TO_PASS, version`` (the lists as JSON strings, as the dataset ships them, or lists), and whatever else it
carries (``environment_setup_commit``, ``problem_statement``, ``hints_text``, ``created_at``, ``difficulty``...),
all kept in ``tests/config.json``. The files are those Harbor's SWE-bench adapter writes, through the same
templates as the stand-in tasks (:mod:`.swebench_like`): ``task.toml``, ``instruction.md``,
``environment/Dockerfile`` (``FROM swebench/sweb.eval.x86_64.<id, __ -> _1776_>:latest``, ``WORKDIR /testbed``,
the uv installer line, ``/logs``), ``tests/test.sh`` (swebench's own ``make_test_spec(record).eval_script``, then
``uv run parser.py``), ``tests/parser.py``, ``tests/config.json``, ``solution/solve.sh``.

Writing is resumable: a task dir whose ``tests/config.json`` already holds the row and has every file is kept
as is; others are written into a temporary dir and renamed into place (an interrupted run leaves no half task).
A row that cannot be written (a field missing, swebench's ``make_test_spec`` failing, e.g. it needs an upstream
requirements file and the host is offline: give ``repos`` a folder of checkouts ``<owner>__<name>`` and it is
served from their history) is reported with its reason, never dropped silently.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from tqdm import tqdm

from services.common.paths import DATASETS_DIR

from .swebench_like import PARSER_PY, UV_INSTALL_LINE, published_task_toml, solve_sh_of, test_sh_of, upstream_files_from

REQUIRED = ("instance_id", "repo", "base_commit", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "version")
DATASET = "swebench-verified"
FILES = ("instruction.md", "task.toml", "environment/Dockerfile", "tests/config.json", "tests/parser.py",
         "tests/test.sh", "solution/solve.sh")
_ID = re.compile(r"^[A-Za-z0-9_.-]+__[A-Za-z0-9_.-]+-\d+$")


class ExportError(ValueError):
    """The export file cannot be read at all (a row that cannot be written is a :class:`Written` error)."""


def image_of(instance_id: str) -> str:
    """The SWE-bench environment image of an instance (the name Harbor's Dockerfiles ``FROM``)."""
    return f"swebench/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest".lower()


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "tolist"):          # numpy arrays / scalars out of a parquet reader
        return _jsonable(v.tolist())
    if hasattr(v, "isoformat"):       # timestamps
        return v.isoformat()
    return str(v)


def read_export(path: Path) -> list[dict[str, Any] | str]:
    """The export's rows in order: a dict per record, or a string saying why that line is not one (kept in
    place, so no row is lost silently)."""
    path = Path(path)
    if not path.is_file():
        raise ExportError(f"{path}: no such file")
    name = path.name.lower()
    if name.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq  # noqa: PLC0415 - only for parquet exports
        except ImportError:
            raise ExportError(f"{path}: reading parquet needs pyarrow (`pip install pyarrow`), or export the "
                              "rows as JSONL") from None
        return [_jsonable(r) for r in pq.read_table(path).to_pylist()]
    text = path.read_text()
    if name.endswith(".json") or text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ExportError(f"{path}: not JSON: {e}") from None
        if not isinstance(data, list):
            raise ExportError(f"{path}: a JSON export must be a list of records")
        return [r if isinstance(r, dict) else f"row {i + 1}: not an object" for i, r in enumerate(data)]
    rows: list[dict[str, Any] | str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            rows.append(f"line {n}: not JSON: {e}")
            continue
        rows.append(r if isinstance(r, dict) else f"line {n}: not an object")
    return rows


def row_problem(row: dict[str, Any]) -> str | None:
    missing = [k for k in REQUIRED if row.get(k) in (None, "")]
    if missing:
        return f"missing field(s) {', '.join(missing)}"
    if not _ID.match(str(row["instance_id"])):
        return f"instance_id {row['instance_id']!r} is not <owner>__<repo>-<number>"
    for k in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        v = row[k]
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except json.JSONDecodeError:
                return f"{k} is neither a list nor a JSON string of one"
        if not isinstance(v, list):
            return f"{k} is not a list"
    return None


def task_toml_of(record: dict[str, Any], dataset: str = DATASET) -> str:
    diff = str(record.get("difficulty") or "").replace('"', "'")
    return published_task_toml(dataset, record["instance_id"],
                               f"SWE-bench Verified: {record['repo']} {record['version']}", "SWE-bench",
                               str(record["repo"]).split("/")[-1], diff)


def instruction_of(record: dict[str, Any]) -> str:
    return f"""# Task

{str(record.get('problem_statement') or '').rstrip()}

---

**Repo:** `{record['repo']}`
**Version:** `{record['version']}`
**Base commit:** `{record['base_commit']}`
**Instance ID:** `{record['instance_id']}`
"""


def dockerfile_of(instance_id: str) -> str:
    return f"FROM {image_of(instance_id)}\n\nWORKDIR /testbed\n\n{UV_INSTALL_LINE}\n\nRUN mkdir -p /logs\n"


def eval_script(record: dict[str, Any], repos: Path | None = None) -> str:
    """swebench's own eval script for the record; upstream files it fetches are served from ``repos/<owner>__<name>``
    (a checkout holding the commits) when given, else fetched as swebench does (fails offline)."""
    from swebench.harness.test_spec.test_spec import make_test_spec  # noqa: PLC0415 - heavy; only when writing

    checkout = repos / str(record["repo"]).replace("/", "__") if repos else None
    if checkout is not None and (checkout / ".git").exists():
        with upstream_files_from(checkout, str(record["repo"])):
            return str(make_test_spec(record).eval_script)
    return str(make_test_spec(record).eval_script)


def task_files(record: dict[str, Any], repos: Path | None = None, dataset: str = DATASET) -> dict[str, str]:
    return {"instruction.md": instruction_of(record), "task.toml": task_toml_of(record, dataset),
            "environment/Dockerfile": dockerfile_of(record["instance_id"]),
            "tests/config.json": json.dumps(record, indent=2) + "\n", "tests/parser.py": PARSER_PY,
            "tests/test.sh": test_sh_of(eval_script(record, repos)),
            "solution/solve.sh": solve_sh_of(str(record["patch"]))}


def _written(task: Path, record: dict[str, Any]) -> bool:
    if not all((task / f).is_file() for f in FILES):
        return False
    try:
        return json.loads((task / "tests" / "config.json").read_text()) == record
    except (OSError, json.JSONDecodeError):
        return False


@dataclass
class Written:
    """What :func:`write_export` did with every row, in the export's order."""

    written: list[str] = field(default_factory=list)     # instance ids (re)written now
    kept: list[str] = field(default_factory=list)        # already there, unchanged
    errors: list[tuple[str, str]] = field(default_factory=list)   # (row's id or position, reason)
    ids: list[str] = field(default_factory=list)         # every row that has its task dir, in order

    @property
    def total(self) -> int:
        return len(self.ids) + len(self.errors)


def write_export(rows: Iterable[dict[str, Any] | str], dest: Path, repos: Path | None = None,
                 dataset: str = DATASET, progress: bool = True, force: bool = False) -> Written:
    """Write the published layout of every row under ``dest/<instance_id>/`` (see the module docstring)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    rows = list(rows)
    out = Written()
    seen: set[str] = set()
    for i, row in enumerate(tqdm(rows, desc="write", unit="task", disable=not progress, dynamic_ncols=True)):
        if isinstance(row, str):
            out.errors.append((f"row {i + 1}", row))
            continue
        record = _jsonable(row)
        iid = str(record.get("instance_id") or f"row {i + 1}")
        problem = row_problem(record)
        if problem is None and iid in seen:
            problem = "duplicate instance_id (an earlier row has it)"
        if problem:
            out.errors.append((iid, problem))
            continue
        seen.add(iid)
        task = dest / iid
        if not force and _written(task, record):
            out.kept.append(iid)
            out.ids.append(iid)
            continue
        try:
            files = task_files(record, repos, dataset)
        except Exception as e:  # noqa: BLE001 - swebench's spec for this row failed: say so, go on
            out.errors.append((iid, f"swebench make_test_spec failed: {type(e).__name__}: {str(e)[:300]}"))
            continue
        tmp = Path(tempfile.mkdtemp(prefix=f".{iid}.", dir=dest))
        for rel, text in files.items():
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            p.chmod(0o755 if rel.endswith(".sh") else 0o644)
        tmp.chmod(0o755)
        if task.exists():
            shutil.rmtree(task)
        tmp.rename(task)
        out.written.append(iid)
        out.ids.append(iid)
    return out


# ------------------------------------------------------------------------------------------
# the summary table

INFRA_MARKS = ("infrastructure failure", "validation crashed", "base build failed", "verifier toolchain",
               "delete-the-test patch: infrastructure")


def status_of(entry: dict[str, Any] | None, validate: bool) -> tuple[str, str]:
    """(validated | prepared | excluded | infra | not prepared, reason) of a manifest entry."""
    if not entry:
        return "not prepared", ""
    reason = str(entry.get("reason") or "")
    if entry.get("excluded"):
        return ("infra" if any(m in reason for m in INFRA_MARKS) else "excluded"), reason
    if validate and not (entry.get("validation") or {}).get("ok"):
        return "not prepared", "not validated yet"
    return ("validated" if (entry.get("validation") or {}).get("ok") else "prepared"), ""


def summary_table(rows: list[tuple[str, str, float | None, str]], write_errors: list[tuple[str, str]],
                  width: int = 100) -> str:
    """The table printed at the end: one line per task (id, status, seconds, reason), then the counts."""
    lines = [f"{'instance_id':<34} {'status':<12} {'seconds':>8}  reason", "-" * min(width, 120)]
    for iid, st, secs, reason in rows:
        s = f"{secs:8.1f}" if secs is not None else f"{'':>8}"
        lines.append(f"{iid:<34} {st:<12} {s}  {reason[:width]}".rstrip())
    for iid, reason in write_errors:
        lines.append(f"{iid:<34} {'not written':<12} {'':>8}  {reason[:width]}".rstrip())
    counts: dict[str, int] = {}
    for _, st, _, _ in rows:
        counts[st] = counts.get(st, 0) + 1
    if write_errors:
        counts["not written"] = len(write_errors)
    order = ("validated", "prepared", "excluded", "infra", "not prepared", "not written")
    lines.append("-" * min(width, 120))
    lines.append(", ".join(f"{counts[k]} {k}" for k in order if counts.get(k)) + f" ({len(rows)} selected)")
    return "\n".join(lines)


def select(ids: list[str], only: list[str] | None = None, limit: int | None = None) -> list[str]:
    """The ids to prepare: ``only`` (instance ids, or ``swe-bench/ID``) in the export's order, else all; the first
    ``limit`` of them."""
    if only:
        want = {o.split("/")[-1] for o in only}
        unknown = sorted(want - set(ids))
        if unknown:
            raise ExportError(f"not in the export: {', '.join(unknown)}")
        ids = [i for i in ids if i in want]
    return ids[:limit] if limit else ids


def prepare_summary(manifest: dict[str, Any], slugs: dict[str, str], validate: bool,
                    write_errors: list[tuple[str, str]], log: Callable[[str], None] = print) -> dict[str, int]:
    """Print the table for ``slugs`` (instance id -> manifest key); the counts by status."""
    rows = []
    for iid, slug in slugs.items():
        entry = manifest["tasks"].get(slug)
        st, reason = status_of(entry, validate)
        secs = ((entry or {}).get("validation") or {}).get("seconds")
        rows.append((iid, st, secs, reason))
    log(summary_table(rows, write_errors))
    counts: dict[str, int] = {}
    for _, st, _, _ in rows:
        counts[st] = counts.get(st, 0) + 1
    return counts


def forget_infra(manifest: dict[str, Any], slugs: Iterable[str]) -> list[str]:
    """Manifest entries of ``slugs`` that ended in an infrastructure failure lose their result, so a re-run
    retries them (done tasks, validated or excluded for the task's own fault, are skipped)."""
    retried = []
    for slug in slugs:
        e = manifest["tasks"].get(slug)
        if e and status_of(e, True)[0] == "infra":
            e.pop("validation", None)
            e["task_hash"] = None
            retried.append(slug)
    return retried


# ------------------------------------------------------------------------------------------
# a generated export over the stand-in repositories (tests, bench/bench_swebench_export.py)

STANDINS = ("psf__requests-90003", "psf__requests-90004", "pytest-dev__pytest-90005")


def variant_id(instance_id: str, k: int) -> str:
    """``psf__requests-90003`` -> ``psf__requests-9{k}003`` (k = 0 is the stand-in itself)."""
    head, num = instance_id.rsplit("-", 1)
    return f"{head}-{int(num) + 1000 * k}"


def standin_rows(n: int = 30, standins: Iterable[str] = STANDINS, dataset_dir: Path | None = None,
                 ) -> list[dict[str, Any]]:
    """``n`` SWE-bench rows as the dataset ships them (FAIL_TO_PASS / PASS_TO_PASS JSON strings) over the stand-in
    repositories (datasets/swebench-verified-like, whose images ``build-swebench-like-images`` makes offline):
    the stand-in records round-robin, the k-th copy renamed :func:`variant_id` (its image is the stand-in's under
    that name: ``docker tag``). The requests and pytest stand-ins need no upstream file at writing time."""
    src = dataset_dir or DATASETS_DIR / "swebench-verified-like"
    records = [json.loads((src / s / "tests" / "config.json").read_text()) for s in standins]
    rows = []
    for i in range(n):
        rec = dict(records[i % len(records)])
        rec["instance_id"] = variant_id(rec["instance_id"], i // len(records))
        rows.append(rec)
    return rows
