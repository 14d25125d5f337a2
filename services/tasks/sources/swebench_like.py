"""Stand-in SWE-bench Verified tasks in the published Harbor layout, made offline
(``prepare_sandbox.py write-swebench-verified-like`` / ``build-swebench-like-images``; docs/tasks.md).

Each stand-in is a SWE-bench *record* written by hand for real code: the code base is a pinned
PyPI sdist of a project SWE-bench Verified uses (flask, requests, pytest), the bug is a
realistic regression planted in it, the fix is the released code, and the test patch adds a test
to the project's own test file. What the published tasks have, these have:

* the task files (``datasets/swebench-verified-like/<instance_id>/``): ``task.toml`` schema 1.0
  with a ``[task]`` table, ``environment/Dockerfile`` (``FROM swebench/sweb.eval.x86_64.<id>``,
  ``WORKDIR /testbed``, the uv installer line verbatim, ``RUN mkdir -p /logs``),
  ``tests/config.json`` (the record), ``tests/test.sh`` whose evaluation part is **swebench 4.1.0's
  own** ``make_test_spec(record).eval_script``, ``tests/parser.py`` (PEP 723 header asking for
  ``swebench==4.1.0`` and ``datasets==2.16.1``, run with ``uv run``; grades with swebench's
  ``get_logs_eval`` / ``get_eval_tests_report``), ``solution/solve.sh``;
* the image ``swebench/sweb.eval.x86_64.<id>:latest`` (:func:`build_image`), shaped like
  SWE-bench's: ``/opt/miniconda3/bin/activate`` defining ``conda activate testbed``, the env
  ``/opt/miniconda3/envs/testbed`` with the repo installed by the spec's own install command,
  ``WORKDIR /testbed``, and the repository with a long synthetic history (``git fast-import``:
  ≥ 20,000 commits, a pack ≥ 150 MB of filler blobs that a commit before the base deletes), the
  base commit checked out, the fix, the ``environment_setup_commit`` and later commits reachable
  through a branch, tags and the reflog, as in real SWE-bench images.

The history is deterministic (fixed dates, seeded filler), so the commit ids in the task files
and in the image agree; :func:`build_image` checks that. Packages get into the image offline from
a wheelhouse downloaded on the host with pip (pinned), served to the image's pip through
``/opt/miniconda3/envs/testbed/pip.conf`` (no index), so the eval script's ``pip install`` works
without network.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from services.common.hashing import sha256_file
from services.common.paths import DATASETS_DIR, REPO_ROOT

GENERATOR_VERSION = "1"
BASE_IMAGE = "lts/base:bookworm"
UV_VERSION = "0.7.13"
UV_INSTALL_LINE = f"RUN curl -LsSf https://astral.sh/uv/{UV_VERSION}/install.sh | sh"
DEFAULT_DEST = DATASETS_DIR / "swebench-verified-like"
DEFAULT_CACHE = REPO_ROOT / "sandbox-preparation" / "swebench-like"
FILLER_COMMITS = 20_000
FILLER_BLOB_BYTES = 8_192          # 20,000 x 8 KiB of random bytes: a pack of ~165 MB
PARSER_DEPS = ("swebench==4.1.0", "datasets==2.16.1")

# sdists (the code bases) and the wheels of each repo's env, all pinned
SDISTS = {
    "flask": ("3.0.3", "ceb27b0af3823ea2737928a4d99d125a06175b8512c445cbd9a9ce200ef76842"),
    "requests": ("2.31.0", "942c5a758f98d790eaed1a29cb6eefc7ffb0d1cf7af05c3d2791656dbd6ad1e1"),
    "pytest": ("8.1.1", "ac978141a75948948817d360297b7aae0fcb9d6ff6bc9ec6d514b85d5a65c044"),
}
BUILD_WHEELS = ["pip==24.0", "setuptools==69.5.1", "wheel==0.43.0", "flit_core==3.9.0", "setuptools_scm==8.0.4",
                "packaging==24.0", "typing_extensions==4.11.0"]
ENV_WHEELS = {
    "flask": ["werkzeug==3.0.3", "jinja2==3.1.4", "markupsafe==2.1.5", "itsdangerous==2.2.0", "click==8.1.7",
              "blinker==1.8.2", "pytest==8.1.1", "iniconfig==2.0.0", "pluggy==1.5.0", "asgiref==3.8.1",
              "python-dotenv==1.0.1"],
    "requests": ["charset_normalizer==3.3.2", "idna==3.7", "urllib3==2.2.1", "certifi==2024.2.2", "pytest==7.4.4",
                 "iniconfig==2.0.0", "pluggy==1.5.0", "pytest-mock==3.14.0"],
    "pytest": ["iniconfig==2.0.0", "pluggy==1.5.0", "attrs==23.2.0", "pygments==2.17.2"],
}


@dataclass
class LikeSpec:
    """One stand-in SWE-bench record, written against a pinned sdist."""

    instance_id: str
    repo: str                  # GitHub owner/name: picks swebench's per-repo spec and log parser
    version: str               # swebench's version key for that repo
    package: str               # key of SDISTS / ENV_WHEELS
    problem: str
    bug: list[tuple[str, str, str]]      # (path, released text, buggy text): the base has the bug
    test_file: str
    test_old: str              # text in test_file the test patch appends after
    test_new: str              # ... appended text (the new tests)
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    env_setup_change: tuple[str, str, str] | None = None   # (path, old, new) at the environment_setup_commit
    env: dict[str, str] = field(default_factory=dict)      # ENV lines of the image

    @property
    def image(self) -> str:
        return f"swebench/sweb.eval.x86_64.{self.instance_id.replace('__', '_1776_')}:latest"


FLASK_NS_TEST = '''

def test_get_namespace_trim_and_lowercase():
    app = flask.Flask(__name__)
    app.config["MAIL_SERVER"] = "smtp.example.org"
    app.config["MAIL_PORT"] = 25
    app.config["OTHER"] = 1
    assert app.config.get_namespace("MAIL_") == {"server": "smtp.example.org", "port": 25}
    assert app.config.get_namespace("MAIL_", lowercase=False) == {"SERVER": "smtp.example.org", "PORT": 25}
'''
FLASK_ENV_TEST = '''

def test_from_prefixed_env_nested_keeps_siblings(monkeypatch):
    monkeypatch.setenv("FLASK_DB__HOST", "db.internal")
    app = flask.Flask(__name__)
    app.config["DB"] = {"HOST": "localhost", "PORT": 5432}
    app.config.from_prefixed_env()
    assert app.config["DB"] == {"HOST": "db.internal", "PORT": 5432}
'''
REQUESTS_AUTH_TEST = '''

def test_get_auth_from_url_percent_encoded():
    url = "http://us%40er:p%3Ass%20word@example.com/path"
    assert get_auth_from_url(url) == ("us@er", "p:ss word")
'''
REQUESTS_CID_TEST = '''
    def test_equality_ignores_case(self):
        cid = CaseInsensitiveDict({"Content-Type": "text/html"})
        assert cid == {"content-type": "text/html"}
        assert cid == CaseInsensitiveDict({"CONTENT-TYPE": "text/html"})
        assert cid != {"content-type": "text/plain"}
'''
PYTEST_RELPATH_TEST = '''

def test_bestrelpath_to_sibling_trees() -> None:
    curdir = Path("/srv/project/src/pkg")
    assert bestrelpath(curdir, Path("/srv/project/tests")) == os.path.join("..", "..", "tests")
    assert bestrelpath(curdir, Path("/srv/other")) == os.path.join("..", "..", "..", "other")
'''

SPECS = [
    LikeSpec(
        "pallets__flask-90001", "pallets/flask", "3.0", "flask",
        "`Config.get_namespace()` ignores `trim_namespace` when `lowercase` is true.\n\n"
        "```python\napp.config['MAIL_SERVER'] = 'smtp.example.org'\napp.config.get_namespace('MAIL_')\n```\n"
        "returns `{'mail_server': 'smtp.example.org'}` instead of `{'server': 'smtp.example.org'}`: the "
        "namespace prefix is kept in the keys whenever they are lower-cased.",
        [("src/flask/config.py", "            if lowercase:\n                key = key.lower()\n",
          "            if lowercase:\n                key = k.lower()\n")],
        "tests/test_config.py", '    assert "bar stuff 2" == bar_options["BAR_STUFF_2"]\n', FLASK_NS_TEST,
        ["tests/test_config.py::test_get_namespace", "tests/test_config.py::test_get_namespace_trim_and_lowercase"],
        ["tests/test_config.py::test_config_from_pyfile", "tests/test_config.py::test_config_from_object",
         "tests/test_config.py::test_config_from_mapping", "tests/test_config.py::test_session_lifetime",
         "tests/test_config.py::test_from_prefixed_env"],
        env_setup_change=("requirements/dev.txt", "pytest==8.1.1\n", "pytest==8.1.1\n    # via -r tests.txt\n")),
    LikeSpec(
        "pallets__flask-90002", "pallets/flask", "3.0", "flask",
        "`Config.from_prefixed_env()` replaces an existing nested dict instead of updating it.\n\n"
        "With `app.config['DB'] = {'HOST': 'localhost', 'PORT': 5432}` and the environment variable "
        "`FLASK_DB__HOST=db.internal`, loading the environment leaves `app.config['DB'] == {'HOST': "
        "'db.internal'}`: `PORT` is lost. Nested keys set through `__` must update the existing dict.",
        [("src/flask/config.py", "                if part not in current:\n                    current[part] = {}\n",
          "                current[part] = {}\n")],
        "tests/test_config.py", "    assert app.config[\"NEW\"] == {\"K\": \"v\"}\n", FLASK_ENV_TEST,
        ["tests/test_config.py::test_from_prefixed_env_nested",
         "tests/test_config.py::test_from_prefixed_env_nested_keeps_siblings"],
        ["tests/test_config.py::test_from_prefixed_env", "tests/test_config.py::test_from_prefixed_env_custom_prefix",
         "tests/test_config.py::test_config_from_mapping", "tests/test_config.py::test_get_namespace"],
        env_setup_change=("requirements/dev.txt", "pytest==8.1.1\n", "pytest==8.1.1\n    # via -r tests.txt\n")),
    LikeSpec(
        "psf__requests-90003", "psf/requests", "2.31", "requests",
        "`requests.utils.get_auth_from_url` returns percent-encoded credentials.\n\n"
        "`get_auth_from_url('http://us%40er:p%3Ass%20word@example.com/')` gives `('us%40er', 'p%3Ass%20word')`; "
        "the user name and password must be unquoted (`('us@er', 'p:ss word')`), otherwise the basic-auth "
        "header carries the escaped text.",
        [("requests/utils.py", "        auth = (unquote(parsed.username), unquote(parsed.password))\n",
          "        auth = (parsed.username or \"\", parsed.password or \"\")\n")],
        "tests/test_utils.py", "    assert get_auth_from_url(url) == auth\n", REQUESTS_AUTH_TEST,
        ["tests/test_utils.py::test_get_auth_from_url_percent_encoded"],
        ["tests/test_utils.py::TestToKeyValList::test_invalid", "tests/test_utils.py::TestSuperLen::test_string",
         "tests/test_utils.py::TestSuperLen::test_super_len_with__len__"]),
    LikeSpec(
        "psf__requests-90004", "psf/requests", "2.31", "requests",
        "`CaseInsensitiveDict` equality is case sensitive.\n\n"
        "`CaseInsensitiveDict({'Content-Type': 'text/html'}) == {'content-type': 'text/html'}` is `False`; "
        "comparing two header dicts that differ only in the case of their keys must be `True`.",
        [("requests/structures.py", "        return dict(self.lower_items()) == dict(other.lower_items())\n",
          "        return dict(self.items()) == dict(other.items())\n")],
        "tests/test_structures.py", "        assert copy == self.case_insensitive_dict\n", REQUESTS_CID_TEST,
        ["tests/test_structures.py::TestCaseInsensitiveDict::test_equality_ignores_case"],
        ["tests/test_structures.py::TestCaseInsensitiveDict::test_list",
         "tests/test_structures.py::TestCaseInsensitiveDict::test_copy",
         "tests/test_structures.py::TestCaseInsensitiveDict::test_lower_items"]),
    LikeSpec(
        "pytest-dev__pytest-90005", "pytest-dev/pytest", "8.1", "pytest",
        "`_pytest.pathlib.bestrelpath` climbs one directory too few.\n\n"
        "`bestrelpath(Path('/srv/project/src/pkg'), Path('/srv/project/tests'))` returns `'../tests'` "
        "instead of `'../../tests'`, so paths of files outside the rootdir are shown wrong in reports.",
        [("src/_pytest/pathlib.py", "        *([os.pardir] * len(reldirectory.parts)),\n",
          "        *([os.pardir] * max(len(reldirectory.parts) - 1, 0)),\n")],
        "testing/test_pathlib.py", "    assert commonpath(path, path.parent.parent) == path.parent.parent\n",
        PYTEST_RELPATH_TEST,
        ["testing/test_pathlib.py::test_bestrelpath", "testing/test_pathlib.py::test_bestrelpath_to_sibling_trees"],
        ["testing/test_pathlib.py::test_commonpath", "testing/test_pathlib.py::test_visit_ignores_errors"],
        env={"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_PYTEST": "8.1.1"}),
]


def spec_by_id(instance_id: str) -> LikeSpec:
    for s in SPECS:
        if s.instance_id == instance_id:
            return s
    raise KeyError(f"no stand-in task {instance_id!r} (known: {', '.join(s.instance_id for s in SPECS)})")


# ------------------------------------------------------------------------------------------
# downloads (host side, pip, hash-checked / pinned)


def _pip_download(args: list[str], dest: Path, what: str) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", str(dest),
                        *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"pip download of {what} failed (the host needs a package index here):\n"
                           f"{r.stderr[-2000:]}")


def sdist_tree(package: str, cache: Path) -> Path:
    """The unpacked sdist of ``package`` (pinned version, sha256-checked)."""
    version, sha = SDISTS[package]
    src = cache / "sources" / f"{package}-{version}"
    if src.is_dir():
        return src
    downloads = cache / "downloads"
    found = [f for f in downloads.glob(f"{package}-{version}.tar.gz") if sha256_file(f) == sha] \
        if downloads.is_dir() else []
    if not found:
        with tempfile.TemporaryDirectory() as tmp:
            req = Path(tmp) / "req.txt"
            req.write_text(f"{package}=={version} --hash=sha256:{sha}\n")
            _pip_download(["--no-deps", "--no-binary", ":all:", "--require-hashes", "-r", str(req)], Path(tmp) / "d",
                          f"{package}=={version}")
            downloads.mkdir(parents=True, exist_ok=True)
            for f in (Path(tmp) / "d").glob("*.tar.gz"):
                if sha256_file(f) == sha:
                    shutil.copyfile(f, downloads / f.name)
                    found = [downloads / f.name]
        if not found:
            raise RuntimeError(f"{package}=={version}: no sdist with sha256 {sha}")
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        with tarfile.open(found[0]) as tf:
            tf.extractall(tmp, filter="data")
        top = next(p for p in Path(tmp).iterdir() if p.is_dir())
        src.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(top), src)
    return src


def wheelhouse(package: str, cache: Path) -> Path:
    """Pinned wheels for the repo's env (and the build backends its install needs)."""
    reqs = sorted(BUILD_WHEELS + ENV_WHEELS[package])
    key = hashlib.sha256("\n".join(reqs).encode()).hexdigest()[:12]
    dest = cache / "wheels" / f"{package}-{key}"
    if (dest / ".complete").exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    _pip_download(["--no-deps", "--only-binary", ":all:", *reqs], dest, f"the {package} env's wheels")
    (dest / ".complete").write_text("\n".join(reqs) + "\n")
    return dest


def parser_wheelhouse(cache: Path, python_version: str) -> Path:
    """Wheels that resolve parser.py's PEP 723 dependencies for ``python_version`` (the image's
    interpreter): with ``UV_OFFLINE=1 UV_FIND_LINKS=<this dir>`` ``uv run parser.py`` needs no
    index. A pre-warmed stand-in for the verifier's registry path (tests; docs/tasks.md)."""
    dest = cache / "wheels" / f"parser-py{python_version}"
    if (dest / ".complete").exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    _pip_download(["--only-binary", ":all:", "--python-version", python_version, *PARSER_DEPS], dest,
                  "parser.py's dependencies")
    (dest / ".complete").write_text("\n".join(PARSER_DEPS) + "\n")
    return dest


# ------------------------------------------------------------------------------------------
# the repository with its long history (git fast-import)

_EPOCH = 1_600_000_000
_AUTHOR = "Stand-in Dev <dev@example.org>"
_IGNORE = "*.egg-info/\n__pycache__/\n*.py[cod]\nbuild/\ndist/\n.pytest_cache/\n.tox/\n"


def _git(repo: Path, *args: str, check: bool = True) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_AUTHOR_NAME": "Stand-in Dev", "GIT_AUTHOR_EMAIL": "dev@example.org",
           "GIT_COMMITTER_NAME": "Stand-in Dev", "GIT_COMMITTER_EMAIL": "dev@example.org",
           "GIT_COMMITTER_DATE": f"{_EPOCH + 10_000_000} +0000"}
    r = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", *args], cwd=repo, env=env, capture_output=True,
                       text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {r.stderr[-1000:]}")
    return r.stdout


def _project_files(src: Path) -> dict[str, tuple[bytes, bool]]:
    out: dict[str, tuple[bytes, bool]] = {}
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src).as_posix()
        if not p.is_file() or p.is_symlink() or rel == "PKG-INFO" or ".egg-info" in rel or "__pycache__" in rel:
            continue
        out[rel] = (p.read_bytes(), os.access(p, os.X_OK))
    out[".gitignore"] = (_IGNORE.encode(), False)
    return out


def _replace(text: str, old: str, new: str, where: str) -> str:
    if text.count(old) != 1:
        raise RuntimeError(f"{where}: expected exactly one occurrence of {old!r} (found {text.count(old)})")
    return text.replace(old, new)


@dataclass
class History:
    repo: Path
    base: str
    fix: str
    env_setup: str
    head: str
    gold_patch: str
    test_patch: str
    commits: int


class _Stream:
    def __init__(self, out: Any):
        self.out, self.mark, self.t = out, 0, _EPOCH

    def commit(self, msg: str, changes: list[tuple[str, str, bytes | None, bool]], first: bool = False) -> int:
        self.mark += 1
        self.t += 600
        w = self.out.write
        w(b"commit refs/heads/main\nmark :%d\n" % self.mark)
        w(f"author {_AUTHOR} {self.t} +0000\ncommitter {_AUTHOR} {self.t} +0000\n".encode())
        m = msg.encode()
        w(b"data %d\n%s\n" % (len(m), m))
        if first:
            w(b"deleteall\n")
        for op, path, data, exe in changes:
            if op == "D":
                w(f"D {path}\n".encode())
            else:
                w(f"M {'100755' if exe else '100644'} inline {path}\n".encode())
                w(b"data %d\n" % len(data or b""))
                w((data or b"") + b"\n")
        w(b"\n")
        return self.mark


def make_history(spec: LikeSpec, src: Path, dest: Path, filler_commits: int = FILLER_COMMITS,
                 filler_bytes: int = FILLER_BLOB_BYTES) -> History:
    """The task's repository at ``dest`` (non-bare, checked out at the base commit): the project
    (with the bug), ``filler_commits`` commits of random blobs, their removal, the base commit,
    the fix (source + tests), the environment-setup commit and later work; the branch ``main``
    reset to the base (the later commits stay reachable from ``upstream/main``-style branches,
    tags and the reflog). Deterministic: the same inputs give the same commit ids."""
    files = _project_files(src)
    buggy = dict(files)
    for path, released, bug in spec.bug:
        text = files[path][0].decode()
        buggy[path] = (_replace(text, released, bug, f"{spec.instance_id} {path}").encode(), files[path][1])
    test_text = files[spec.test_file][0].decode()
    tests_fixed = _replace(test_text, spec.test_old, spec.test_old + spec.test_new, spec.instance_id).encode()
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    _git(dest, "init", "-q", "-b", "main")
    rng = random.Random(f"{spec.instance_id}-{filler_commits}-{filler_bytes}")
    proc = subprocess.Popen(["git", "fast-import", "--quiet", "--done"], cwd=dest, stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None
    s = _Stream(proc.stdin)
    try:
        s.commit(f"Import {spec.package} {SDISTS[spec.package][0]}",
                 [("M", p, d, x) for p, (d, x) in sorted(buggy.items())], first=True)
        for i in range(filler_commits):
            s.commit(f"Update benchmark data set {i}", [("M", f".bench-data/chunk-{i % 256:03d}.bin",
                                                        rng.randbytes(filler_bytes), False)])
        s.commit("Drop the benchmark data set from the repository", [("D", ".bench-data", None, False)])
        base_mark = s.commit("Document the release process",
                             [("M", "RELEASE-NOTES.md", f"# {spec.package}\n\nSee the changelog.\n".encode(), False)])
        fix_changes = [("M", p, files[p][0], files[p][1]) for p, _, _ in spec.bug]
        fix_mark = s.commit(f"Fix {spec.instance_id.split('-')[-1]}: {spec.problem.splitlines()[0][:60]}",
                            [*fix_changes, ("M", spec.test_file, tests_fixed, files[spec.test_file][1])])
        if spec.env_setup_change:
            path, old, new = spec.env_setup_change
            text = _replace(files[path][0].decode(), old, new, f"{spec.instance_id} env setup")
            env_changes = [("M", path, text.encode(), False)]
        else:
            env_changes = [("M", "RELEASE-NOTES.md", f"# {spec.package}\n\nSee the changelog. Pin the test "
                            "tools.\n".encode(), False)]
        env_mark = s.commit("Update development requirements", env_changes)
        head_mark = s.commit("Start the next development cycle",
                             [("M", "RELEASE-NOTES.md", f"# {spec.package}\n\nNext release.\n".encode(), False)])
        s.out.write(b"done\n")
        s.out.close()
    except BrokenPipeError:
        pass
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.wait() != 0:
        raise RuntimeError(f"git fast-import failed: {err[-2000:]}")
    marks = {}
    # fast-import's marks: ask git for the commit ids along the first-parent chain
    ids = _git(dest, "rev-list", "--first-parent", "--reverse", "refs/heads/main").split()
    for name, mark in (("base", base_mark), ("fix", fix_mark), ("env", env_mark), ("head", head_mark)):
        marks[name] = ids[mark - 1]
    version = SDISTS[spec.package][0]
    _git(dest, "update-ref", "refs/heads/upstream-main", marks["head"])
    _git(dest, "tag", f"{version}", marks["fix"])
    _git(dest, "tag", f"{version}.post1", marks["head"])
    _git(dest, "update-ref", "refs/remotes/origin/main", marks["head"])
    _git(dest, "checkout", "-q", "-f", "main")         # HEAD at the newest commit (reflog entry)
    _git(dest, "reset", "-q", "--hard", marks["base"])  # as SWE-bench images: reset to the base
    gold = _git(dest, "diff", "--no-color", "--no-renames", marks["base"], marks["fix"], "--",
                *sorted({p for p, _, _ in spec.bug}))
    test_patch = _git(dest, "diff", "--no-color", "--no-renames", marks["base"], marks["fix"], "--", spec.test_file)
    return History(dest, marks["base"], marks["fix"], marks["env"], marks["head"], gold, test_patch, len(ids))


# ------------------------------------------------------------------------------------------
# the task files


def record_of(spec: LikeSpec, h: History) -> dict[str, Any]:
    """The SWE-bench record (the published tasks' tests/config.json)."""
    return {"repo": spec.repo, "instance_id": spec.instance_id, "base_commit": h.base, "patch": h.gold_patch,
            "test_patch": h.test_patch, "problem_statement": spec.problem, "hints_text": "",
            "created_at": "2024-04-07T00:00:00Z", "version": spec.version,
            "FAIL_TO_PASS": json.dumps(spec.fail_to_pass), "PASS_TO_PASS": json.dumps(spec.pass_to_pass),
            "environment_setup_commit": h.env_setup, "difficulty": "<15 min fix"}


class _Response:
    def __init__(self, status: int, text: str):
        self.status_code, self.text = status, text


@contextmanager
def upstream_files_from(repo: Path, gh_repo: str) -> Iterator[list[str]]:
    """While active, swebench's fetches of ``raw.githubusercontent.com/<gh_repo>/<commit>/<path>``
    (requirements files at the ``environment_setup_commit``) are answered from ``repo``'s own
    history, in this process only; yields the list of URLs served."""
    import swebench.harness.test_spec.python as spec_python  # noqa: PLC0415 - heavy, generation only

    served: list[str] = []
    prefix = f"https://raw.githubusercontent.com/{gh_repo}/"

    def get(url: str, *args: Any, **kwargs: Any) -> _Response:
        if not url.startswith(prefix):
            raise RuntimeError(f"swebench asked for {url}: only {prefix}... is served at generation time")
        commit, _, path = url[len(prefix):].partition("/")
        r = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=repo, capture_output=True)
        served.append(url)
        return _Response(200, r.stdout.decode()) if r.returncode == 0 else _Response(404, "404: Not Found")

    real = spec_python.requests

    class _Requests:
        def __getattr__(self, name: str) -> Any:
            return get if name == "get" else getattr(real, name)

    spec_python.requests = _Requests()  # type: ignore[assignment]
    for fn in (spec_python.get_requirements_by_commit, spec_python.get_environment_yml_by_commit):
        fn.cache_clear()
    try:
        yield served
    finally:
        spec_python.requests = real
        for fn in (spec_python.get_requirements_by_commit, spec_python.get_environment_yml_by_commit):
            fn.cache_clear()


def eval_script_of(record: dict[str, Any], repo: Path) -> tuple[str, list[str]]:
    """swebench 4.1.0's own eval script for ``record`` (and the upstream URLs it needed)."""
    from swebench.harness.test_spec.test_spec import make_test_spec  # noqa: PLC0415

    with upstream_files_from(repo, record["repo"]) as served:
        spec = make_test_spec(record)
    return spec.eval_script, list(served)


PARSER_PY = '''# /// script
# requires-python = ">=3.9"
# dependencies = [
#   "swebench==4.1.0",
#   "datasets==2.16.1",
# ]
# ///
"""Grade the test log with swebench's own code (Harbor SWE-bench adapter contract).

Reads the SWE-bench record from /tests/config.json and the log of the eval script, grades
FAIL_TO_PASS / PASS_TO_PASS with swebench's get_logs_eval / get_eval_tests_report and writes
/logs/verifier/report.json. Exit 0: resolved; 1: not resolved; 2: could not grade (for example
swebench could not fetch what make_test_spec needs): test.sh then writes no reward, an infra error.
"""
import json
import os
import sys
import traceback

LOG = sys.argv[1] if len(sys.argv) > 1 else "/logs/verifier/test-output.log"
CONFIG = os.environ.get("SWEBENCH_RECORD", "/tests/config.json")
REPORT = "/logs/verifier/report.json"


def main() -> int:
    from swebench.harness.constants import FAIL_ONLY_REPOS, FAIL_TO_PASS, PASS_TO_PASS, EvalType, ResolvedStatus
    from swebench.harness.grading import get_eval_tests_report, get_logs_eval, get_resolution_status
    from swebench.harness.test_spec.test_spec import make_test_spec

    with open(CONFIG) as f:
        record = json.load(f)
    spec = make_test_spec(record)
    status, found = get_logs_eval(spec, LOG)
    iid = record["instance_id"]
    report = {iid: {"patch_is_None": False, "patch_exists": True, "patch_successfully_applied": found,
                    "resolved": False}}
    if found:
        gold = {FAIL_TO_PASS: spec.FAIL_TO_PASS, PASS_TO_PASS: spec.PASS_TO_PASS}
        mode = EvalType.FAIL_ONLY if record["repo"] in FAIL_ONLY_REPOS else EvalType.PASS_AND_FAIL
        tests = get_eval_tests_report(status, gold, eval_type=mode)
        report[iid]["tests_status"] = tests
        report[iid]["resolved"] = get_resolution_status(tests) == ResolvedStatus.FULL.value
    os.makedirs(os.path.dirname(REPORT), exist_ok=True)
    with open(REPORT, "w") as f:
        json.dump(report, f, indent=2)
    print(("RESOLVED" if report[iid]["resolved"] else "NOT RESOLVED") + f" {iid}")
    return 0 if report[iid]["resolved"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001 - anything here means "could not grade", never "wrong fix"
        traceback.print_exc()
        print("GRADING ERROR: the log could not be graded (see above)", file=sys.stderr)
        sys.exit(2)
'''


def test_sh_of(eval_script: str) -> str:
    body = eval_script.split("\n", 1)[1] if eval_script.startswith("#!") else eval_script
    return f"""#!/bin/bash
# SWE-bench evaluation (Harbor SWE-bench adapter layout). The block below is swebench 4.1.0's own
# make_test_spec(record).eval_script for this instance; its output is the log parser.py grades.
mkdir -p /logs/verifier
LOG_FILE=/logs/verifier/test-output.log
(
{body.rstrip()}
) 2>&1 | tee "$LOG_FILE"

export PATH="$HOME/.local/bin:$PATH"
cd /tests
uv run parser.py "$LOG_FILE" | tee -a /logs/verifier/parser-output.txt
rc=${{PIPESTATUS[0]}}
if [ "$rc" -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
elif [ "$rc" -eq 1 ]; then
  echo 0 > /logs/verifier/reward.txt
else
  echo "parser.py could not grade (exit $rc): no reward written (an infrastructure error, not a 0)" >&2
fi
exit 0
"""


def dockerfile_of(spec: LikeSpec) -> str:
    return f"""FROM {spec.image}

WORKDIR /testbed

{UV_INSTALL_LINE}

RUN mkdir -p /logs
"""


def published_task_toml(source: str, instance_id: str, description: str, author: str, keyword: str,
                        difficulty: str) -> str:
    """task.toml as Harbor's SWE-bench adapter publishes it: the header names the task, the rest is the same for every
    SWE-bench task (the stand-ins here and the rows of an export, swebench_export.py)."""
    return f"""schema_version = "1.0"
source = "{source}"

[task]
name = "{source}/{instance_id}"
description = "{description}"
authors = [{{ name = "{author}" }}]
keywords = ["swe-bench", "debugging", "{keyword}"]

[metadata]
difficulty = "{difficulty}"
category = "debugging"
tags = ["debugging", "swe-bench"]

[agent]
timeout_sec = 3000
network_mode = "no-network"

[verifier]
timeout_sec = 3000
network_mode = "public"

[environment]
build_timeout_sec = 1800
cpus = 1
memory_mb = 4096
storage_mb = 10240
gpus = 0
"""


def task_toml_of(spec: LikeSpec) -> str:
    return published_task_toml(
        "swebench-verified-like", spec.instance_id,
        f"Stand-in for a SWE-bench Verified task: {spec.repo} {spec.version} (code from the {spec.package} "
        f"{SDISTS[spec.package][0]} sdist, planted regression)", "local-tinker-swe", spec.package, "<15 min fix")


def instruction_of(spec: LikeSpec, h: History) -> str:
    return f"""# Task

{spec.problem}

---

**Repo:** `{spec.repo}`
**Version:** `{spec.version}`
**Base commit:** `{h.base}`
**Instance ID:** `{spec.instance_id}`
"""


def solve_sh_of(gold: str) -> str:
    return f"""#!/bin/bash
set -euo pipefail
cd /testbed
cat > /testbed/solution_patch.diff <<'__SOLUTION__'
{gold}__SOLUTION__
patch --fuzz=5 -p1 -i /testbed/solution_patch.diff
"""


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def repo_for(spec: LikeSpec, cache: Path, filler_commits: int = FILLER_COMMITS, log: Callable[[str], None] = print,
             ) -> History:
    """The task's repository (cached under ``cache/repos/<id>``; rebuilt when the spec changed)."""
    src = sdist_tree(spec.package, cache)
    key = hashlib.sha256(json.dumps([GENERATOR_VERSION, spec.__dict__, filler_commits, FILLER_BLOB_BYTES],
                                    sort_keys=True, default=str).encode()).hexdigest()[:16]
    dest = cache / "repos" / spec.instance_id
    stamp = cache / "repos" / f"{spec.instance_id}.json"
    if stamp.exists() and (dest / ".git").is_dir():
        data = json.loads(stamp.read_text())
        if data.get("key") == key:
            return History(dest, **{k: v for k, v in data.items() if k != "key"})
    log(f"{spec.instance_id}: writing the repository history ({filler_commits} filler commits)")
    h = make_history(spec, src, dest, filler_commits)
    stamp.write_text(json.dumps({"key": key, **{k: v for k, v in h.__dict__.items() if k != "repo"}}))
    return h


def write_task(spec: LikeSpec, dest: Path, cache: Path = DEFAULT_CACHE, filler_commits: int = FILLER_COMMITS,
               log: Callable[[str], None] = print) -> Path:
    h = repo_for(spec, cache, filler_commits, log)
    record = record_of(spec, h)
    eval_script, served = eval_script_of(record, h.repo)
    task = dest / spec.instance_id
    shutil.rmtree(task, ignore_errors=True)
    _write(task / "instruction.md", instruction_of(spec, h))
    _write(task / "task.toml", task_toml_of(spec))
    _write(task / "environment" / "Dockerfile", dockerfile_of(spec))
    _write(task / "tests" / "config.json", json.dumps(record, indent=2) + "\n")
    _write(task / "tests" / "parser.py", PARSER_PY)
    _write(task / "tests" / "test.sh", test_sh_of(eval_script), 0o755)
    _write(task / "solution" / "solve.sh", solve_sh_of(h.gold_patch), 0o755)
    if served:
        log(f"{spec.instance_id}: swebench fetched {', '.join(served)} (served from the repo's own history)")
    return task


def write_dataset(dest: Path = DEFAULT_DEST, cache: Path = DEFAULT_CACHE, only: list[str] | None = None,
                  filler_commits: int = FILLER_COMMITS, log: Callable[[str], None] = print) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    return [write_task(s, dest, cache, filler_commits, log) for s in SPECS if not only or s.instance_id in only]


# ------------------------------------------------------------------------------------------
# the images (offline, on the Docker host)

ACTIVATE = r"""# /opt/miniconda3/bin/activate (stand-in for conda's, sourced): `source /opt/miniconda3/bin/activate`
# then `conda activate testbed`, as in SWE-bench images. Envs live in /opt/miniconda3/envs/<name>.
_LTS_CONDA_ROOT=/opt/miniconda3
conda() {
  case "${1:-}" in
    activate)
      local name="${2:-base}" prefix
      if [ "$name" = base ]; then prefix="$_LTS_CONDA_ROOT"; else prefix="$_LTS_CONDA_ROOT/envs/$name"; fi
      if [ ! -d "$prefix/bin" ]; then
        echo "EnvironmentNameNotFound: Could not find conda environment: $name" >&2
        return 1
      fi
      conda deactivate
      export PATH="$prefix/bin:$PATH" CONDA_PREFIX="$prefix" CONDA_DEFAULT_ENV="$name" CONDA_SHLVL=1
      if [ "$name" != base ]; then export VIRTUAL_ENV="$prefix"; fi
      hash -r ;;
    deactivate)
      if [ -n "${CONDA_PREFIX:-}" ]; then
        PATH=":$PATH:"; PATH="${PATH//:$CONDA_PREFIX\/bin:/:}"; PATH="${PATH#:}"; PATH="${PATH%:}"
        export PATH
        unset CONDA_PREFIX CONDA_DEFAULT_ENV VIRTUAL_ENV
        export CONDA_SHLVL=0
      fi
      hash -r ;;
    *)
      echo "conda (stand-in): only 'conda activate ENV' and 'conda deactivate' are available" >&2
      return 1 ;;
  esac
}
conda activate "${1:-base}"
"""


def image_context(spec: LikeSpec, h: History, wheels: Path, ctx: Path, install: str) -> None:
    """Build context of the SWE-bench-like image: Dockerfile, activate, wheels/, testbed/."""
    shutil.rmtree(ctx, ignore_errors=True)
    ctx.mkdir(parents=True)
    shutil.copytree(wheels, ctx / "wheels", ignore=shutil.ignore_patterns(".complete"))
    (ctx / "activate").write_text(ACTIVATE)
    subprocess.run(["cp", "-a", str(h.repo), str(ctx / "testbed")], check=True)
    pip_wheel = next((ctx / "wheels").glob("pip-*.whl")).name
    deps = " ".join(r.split("==")[0] for r in ENV_WHEELS[spec.package])
    env_lines = "".join(f"ENV {k}={v}\n" for k, v in sorted(spec.env.items()))
    (ctx / "Dockerfile").write_text(f"""FROM {BASE_IMAGE}
# SWE-bench-like image for {spec.instance_id} (services/tasks/swebench_like.py), built offline.
{env_lines}COPY activate /opt/miniconda3/bin/activate
COPY wheels /opt/wheels
RUN python3 -m venv --without-pip /opt/miniconda3/envs/testbed \\
 && /opt/miniconda3/envs/testbed/bin/python /opt/wheels/{pip_wheel}/pip install -q --no-index \\
    --find-links /opt/wheels pip \\
 && printf '[global]\\nno-index = true\\nfind-links = /opt/wheels\\ndisable-pip-version-check = true\\n' \\
    > /opt/miniconda3/envs/testbed/pip.conf \\
 && /opt/miniconda3/envs/testbed/bin/python -m pip install -q {deps}
COPY testbed /testbed
WORKDIR /testbed
RUN bash -c 'set -e; source /opt/miniconda3/bin/activate; conda activate testbed; {install}; \\
    test -z "$(git status --porcelain)" || {{ git status --porcelain; exit 1; }}'
""")


def build_image(spec: LikeSpec, docker: Any, cache: Path = DEFAULT_CACHE, filler_commits: int = FILLER_COMMITS,
                task_dir: Path | None = None, log: Callable[[str], None] = print) -> str:
    """Build ``spec.image`` on the Docker host (no network), cached by a content key (label
    ``lts.swebench_like.key``). With ``task_dir``, checks that its config.json names the same base
    commit as the repository in the image."""
    from docker.errors import ImageNotFound  # noqa: PLC0415

    h = repo_for(spec, cache, filler_commits, log)
    if task_dir is not None:
        rec = json.loads((task_dir / "tests" / "config.json").read_text())
        if rec.get("base_commit") != h.base:
            raise RuntimeError(f"{spec.instance_id}: the task's base_commit {rec.get('base_commit')} is not the "
                               f"generated repository's {h.base} (regenerate the task files)")
    wheels = wheelhouse(spec.package, cache)
    install = _install_cmd(spec)
    key = hashlib.sha256(json.dumps([GENERATOR_VERSION, h.head, h.base, sorted(ENV_WHEELS[spec.package]),
                                     BUILD_WHEELS, install, ACTIVATE, spec.env, BASE_IMAGE],
                                    sort_keys=True).encode()).hexdigest()[:16]
    try:
        if (docker.images.get(spec.image).labels or {}).get("lts.swebench_like.key") == key:
            return spec.image
    except ImageNotFound:
        pass
    ctx = cache / "contexts" / spec.instance_id
    image_context(spec, h, wheels, ctx, install)
    log(f"{spec.instance_id}: building {spec.image} (offline)")
    lines: list[str] = []
    try:
        for chunk in docker.api.build(path=str(ctx), tag=spec.image, rm=True, forcerm=True, network_mode="none",
                                      decode=True, labels={"lts.swebench_like.key": key,
                                                           "lts.swebench_like.base": h.base}):
            lines.extend(chunk.get("stream", "").splitlines())
            if "error" in chunk:
                raise RuntimeError(f"{spec.instance_id}: image build failed: {chunk['error']}\n"
                                   + "\n".join(lines[-30:]))
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    return spec.image


def _install_cmd(spec: LikeSpec) -> str:
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS  # noqa: PLC0415

    return str(MAP_REPO_VERSION_TO_SPECS[spec.repo][spec.version]["install"])


_build_lock = threading.Lock()


def build_images(docker: Any, cache: Path = DEFAULT_CACHE, dest: Path = DEFAULT_DEST, only: list[str] | None = None,
                 filler_commits: int = FILLER_COMMITS, log: Callable[[str], None] = print) -> list[str]:
    with _build_lock:
        return [build_image(s, docker, cache, filler_commits, dest / s.instance_id if (dest / s.instance_id).is_dir()
                            else None, log) for s in SPECS if not only or s.instance_id in only]


class SwebenchLikeSource:
    """The stand-in tasks as a :class:`~services.tasks.sources.TaskSource` (``prepare_sandbox.py
    write-swebench-verified-like [--cache DIR] [--only ID]``: pip downloads the pinned sdists)."""

    name, noun = "swebench-verified-like", "stand-in SWE-bench Verified tasks"

    def write(self, dest: Path, cache: Path = DEFAULT_CACHE, only: list[str] | None = None) -> list[str]:
        return [p.name for p in write_dataset(dest, cache, only)]


SOURCE = SwebenchLikeSource()
