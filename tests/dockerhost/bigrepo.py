"""A SWE-bench-shaped task image with a real-scale history, made offline (test and bench fixture).

``big_image(client)`` builds (once per fixture key: cached on the Docker engine by tag) an image
``FROM lts/base:bookworm`` with

* ``/testbed``: a git repo whose history is made by ``git fast-import``: ``commits`` commits, the
  first ones adding ``blob_mb`` MB of incompressible blobs that a later commit deletes (so the pack
  is big but the base tree is small), then the **base** commit (a tiny ``calc`` package with a
  bug), the **fix** commit, a commit adding ``requirements-dev.txt`` (SWE-bench's
  ``environment_setup_commit`` lives after the base like this) and more later commits. The fix
  and everything later stay reachable the ways real images keep them: branch ``upstream``, tag
  ``v2.0``, ``refs/remotes/origin/main``, the reflog of ``main`` (reset from the last commit to the
  base), ``ORIG_HEAD``, a stash, ``packed-refs``. ``main`` is checked out at the base.
* ``/opt/miniconda3/bin/activate``: defines a ``conda`` function whose ``conda activate testbed``
  succeeds (the shape of SWE-bench's images), ``WORKDIR /testbed``.

``write_task(dest, info)`` writes a Harbor task (schema 1.0 layout) whose ``environment/Dockerfile``
is ``FROM`` that image, whose ``solution/solve.sh`` does ``cd /testbed && git apply`` and whose
``tests/test.sh`` runs in ``/testbed`` (conda activate, ``git checkout <base> -- tests``, the test
patch, pytest, reward.txt).
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from pathlib import Path
from typing import Any

BASE_IMAGE = "lts/base:bookworm"
FIXTURE_VERSION = "1"

CALC_BUGGY = 'def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n'
CALC_FIXED = 'def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n'
TEST_BASE = 'from calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n'
TEST_FULL = TEST_BASE + '\n\ndef test_add():\n    from calc import add\n    assert add(2, 3) == 5\n'
REQS_DEV = "pytest\n"

ACTIVATE = """\
# stand-in for miniconda's activate: `source /opt/miniconda3/bin/activate; conda activate testbed`
conda() {
  case "$1" in
    activate) export CONDA_DEFAULT_ENV="${2:-base}"; return 0 ;;
    deactivate) unset CONDA_DEFAULT_ENV; return 0 ;;
    *) echo "conda stub: unsupported: $*" >&2; return 1 ;;
  esac
}
"""


def fixture_key(commits: int, blob_mb: int) -> str:
    return hashlib.sha256(f"{FIXTURE_VERSION}\0{commits}\0{blob_mb}".encode()).hexdigest()[:12]


def image_tag(commits: int, blob_mb: int) -> str:
    return f"lts-test/bigrepo:{fixture_key(commits, blob_mb)}"


def _git(args: list[str], cwd: Path, input: bytes | None = None) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_COMMITTER_NAME": "dev",
           "GIT_COMMITTER_EMAIL": "dev@example.com", "GIT_AUTHOR_DATE": "2020-01-01T00:00:00+0000",
           "GIT_COMMITTER_DATE": "2020-01-01T00:00:00+0000"}
    r = subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, input=input,
                       capture_output=True, env=env)
    if r.returncode:
        raise RuntimeError(f"git {args[:2]}: {r.stderr.decode(errors='replace')[-2000:]}")
    return r.stdout.decode().strip()


def _stream(commits: int, blob_mb: int) -> tuple[bytes, dict[str, int]]:
    """The fast-import stream and the marks of the named commits."""
    rnd = random.Random(1234)
    out: list[bytes] = []
    mark = 0
    when = 1_500_000_000

    def data(b: bytes) -> None:
        out.append(b"data %d\n" % len(b) + b + b"\n")

    def commit(msg: str, ops: list[bytes]) -> int:
        nonlocal mark, when
        mark += 1
        when += 60
        out.append(b"commit refs/heads/main\nmark :%d\n" % mark)
        out.append(b"author dev <dev@example.com> %d +0000\ncommitter dev <dev@example.com> %d +0000\n" % (when, when))
        data(msg.encode())
        out.extend(ops)
        return mark

    def put(path: str, content: bytes) -> bytes:
        return b"M 100644 inline " + path.encode() + b"\n" + b"data %d\n" % len(content) + content + b"\n"

    history = commits - 5   # base, fix, setup, 2 later
    n_blobs = blob_mb
    for i in range(history):
        ops = [put("history.txt", f"change {i}\n".encode())]
        if i < n_blobs:
            ops.append(put(f"assets/blob{i:04d}.bin", rnd.randbytes(1 << 20)))
        if i == history - 1:
            ops.append(b"D assets\n")
        commit(f"history {i}", ops)
    marks = {}
    marks["base"] = commit("base: calc with add and mul", [
        put("calc/__init__.py", CALC_BUGGY.encode()), put("tests/test_calc.py", TEST_BASE.encode()),
        put("setup.cfg", b"[metadata]\nname = calc\n")])
    marks["fix"] = commit("fix add (the gold patch and its test)", [
        put("calc/__init__.py", CALC_FIXED.encode()), put("tests/test_calc.py", TEST_FULL.encode())])
    marks["setup"] = commit("requirements-dev.txt (environment_setup_commit)",
                            [put("requirements-dev.txt", REQS_DEV.encode())])
    for i in range(2):
        marks[f"later{i}"] = commit(f"later {i}", [put("history.txt", f"later {i}\n".encode())])
    return b"".join(out), marks


def make_repo(dest: Path, commits: int = 20_000, blob_mb: int = 160) -> dict[str, Any]:
    """The full-history repo at ``dest`` (see the module docstring); returns the named commit ids."""
    dest.mkdir(parents=True)
    _git(["init", "-q"], dest)
    stream, marks = _stream(commits, blob_mb)
    stream += b"".join(b"get-mark :%d\n" % m for m in marks.values())
    _git(["fast-import", "--quiet", "--cat-blob-fd=1", "--export-marks=.git/lts-marks"], dest, input=stream)
    ids = dict(line.split() for line in (dest / ".git" / "lts-marks").read_text().splitlines())
    (dest / ".git" / "lts-marks").unlink()
    sha = {name: ids[f":{m}"] for name, m in marks.items()}
    _git(["checkout", "-q", "-f", "main"], dest)
    _git(["branch", "upstream", sha["later1"]], dest)
    _git(["tag", "-a", "v2.0", "-m", "release with the fix", sha["fix"]], dest)
    _git(["update-ref", "refs/remotes/origin/main", sha["later1"]], dest)
    _git(["config", "core.logAllRefUpdates", "true"], dest)
    _git(["reset", "-q", "--hard", sha["base"]], dest)          # reflog of main + ORIG_HEAD: the last commit
    (dest / "calc" / "__init__.py").write_text(CALC_FIXED)      # a stash holding the fix
    _git(["stash", "-q"], dest)
    _git(["pack-refs", "--all"], dest)
    return sha


def _image_labels(client: Any, tag: str) -> dict[str, str] | None:
    try:
        return client.images.get(tag).labels or {}
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound
        return None


def big_image(client: Any, commits: int = 20_000, blob_mb: int = 160, log=print) -> dict[str, Any]:
    """Build (or find) the fixture image; returns {"image", "base", "fix", "setup", "later1", "pack_mb"}."""
    tag = image_tag(commits, blob_mb)
    labels = _image_labels(client, tag)
    if labels is None:
        with tempfile.TemporaryDirectory(prefix="lts-bigrepo-") as d:
            ctx = Path(d)
            log(f"[bigrepo] generating {commits} commits with {blob_mb} MB of blobs ...")
            sha = make_repo(ctx / "testbed", commits, blob_mb)
            pack_mb = sum(p.stat().st_size for p in (ctx / "testbed/.git/objects/pack").glob("*.pack")) >> 20
            (ctx / "activate").write_text(ACTIVATE)
            lab = " ".join(f"lts.fixture.{k}={v}" for k, v in sha.items())
            (ctx / "Dockerfile").write_text(textwrap.dedent(f"""\
                FROM {BASE_IMAGE}
                COPY activate /opt/miniconda3/bin/activate
                COPY testbed /testbed
                RUN mkdir -p /logs
                WORKDIR /testbed
                LABEL {lab} lts.fixture.pack_mb={pack_mb} lts.fixture.commits={commits}
                """))
            log(f"[bigrepo] docker build {tag} (pack {pack_mb} MB) ...")
            client.images.build(path=str(ctx), tag=tag, rm=True, forcerm=True, network_mode="none",
                                labels={"lts.test": "bigrepo"})
        labels = _image_labels(client, tag) or {}
    out: dict[str, Any] = {k.removeprefix("lts.fixture."): v for k, v in labels.items()
                           if k.startswith("lts.fixture.")}
    out["image"] = tag
    out["pack_mb"] = int(out.get("pack_mb", 0))
    return out


def _diff(path: str, old: str, new: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        a, b = Path(d, "a"), Path(d, "b")
        a.write_text(old)
        b.write_text(new)
        r = subprocess.run(["git", "diff", "--no-index", "--no-color", str(a), str(b)], capture_output=True, text=True)
    lines = r.stdout.splitlines()[2:]   # drop "diff --git" and "index" lines with the temp names
    body = "\n".join(l for l in lines if not l.startswith(("--- ", "+++ ")))
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n{body}\n"


def write_task(dest: Path, info: dict[str, Any], name: str = "bigrepo__calc-1",
               verifier_network: str = "no-network", agent_network: str = "public",
               test_extra: str = "") -> Path:
    """A Harbor task over the fixture image (see module docstring); ``test_extra``: shell run by
    test.sh after the tests, before the reward is written (e.g. a parser run)."""
    base = info["base"]
    dest.mkdir(parents=True, exist_ok=True)
    for sub in ("environment", "solution", "tests"):
        (dest / sub).mkdir(exist_ok=True)
    (dest / "instruction.md").write_text("calc.add(2, 3) returns -1; it must return 5. Fix calc/__init__.py.\n")
    (dest / "task.toml").write_text(textwrap.dedent(f"""\
        schema_version = "1.0"

        [task]
        name = "bigrepo/{name}"
        description = "SWE-bench-shaped fixture with a real-scale history"

        [metadata]
        difficulty = "easy"
        category = "debugging"
        tags = ["debugging", "swe-bench"]

        [agent]
        timeout_sec = 600
        network_mode = "{agent_network}"

        [verifier]
        timeout_sec = 600
        network_mode = "{verifier_network}"

        [environment]
        build_timeout_sec = 600
        cpus = 1
        memory_mb = 1024
        storage_mb = 2048
        """))
    (dest / "environment" / "Dockerfile").write_text(
        f"FROM {info['image']}\nWORKDIR /testbed\nRUN mkdir -p /logs\n")
    gold = _diff("calc/__init__.py", CALC_BUGGY, CALC_FIXED)
    test_patch = _diff("tests/test_calc.py", TEST_BASE, TEST_FULL)
    (dest / "solution" / "solve.sh").write_text(
        f"#!/bin/bash\nset -euo pipefail\ncd /testbed\ngit apply - <<'EOF_GOLD'\n{gold}EOF_GOLD\n")
    (dest / "tests" / "config.json").write_text(json.dumps({
        "instance_id": name, "repo": "lts/calc", "base_commit": base, "patch": gold, "test_patch": test_patch,
        "FAIL_TO_PASS": ["tests/test_calc.py::test_add"], "PASS_TO_PASS": ["tests/test_calc.py::test_mul"],
        "version": "1.0", "environment_setup_commit": info.get("setup", base)}, indent=1))
    (dest / "tests" / "test.sh").write_text(textwrap.dedent(f"""\
        #!/bin/bash
        set -uo pipefail
        source /opt/miniconda3/bin/activate
        conda activate testbed
        mkdir -p /logs/verifier
        cd /testbed
        git checkout {base} -- tests/test_calc.py
        git apply - <<'EOF_TEST'
        {{patch}}EOF_TEST
        python3 -m pytest -rA -p no:cacheprovider tests/test_calc.py > /logs/verifier/test-output.log 2>&1
        rc=$?
        git checkout {base} -- tests/test_calc.py
        {{extra}}
        if [ $rc -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
        exit 0
        """).replace("{patch}", test_patch).replace("{extra}", test_extra))
    return dest


def remove_images(client: Any) -> None:
    """Remove every fixture image (``lts.test=bigrepo``)."""
    for img in client.images.list(filters={"label": "lts.test=bigrepo"}):
        for t in img.tags:
            client.images.remove(t, force=True)


# a SWE-bench-style parser's dependency contract (PEP 723, as Harbor's adapter writes it); it checks
# the versions uv resolved and writes report.json
PARSER = """\
# /// script
# requires-python = ">=3.9"
# dependencies = ["swebench==4.1.0", "datasets==2.16.1"]
# ///
import json
import sys

import datasets
import swebench
from swebench.harness.constants import FAIL_TO_PASS

print("parser", swebench.__version__, datasets.__version__, FAIL_TO_PASS)
json.dump({"swebench": swebench.__version__, "datasets": datasets.__version__}, open("/logs/verifier/report.json", "w"))
sys.exit(0 if (swebench.__version__, datasets.__version__) == ("4.1.0", "2.16.1") else 1)
"""
UV_VERSION = "0.7.13"   # the version the published Dockerfiles install


def uv_binary(dest: Path, wheel: str | None = None) -> Path:
    """The ``uv`` binary from its PyPI wheel (``pip download`` on the host unless ``wheel`` is given)."""
    if not wheel:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", f"uv=={UV_VERSION}", "--no-deps",
                        "--only-binary=:all:", "--platform", "manylinux_2_17_x86_64", "-d", str(dest)], check=True)
        wheel = str(next(dest.glob("uv-*.whl")))
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith("/scripts/uv"))
        out = dest / "uv"
        out.write_bytes(z.read(name))
    out.chmod(0o755)
    return out


def write_parser_task(dest: Path, info: dict[str, Any], uv: Path, name: str = "bigrepo__calc-parser") -> Path:
    """The fixture task with ``[verifier] network_mode = "public"`` whose test.sh also needs
    ``uv run /tests/parser.py`` (swebench + datasets) to succeed; uv copied into its image."""
    write_task(dest, info, name=name, verifier_network="public",
               test_extra="uv run --quiet /tests/parser.py >> /logs/verifier/test-output.log 2>&1 || rc=1")
    (dest / "environment" / "uv").write_bytes(uv.read_bytes())
    (dest / "environment" / "uv").chmod(0o755)
    (dest / "environment" / "Dockerfile").write_text(f"FROM {info['image']}\nCOPY uv /usr/local/bin/uv\n"
                                                     "WORKDIR /testbed\nRUN mkdir -p /logs\n")
    (dest / "tests" / "parser.py").write_text(PARSER)
    return dest
