"""Issue 35 item 2: `setup.sh runtime` over a base Python that already has torch (a GPU image's) INHERITS it:
.venv-runtime is made with the base's site-packages, adds only what is missing, records the protected packages'
versions and paths before and after (.venv-runtime/setup-public-runtime.json), and fails loudly when one changed.

Real parts: the base is a real venv with the real CPU torch and a real small package (six) installed by uv; the
runtime is built by the real setup.sh in a copy of this checkout. The change is made on purpose through
LTS_RUNTIME_EXTRA (what requirements/gpu.txt or a user's extra would do): six 1.16.0 -> 1.17.0 in the runtime.
Also `setup.sh runtime --gpu-check` on a host without a GPU fails with a clear message.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from helpers import REPO


def _torch_pin() -> str:
    """The exact torch build set-up put in .venv-runtime (2.13.0+cpu here): never PyPI's CUDA build by accident."""
    out = subprocess.run([str(REPO / ".venv-runtime" / "bin" / "python"), "-c",
                          "import importlib.metadata as m; print(m.version('torch'))"], capture_output=True, text=True)
    return f"torch=={out.stdout.strip() or '2.13.0'}"


def _uv() -> str:
    uv = REPO / ".uv" / "bin" / "uv"
    if os.environ.get("LTS_UV"):
        return os.environ["LTS_UV"]
    if uv.exists():
        return str(uv)
    found = shutil.which("uv")
    if found is None:
        pytest.fail("no uv: run `bash setup.sh all` first (it puts uv in .uv/)")
    return found


def _pip_index_args() -> list[str]:
    """pip's configured find-links/index-url, as setup.sh passes them to uv (the local CPU torch wheel here)."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    args: list[str] = []
    for key, val in re.findall(r"^[^.]*\.(find-links|index-url)='(.*)'$", out, re.M):
        for v in val.split():
            if f"--{key}" not in args or v not in args:
                args += [f"--{key}", v]
    return args


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A copy of this checkout (tracked + new files, as committed or not) and a base venv with torch + six 1.16.0."""
    tmp = tmp_path_factory.mktemp("inherit")
    repo = tmp / "repo"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = REPO / f
        if src.is_file() and not src.is_symlink():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / f)
    uv = _uv()
    base = tmp / "base"
    py = subprocess.run([sys.executable, "-c", "import sys; print(sys.base_prefix)"], capture_output=True,
                        text=True, check=True).stdout.strip() + "/bin/python3"
    subprocess.run([uv, "venv", "-q", "--seed", "--python", py, str(base)], check=True)
    subprocess.run([uv, "pip", "install", "-q", "--python", str(base / "bin" / "python"), *_pip_index_args(),
                    "--no-deps", _torch_pin(), "six==1.16.0", "setuptools", "filelock", "typing-extensions", "sympy",
                    "mpmath", "networkx", "jinja2", "markupsafe", "fsspec"], check=True)
    env = dict(os.environ, PYTHON=str(base / "bin" / "python"), LTS_INHERIT="1", LTS_UV=uv,
               LTS_PROTECTED_PACKAGES="torch six", LTS_SKIP_MODEL="1")
    env.pop("LTS_RUNTIME_EXTRA", None)
    return repo, base, env


def _setup(repo, env, *args):
    return subprocess.run(["bash", "setup.sh", "runtime", *args], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=900)


def _site(base) -> str:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return subprocess.run([str(base / "bin" / "python"), "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_runtime_inherits_the_base_stack_and_records_it(world):
    repo, base, env = world
    r = _setup(repo, env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "inherits" in r.stdout, r.stdout[-2000:]
    assert "protected packages unchanged: six 1.16.0, torch 2.13.0" in r.stdout, r.stdout[-2000:]
    assert "Error" not in r.stderr, r.stderr[-2000:]
    rep = json.loads((repo / ".venv-runtime" / "setup-public-runtime.json").read_text())
    prot = rep["protected"]
    assert rep["ok"] and prot["ok"] and prot["changed"] == {}, prot
    site = _site(base)
    for name, ver in (("torch", "2.13.0"), ("six", "1.16.0")):  # the base's, at the base's path, before and after
        assert prot["before"][name]["version"].startswith(ver) and prot["before"][name]["path"] == site, prot
        assert prot["after"][name] == prot["before"][name], prot
    assert rep["system_site_packages"] is True and rep["torch_path"].startswith(site), rep
    # only what the base lacked was added: no torch of its own in the runtime
    own = next((repo / ".venv-runtime" / "lib").glob("python3*/site-packages"))
    assert not (own / "torch").exists() and (own / "transformers").exists()
    assert rep["packages"]["services.backend"] == "ok", rep["packages"]


def test_a_changed_protected_package_fails_setup_loudly(world, tmp_path):
    repo, base, env = world
    extra = tmp_path / "extra.txt"
    extra.write_text("six==1.17.0\n")
    r = _setup(repo, dict(env, LTS_RUNTIME_EXTRA=str(extra)))
    assert r.returncode != 0, r.stdout[-2000:]
    assert "protected package of the base changed" in r.stderr and "six" in r.stderr, r.stderr[-2000:]
    rep = json.loads((repo / ".venv-runtime" / "setup-public-runtime.json").read_text())
    ch = rep["protected"]["changed"]["six"]
    assert ch["before"]["version"] == "1.16.0" and ch["after"]["version"] == "1.17.0", ch
    assert ch["before"]["path"] == _site(base) != ch["after"]["path"], ch
    assert rep["ok"] is False
    # the base itself is untouched
    out = subprocess.run([str(base / "bin" / "python"), "-c", "import six; print(six.__version__)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "1.16.0"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU host: --gpu-check would pass here")
def test_gpu_check_without_a_gpu_fails_clearly(world):
    repo, base, env = world
    shutil.rmtree(repo / ".venv-runtime", ignore_errors=True)
    r = _setup(repo, env, "--gpu-check")
    assert r.returncode != 0
    assert "GPU check failed: no CUDA GPU is visible to torch" in r.stderr, r.stderr[-2000:]
    rep = json.loads((repo / ".venv-runtime" / "setup-public-runtime.json").read_text())
    assert rep["gpu_check"]["ok"] is False and "no CUDA GPU" in rep["gpu_check"]["error"], rep["gpu_check"]
    r = _setup(repo, env, "--gpu-chek")
    assert r.returncode != 0 and "unknown option '--gpu-chek'" in r.stderr, r.stderr
