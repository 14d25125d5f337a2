"""Command line of ``prepare_sandbox.py`` (also ``python -m services.tasks``).

    prepare_sandbox.py [TARGET ...] [--validate] [--out DIR] [--jobs N] [--force] [--split NAME]
        TARGET: micro (default) | real | a task dir | a folder of tasks | a manifest.json
        Builds each task's scrubbed workspace base (the local backend's cached lower layer) under
        <out>/bases/, and with --validate proves gold = 1, empty = 0 and no git history leak.
        Writes <out>/manifest.json (sources, file hashes, bases, validation results).
    prepare_sandbox.py synth --repo DIR --out DIR --src PKG --tests PATH [...]
        Synthesise SWE-style tasks from any local Python repository.
    prepare_sandbox.py write-micro [--dest datasets/micro]
        Regenerate the micro task set from services/tasks/sources/micro.py.
    prepare_sandbox.py write-multiturn [--dest datasets/multiturn]
        Regenerate the multiturn task set (--preset agent) from services/tasks/sources/multiturn.py.
    prepare_sandbox.py write-generalise [--dest datasets/generalise]
        Regenerate the generalise task set (212 tasks split by function, file and repository:
        services/tasks/sources/generalise.py).
    prepare_sandbox.py grade TASK_DIR --patch FILE [--backend local|docker] [--sandbox SPEC]
        Score a patch (a model's, SWE-bench-harness style) in a fresh sandbox from the task's base:
        prints one JSON object (reward, flags, per-test outcomes); exit 0 iff reward 1.
    prepare_sandbox.py write-swebench-sample [--dest datasets/swebench-sample]
        Regenerate the sample set in the public Harbor / SWE-bench layout (services/tasks/sources/swebench_sample.py).
    prepare_sandbox.py write-swebench-verified-like [--dest datasets/swebench-verified-like] [--only ID]
        Regenerate the stand-in SWE-bench Verified tasks (services/tasks/sources/swebench_like.py; pip downloads the
        pinned sdists; swebench 4.1.0 writes each test.sh).
    prepare_sandbox.py build-swebench-like-images [--only ID]
        Build their SWE-bench-shaped images swebench/sweb.eval.x86_64.<id>:latest on the Docker host, offline
        (cached by content).
    prepare_sandbox.py swebench-export EXPORT [--dest DIR] [--only ID] [--limit N] [--validate] [--jobs N]
        A SWE-bench Verified export (JSONL / JSON / parquet rows): the published Harbor layout for every row under
        --dest, then the selected rows prepared on the docker backend (image built, history scrubbed) and with
        --validate validated in parallel; a progress bar, then a table (validated / excluded with reason / infra).
        Resumable: a re-run keeps written and finished tasks and retries infrastructure failures.
    prepare_sandbox.py --task ROOT --task-id ID [--source DIR|harbor:NAME] [--rock-root R] [--wheel W]
        Fetch one Harbor task byte for byte into ROOT/assets/harbor-tasks/ID/ and record it (source, per-file
        sha256, image ids, the validated --rock-root / --wheel) in ROOT/sandbox-preparation/manifest.json.

    --offline-build (or LTS_OFFLINE_BUILD=1): build task images without network: the Dockerfile line
    `RUN curl -LsSf https://astral.sh/uv/<v>/install.sh | sh` is replaced by an install from the uv wheel
    (recorded in the manifest); any other network step fails naming the line (docs/tasks.md).
    --backend docker: tasks whose repo lives in their image (environment/Dockerfile or
    [environment].docker_image; public Harbor tasks) get their image built and history-scrubbed on
    the Docker host (DOCKER_HOST); --validate then runs in sandboxes of the sandbox manager
    (--sandbox manager, the default with docker), which must run with its docker backend.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Callable

import httpx

from services.common.config import load_config
from services.common.paths import DATASETS_DIR, REPO_ROOT
from services.sandbox.client import SandboxManagerClient
from services.sandbox.docker_images import OFFLINE_ENV_FLAG, docker_client

from .grading.bases import ImageRef
from .grading.cleangrade import grade_patch
from .preparation.hostsandbox import host_sandbox_factory
from .preparation.manifest import load_manifest, save_manifest
from .preparation.prepare import base_of, prepare_tasks
from .sources import TaskSource, generalise, micro, multiturn, swebench_export, swebench_like, swebench_sample
from .sources.fetch import FetchError, fetch_task
from .sources.real import build_real
from .sources.synth import synthesize
from .task import TaskError, load_dataset, load_task

DEFAULT_OUT = REPO_ROOT / "sandbox-preparation"


def _manager_factory():
    """Sandboxes from the sandbox manager (services.sandbox; config/harbor.yaml ``sandbox:``)."""
    clients: dict = {}

    async def factory(base):
        loop = asyncio.get_running_loop()  # one HTTP client per event loop (one per target)
        if loop not in clients:
            clients[loop] = SandboxManagerClient.from_config()
        if isinstance(base, ImageRef):   # docker backend: the task's scrubbed image
            return await clients[loop].create(image=str(base), limits=base.limits, network=base.network)
        return await clients[loop].create(base)
    return factory


def _factory(spec: str):
    """``host`` (dev fallback, no isolation), ``manager`` (the sandbox manager) or
    ``module:callable`` (an async callable: base_dir -> Sandbox)."""
    if spec == "host":
        return host_sandbox_factory
    if spec == "manager":
        return _manager_factory()
    mod, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"--sandbox must be 'host', 'manager' or 'module:callable', got {spec!r}")
    return getattr(importlib.import_module(mod), attr)


def _check_manager_backend(backend: str) -> None:
    """--sandbox manager with --backend docker runs in the manager's containers: refuse at once, before any image
    is built, unless the manager at config/harbor.yaml ``sandbox.base_url`` runs that backend (its /health says)."""
    s = load_config("harbor").get("sandbox") or {}
    if s.get("flavor", "local") != "local":
        return   # a ROCK admin
    url = str(s.get("base_url") or "http://127.0.0.1:18080").rstrip("/")
    fix = (f"`bash serve.sh admin --backend {backend}` (or `python configure.py --sandbox-backend {backend}`, then "
           "`bash serve.sh admin`)")
    try:
        running = httpx.get(url + "/health", timeout=10).json()["result"]["backend"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        raise SystemExit(f"prepare_sandbox.py: --backend {backend} needs a sandbox manager with the {backend} "
                         f"backend at {url} (config/harbor.yaml sandbox.base_url), and none answers there. Fix: "
                         f"start {fix}") from None
    if running != backend:
        raise SystemExit(f"prepare_sandbox.py: the sandbox manager at {url} runs the {running!r} backend, and "
                         f"--backend {backend} needs its {backend} backend. Fix: stop that manager and start {fix}, "
                         "or point config/harbor.yaml sandbox.base_url at one that runs it")


def cmd_prepare(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="prepare_sandbox.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="*", default=["micro"], help="micro | real | task dir | folder | manifest")
    ap.add_argument("--validate", action="store_true", help="prove gold=1, empty=0, scrubbed history")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="preparation dir (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel validations (default: %(default)s)")
    ap.add_argument("--force", action="store_true", help="rebuild / revalidate even if up to date")
    ap.add_argument("--split", help="only this split of a manifest (e.g. train, heldout)")
    ap.add_argument("--only", action="append", help="real: only these packages (repeatable)")
    ap.add_argument("--backend", default="local", choices=["local", "docker"],
                    help="docker: build and scrub task images on the Docker host (default: %(default)s)")
    ap.add_argument("--sandbox", default=None,
                    help="sandbox for --validate: 'host' (dev fallback, NO isolation; default with the local "
                         "backend), 'manager' (services.sandbox, config/harbor.yaml `sandbox:`; default with "
                         "docker) or module:callable")
    ap.add_argument("--verifier-timeout", type=float, help="override [verifier].timeout_sec")
    ap.add_argument("--strict", action="store_true", help="exit 1 when any task is excluded")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--offline-build", action="store_true",
                    help="docker: substitute the uv installer line from the uv wheel (see docs/tasks.md)")
    a = ap.parse_args(argv)
    _offline(a.offline_build)
    sandbox = a.sandbox or ("manager" if a.backend == "docker" else "host")
    if a.validate and sandbox == "manager" and a.backend == "docker":
        _check_manager_backend(a.backend)

    factory = _factory(sandbox) if a.validate else None
    excluded = 0
    for target in a.targets:
        if target == "micro":
            path, name = DATASETS_DIR / "micro", "micro"
        elif target == "real":
            path, name = build_real(a.out, only=a.only, force=a.force), "real"
        else:
            path, name = Path(target), Path(target).stem
        ds = load_dataset(path, split=a.split)
        for p, reason in ds.errors:
            print(f"INVALID {p}: {reason}")
        manifest = asyncio.run(prepare_tasks(
            ds.tasks, a.out, validate=a.validate, factory=factory, jobs=a.jobs, force=a.force,
            load_errors=ds.errors, progress=not a.no_progress, verifier_timeout=a.verifier_timeout,
            dataset=name, prune=a.split is None, backend=a.backend))
        excluded += sum(1 for e in manifest["tasks"].values() if e.get("excluded") and e.get("dataset") == name)
    return 1 if (a.strict and excluded) else 0


def cmd_synth(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="prepare_sandbox.py synth",
                                 description="Synthesise SWE-style tasks from a local Python repo "
                                             "(its tests run on the host).")
    ap.add_argument("--repo", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True, help="folder for the task dirs")
    ap.add_argument("--src", action="append", required=True, help="package dir/file to mutate (repeatable)")
    ap.add_argument("--tests", action="append", required=True, help="test file/dir (repeatable)")
    ap.add_argument("--pythonpath", default=".", help="PYTHONPATH relative to the repo root")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--org", default="synth")
    ap.add_argument("--package", help="name used in task names and instructions (default: repo dir name)")
    ap.add_argument("--max-f2p", type=int, default=20)
    ap.add_argument("--p2p", type=int, default=10)
    ap.add_argument("--validate", action="store_true", help="also prepare + validate into --prep-out")
    ap.add_argument("--prep-out", type=Path, default=DEFAULT_OUT)
    a = ap.parse_args(argv)
    res = synthesize(a.repo, a.out, src=a.src, tests=a.tests, pythonpath=a.pythonpath, n=a.n, seed=a.seed,
                     org=a.org, package=a.package, max_f2p=a.max_f2p, n_p2p=a.p2p)
    print(f"{len(res.tasks)} task(s) written to {a.out} (tried {res.tried} mutations, rejected {res.rejected})")
    if a.validate and res.tasks:
        return cmd_prepare([str(a.out), "--validate", "--out", str(a.prep_out)])
    return 0 if res.tasks else 1


def write_command(source: TaskSource) -> Callable[[list[str]], int]:
    """``prepare_sandbox.py write-<name> [--dest DIR]``: (re)write one generated set (a TaskSource)."""
    def cmd(argv: list[str]) -> int:
        ap = argparse.ArgumentParser(prog=f"prepare_sandbox.py write-{source.name}")
        ap.add_argument("--dest", type=Path, default=DATASETS_DIR / source.name)
        a = ap.parse_args(argv)
        names = source.write(a.dest)
        print(f"{len(names)} {source.noun} written to {a.dest}")
        return 0 if names else 1
    return cmd


def _offline(flag: bool) -> None:
    if flag:
        os.environ[OFFLINE_ENV_FLAG] = "1"   # read where the image is built (docker_images)


def cmd_write_swebench_like(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="prepare_sandbox.py write-swebench-verified-like")
    ap.add_argument("--dest", type=Path, default=swebench_like.DEFAULT_DEST)
    ap.add_argument("--cache", type=Path, default=swebench_like.DEFAULT_CACHE, help="downloads, repos, wheels")
    ap.add_argument("--only", action="append", help="only this instance id (repeatable)")
    a = ap.parse_args(argv)
    names = swebench_like.SOURCE.write(a.dest, a.cache, a.only)
    print(f"{len(names)} {swebench_like.SOURCE.noun} written to {a.dest}")
    return 0 if names else 1


def cmd_build_swebench_like(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="prepare_sandbox.py build-swebench-like-images")
    ap.add_argument("--dest", type=Path, default=swebench_like.DEFAULT_DEST, help="the task files (base-commit check)")
    ap.add_argument("--cache", type=Path, default=swebench_like.DEFAULT_CACHE)
    ap.add_argument("--only", action="append", help="only this instance id (repeatable)")
    a = ap.parse_args(argv)
    for image in swebench_like.build_images(docker_client(), a.cache, a.dest, a.only):
        print(image)
    return 0


def cmd_fetch(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="prepare_sandbox.py --task ROOT --task-id ID",
                                 description="Copy one Harbor task byte for byte into ROOT/assets/harbor-tasks/ID/ "
                                             "and record it in ROOT/sandbox-preparation/manifest.json "
                                             "(services/tasks/sources/fetch.py).")
    ap.add_argument("--task", type=Path, required=True, metavar="ROOT", help="the seed system's root")
    ap.add_argument("--task-id", required=True, help="the task's directory name, e.g. sympy__sympy-19637")
    ap.add_argument("--source", default=None,
                    help="a local Harbor dataset folder or checkout (default: datasets/), or harbor:NAME[@VERSION] "
                         "(Harbor's registry, through `harbor download`)")
    ap.add_argument("--registry-path", type=Path, help="harbor: a local registry.json (offline registry)")
    ap.add_argument("--rock-root", type=Path, help="a ROCK checkout (validated: must exist; recorded)")
    ap.add_argument("--wheel", type=Path, help="a wheel to install in the sandboxes (validated; recorded)")
    a = ap.parse_args(argv)
    try:
        entry = fetch_task(a.task, a.task_id, a.source, a.rock_root, a.wheel, a.registry_path)
    except FetchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for w in entry["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    print(json.dumps({k: entry[k] for k in ("task_id", "dest", "source", "images", "task_hash")}, indent=1))
    manifest = a.task / "sandbox-preparation" / "manifest.json"
    print(f"{len(entry['files'])} file(s) -> {entry['dest']}; manifest {manifest}")
    return 0


def cmd_grade(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="prepare_sandbox.py grade",
                                 description="Grade a patch against a task in a fresh sandbox from the task's base "
                                             "(services/tasks/grading/cleangrade.py); prints one JSON object.")
    ap.add_argument("task", type=Path, help="task dir (Harbor layout)")
    ap.add_argument("--patch", required=True, help="git / unified diff against the task's base ('-' = stdin)")
    ap.add_argument("--backend", default="local", choices=["local", "docker"],
                    help="local: the task's base dir; docker: the task's scrubbed image (default: %(default)s)")
    ap.add_argument("--sandbox", default="manager",
                    help="'manager' (services.sandbox, config/harbor.yaml `sandbox:`; default), "
                         "'host' (dev only, NO isolation: never for untrusted patches) or module:callable")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="preparation dir (default: %(default)s)")
    ap.add_argument("--verifier-timeout", type=float, help="override [verifier].timeout_sec")
    ap.add_argument("--offline-build", action="store_true",
                    help="docker: substitute the uv installer line from the uv wheel (see docs/tasks.md)")
    a = ap.parse_args(argv)
    _offline(a.offline_build)

    try:
        task = load_task(a.task)
    except TaskError as e:
        print(json.dumps({"error": "TaskError", "reason": str(e)}))
        return 2
    try:
        patch = sys.stdin.buffer.read() if a.patch == "-" else Path(a.patch).read_bytes()
    except OSError as e:
        print(json.dumps({"error": "PatchReadError", "reason": f"{a.patch}: {e}"}))
        return 2
    if a.sandbox == "manager" and a.backend == "docker":
        _check_manager_backend(a.backend)
    kw = {"backend": "docker"} if a.backend == "docker" else {}
    manifest = asyncio.run(prepare_tasks([task], a.out, progress=False, log=lambda s: None, **kw))
    entry = manifest["tasks"].get(task.slug, {})
    if entry.get("excluded") or not entry.get("base"):
        print(json.dumps({"error": "BaseBuildError", "reason": entry.get("reason")}))
        return 2
    res = asyncio.run(grade_patch(task, base_of(entry), _factory(a.sandbox), patch, timeout=a.verifier_timeout))
    report = res.report if isinstance(res.report, dict) else {}
    if len(report) == 1 and isinstance(next(iter(report.values())), dict):  # SWE-bench's {instance_id: report}
        report = next(iter(report.values()))
    tests = {t: st for group in (report.get("tests_status") or {}).values() if isinstance(group, dict)
             for st, ids in (("PASSED", group.get("success") or []), ("FAILED", group.get("failure") or []))
             for t in ids}
    tests.update(res.failed_tests)
    print(json.dumps({"task": task.name, "reward": res.reward, "rewards": res.rewards, "flags": res.flags,
                      "tests": tests, "error": res.error, "reason": res.reason,
                      "seconds": round(res.duration_s, 3)}, indent=1))
    return 0 if res.reward == 1.0 else 1


def cmd_swebench_export(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="prepare_sandbox.py swebench-export",
                                 description="Write the published Harbor layout of every row of a SWE-bench Verified "
                                             "export, then prepare (and --validate) the selected rows on the docker "
                                             "backend (services/tasks/sources/swebench_export.py; docs/tasks.md).")
    ap.add_argument("export", type=Path, help="the dataset's rows: .jsonl, .json (a list) or .parquet")
    ap.add_argument("--dest", type=Path, default=DATASETS_DIR / swebench_export.DATASET,
                    help="where the task dirs go (default: %(default)s)")
    ap.add_argument("--dataset", default=swebench_export.DATASET, help="task.toml source and name prefix")
    ap.add_argument("--repos", type=Path, help="checkouts <owner>__<name>: upstream files swebench's make_test_spec "
                                               "fetches are served from their history (offline hosts)")
    ap.add_argument("--write-only", action="store_true", help="only write the task dirs")
    ap.add_argument("--only", action="append", help="prepare only this instance id (repeatable)")
    ap.add_argument("--limit", type=int, help="prepare only the first N written rows (after --only)")
    ap.add_argument("--validate", action="store_true", help="prove gold 1, empty 0, delete-the-test 0, history clean")
    ap.add_argument("--jobs", type=int, default=2, help="parallel tasks (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="preparation dir (default: %(default)s)")
    ap.add_argument("--sandbox", default="manager", help="'manager' (default) or module:callable, as for prepare")
    ap.add_argument("--force", action="store_true", help="rewrite and redo everything")
    ap.add_argument("--verifier-timeout", type=float, help="override [verifier].timeout_sec")
    ap.add_argument("--offline-build", action="store_true",
                    help="substitute the uv installer line from the uv wheel (see docs/tasks.md)")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    _offline(a.offline_build)
    try:
        rows = swebench_export.read_export(a.export)
    except swebench_export.ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    w = swebench_export.write_export(rows, a.dest, a.repos, a.dataset, progress=not a.no_progress, force=a.force)
    print(f"{len(w.ids)} of {w.total} rows have their task dir in {a.dest} ({len(w.written)} written, "
          f"{len(w.kept)} already there), {len(w.errors)} not written")
    if a.write_only:
        for iid, reason in w.errors:
            print(f"NOT WRITTEN {iid}: {reason}")
        return 1 if w.errors else 0
    try:
        ids = swebench_export.select(w.ids, a.only, a.limit)
    except swebench_export.ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tasks = [load_task(a.dest / i) for i in ids]
    slugs = {i: t.slug for i, t in zip(ids, tasks)}
    manifest = load_manifest(a.out)
    retried = swebench_export.forget_infra(manifest, slugs.values())
    if retried:
        save_manifest(a.out, manifest)
        print(f"retrying {len(retried)} task(s) that ended in an infrastructure failure")
    if a.validate and a.sandbox == "manager":
        _check_manager_backend("docker")
    factory = _factory(a.sandbox) if a.validate else None
    manifest = asyncio.run(prepare_tasks(
        tasks, a.out, validate=a.validate, factory=factory, jobs=a.jobs, force=a.force, backend="docker",
        progress=not a.no_progress, verifier_timeout=a.verifier_timeout, dataset=a.dataset, log=lambda s: None))
    counts = swebench_export.prepare_summary(manifest, slugs, a.validate, w.errors)
    done = counts.get("validated" if a.validate else "prepared", 0)
    return 0 if done == len(ids) and not w.errors else 1


# The built-in sets' generators (sources/): each gets `write-<name>`.
SOURCES: tuple[TaskSource, ...] = (micro.SOURCE, multiturn.SOURCE, generalise.SOURCE, swebench_sample.SOURCE,
                                   swebench_like.SOURCE)
# argv[0] -> handler of the rest; anything else: --task ROOT --task-id ID (fetch one task), else prepare TARGETs.
COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "grade": cmd_grade,
    "synth": cmd_synth,
    **{f"write-{s.name}": write_command(s) for s in SOURCES},
    "write-swebench-verified-like": cmd_write_swebench_like,   # + --cache / --only
    "build-swebench-like-images": cmd_build_swebench_like,
    "swebench-export": cmd_swebench_export,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]](argv[1:])
    if any(x == "--task" or x.startswith("--task=") for x in argv):
        return cmd_fetch(argv)
    return cmd_prepare(argv)


if __name__ == "__main__":
    sys.exit(main())
