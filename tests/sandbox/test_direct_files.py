"""read_file / write_file answered by the local manager itself (services/sandbox/local/fileio.py): the
same content, ownership and errors as ``cat`` in the sandbox, no process started, and nothing a sandbox
plants (symlinks to host files, FIFOs, unreadable files) lets it read or write the host through them."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import httpx
import pytest

from services.sandbox.client import SandboxManagerClient
from services.sandbox.errors import PayloadTooLarge
from services.sandbox.local import fileio

from .conftest import SANDBOX_UID, requires_bwrap, requires_root, run

pytestmark = [requires_bwrap, requires_root]


def _file_ops(admin) -> dict[str, int]:
    return httpx.get(admin.url + "/health").json()["result"]["stats"]["file_ops"]


@pytest.fixture(scope="module")
def host_secret(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("direct-files-host")
    os.chmod(d, 0o777)   # even a world-writable host directory must stay out of reach
    for p in d.parents:
        if str(p).startswith("/tmp/"):
            os.chmod(p, 0o755)
    (d / "secret.txt").write_text("HOST-SECRET-0815\n")
    os.chmod(d / "secret.txt", 0o666)
    return d


def test_read_write_without_a_process(admin, base_repo):
    async def go():
        async with SandboxManagerClient(admin.url, admin.key) as mgr:
            sb = await mgr.create(base_dir=base_repo)
            try:
                before = _file_ops(admin)
                assert await sb.read_file("/workspace/pkg/__init__.py") == "def add(a, b):\n    return a + b\n"
                await sb.write_file("/workspace/new/deep/file.py", "x = 1\n")
                await sb.write_file("/workspace/pkg/__init__.py", "def add(a, b):\n    return a - b\n")
                await sb.write_file("/tmp/run.sh", "echo hi\n", mode=0o755)
                await sb.write_file("/tmp/big.txt", "x" * (1536 * 1024))   # above the admin's 1 MB read cap
                with pytest.raises(PayloadTooLarge, match="/tmp/big.txt is larger than"):
                    await sb.read_file("/tmp/big.txt")
                after = _file_ops(admin)
                inside = await sb.run("cat /workspace/new/deep/file.py /workspace/pkg/__init__.py; /tmp/run.sh; "
                                      "stat -c '%u %a %n' /workspace/new /workspace/new/deep/file.py /tmp/run.sh; "
                                      "cd /workspace && git status --porcelain")
                return before, after, inside
            finally:
                await sb.close()

    before, after, inside = run(go())
    assert after["direct"] - before["direct"] == 6 and after["sandboxed"] == before["sandboxed"]
    out = inside.output
    assert "x = 1\n" in out and "return a - b" in out and "hi\n" in out
    assert f"{SANDBOX_UID} 755 /workspace/new\n" in out          # mkdir -p as the sandbox user, umask 022
    assert f"{SANDBOX_UID} 644 /workspace/new/deep/file.py\n" in out
    assert f"{SANDBOX_UID} 755 /tmp/run.sh\n" in out
    assert " M pkg/__init__.py" in out and "?? new/" in out


def test_planted_links_and_fifos_do_not_reach_the_host(admin, base_repo, host_secret):
    secret = host_secret / "secret.txt"

    async def go():
        async with SandboxManagerClient(admin.url, admin.key) as mgr:
            sb = await mgr.create(base_dir=base_repo)
            try:
                await sb.run(f"ln -s {secret} /workspace/flink; ln -s {host_secret} /workspace/dlink; "
                             f"mkfifo /workspace/fifo; echo inside > /tmp/own.txt; ln -s /tmp/own.txt /workspace/ok")
                before = _file_ops(admin)
                results = {}
                for path in ("/workspace/flink", "/workspace/dlink/secret.txt"):
                    try:
                        results[path] = await sb.read_file(path)
                    except Exception as e:  # noqa: BLE001 - the error is the expected answer
                        results[path] = f"error: {e}"
                for path in ("/workspace/flink", "/workspace/dlink/secret.txt", "/workspace/dlink/new.txt"):
                    try:
                        await sb.write_file(path, "PWNED\n")
                    except Exception:  # noqa: BLE001
                        pass
                via_link = await sb.read_file("/workspace/ok")   # a link inside the sandbox resolves there
                return results, via_link, before, _file_ops(admin)
            finally:
                await sb.close()

    results, via_link, before, after = run(go())
    assert all("HOST-SECRET" not in r for r in results.values()), results
    assert secret.read_text() == "HOST-SECRET-0815\n"
    assert sorted(p.name for p in host_secret.iterdir()) == ["secret.txt"]
    assert via_link == "inside\n"
    assert after["sandboxed"] - before["sandboxed"] == 6   # every link was left to the sandbox's own cat


def _in_file_thread(fn, *args):
    """Run ``fn`` on a fresh thread with the sandbox user's file identity (what FileThreads' threads do)."""
    out: dict = {}

    def body():
        try:
            fileio._set_identity(SANDBOX_UID, SANDBOX_UID)
            out["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            out["error"] = e
    t = threading.Thread(target=body)
    t.start()
    t.join(10)
    assert not t.is_alive(), "the file operation blocked"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def test_permissions_are_the_sandbox_users(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    os.chmod(tmp_path, 0o755)
    (root / "root-only.txt").write_text("ROOT-ONLY\n")
    os.chmod(root / "root-only.txt", 0o600)
    os.mkfifo(root / "fifo")
    os.chmod(root / "fifo", 0o666)
    os.chmod(root, 0o777)
    with pytest.raises(fileio.Fallback):      # root can read it; the sandbox user cannot
        _in_file_thread(fileio.read, root, ["root-only.txt"], 1000)
    with pytest.raises(fileio.Fallback):
        _in_file_thread(fileio.write, root, ["root-only.txt"], b"x", None, 1000)
    assert (root / "root-only.txt").read_text() == "ROOT-ONLY\n"
    with pytest.raises(fileio.Fallback):      # no reader: must not block
        _in_file_thread(fileio.write, root, ["fifo"], b"x", None, 1000)
    with pytest.raises(fileio.Fallback):
        _in_file_thread(fileio.read, root, ["fifo"], 1000)
    with pytest.raises(fileio.Fallback):      # over the sandbox's file size limit: the sandbox answers
        _in_file_thread(fileio.write, root, ["big.txt"], b"x" * 11, None, 10)
    _in_file_thread(fileio.write, root, ["a", "b.txt"], b"made\n", 0o640, 1000)
    st = os.stat(root / "a" / "b.txt")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (SANDBOX_UID, SANDBOX_UID, 0o640)
    assert os.stat(root / "a").st_uid == SANDBOX_UID
    assert _in_file_thread(fileio.read, root, ["a", "b.txt"], 1000) == b"made\n"


def test_host_location_maps_only_the_sandboxes_own_trees(tmp_path):
    assert fileio.host_location(tmp_path, "/workspace/a/b.py") == (tmp_path / "merged", ["a", "b.py"])
    assert fileio.host_location(tmp_path, "/tmp/x") == (tmp_path / "scratch" / "tmp", ["x"])
    for path in ("/workspace", "/workspace/", "/etc/passwd", "/usr/bin/python3", "/proc/1/environ",
                 "/workspacex/a", "/workspace/a/../b", "/workspace/./a", "/workspace//a"):
        assert fileio.host_location(tmp_path, path) is None, path
