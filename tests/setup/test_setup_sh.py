"""Issue 22: `setup.sh` checks the sandbox host first and names the fix (contract test: a fake `bwrap` on PATH
stands in for a host whose user namespaces are blocked, which this CI host is not)."""

from __future__ import annotations

import os
import subprocess

from helpers import REPO


def _check(tmp_path, env_extra=None, fake_bwrap=True):
    env = dict(os.environ, **(env_extra or {}))
    if fake_bwrap:
        fake = tmp_path / "bin"
        fake.mkdir()
        (fake / "bwrap").write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
        (fake / "bwrap").chmod(0o755)
        env["PATH"] = f"{fake}:{env['PATH']}"
    return subprocess.run(["bash", "setup.sh", "check"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def test_blocked_user_namespaces_stop_setup_with_the_fix(tmp_path):
    r = _check(tmp_path)
    assert r.returncode == 1
    assert "sandbox host check failed" in r.stderr and "Permission denied" in r.stderr, r.stderr
    assert "Fix:" in r.stderr and "LTS_SKIP_SANDBOX_CHECK=1" in r.stderr, r.stderr


def test_host_check_passes_here_and_can_be_skipped(tmp_path):
    r = _check(tmp_path, fake_bwrap=False)
    assert r.returncode == 0 and "sandbox host check passed" in r.stdout, r.stdout + r.stderr
    r = _check(tmp_path, {"LTS_SKIP_SANDBOX_CHECK": "1"})
    assert r.returncode == 0 and "skipped" in r.stdout, r.stdout + r.stderr
