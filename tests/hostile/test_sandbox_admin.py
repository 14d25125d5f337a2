"""Hostile task data and callers against the sandbox admin: no host files or host commands
through base_dir/image or a repo's git config, bounded tar checks and base cache, 4xx for bad
values (NaN, NUL, lone surrogates, wrong types, deep JSON), max_sandboxes under concurrency."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import httpx

from services.sandbox.local.workspace import BaseCache
from tests.sandbox.conftest import REPO, requires_bwrap, requires_root

pytestmark = [requires_bwrap, requires_root]
P = "/apis/envs/sandbox/v1"


def _http(a) -> httpx.Client:
    return httpx.Client(base_url=a.url + P, headers={"X-Key": a.key}, timeout=60)


def _bases(a) -> set[str]:
    d = a.state_dir / "local" / "bases"
    return {p.name for p in d.iterdir()} if d.exists() else set()


def _stop(c: httpx.Client, r: httpx.Response) -> None:
    if r.status_code == 200:
        c.post("/stop", json={"sandbox_id": r.json()["result"]["sandbox_id"]})


def test_base_dir_and_image_only_from_allowed_dirs(admin, tmp_path):
    link = tmp_path / "etc-link"
    link.symlink_to("/etc")
    # a host directory with secrets outside the allowed roots wherever the checkout lives (a CI clone
    # under /tmp is inside the fixture's allowed tmp root, so REPO/config is probed only when it is not)
    secrets = Path(tempfile.mkdtemp(prefix="lts-hostile-secrets-", dir="/var/tmp"))
    (secrets / "keys.yaml").write_text("key: secret\n")
    outside_tmp = not str(REPO.resolve()).startswith(os.path.realpath(tempfile.gettempdir()) + "/")
    repo_probes = [{"base_dir": str(REPO / "config")}, {"base_dir": str(REPO)}] if outside_tmp else []
    before = _bases(admin)
    with _http(admin) as c:
        for body in ({"base_dir": "/etc"}, {"base_dir": "/root"}, {"base_dir": str(secrets)}, *repo_probes,
                     {"image": "/etc"}, {"image": str(secrets)}, {"base_dir": str(link)},
                     {"base_dir": tempfile.gettempdir() + "/../etc"}):
            r = c.post("/start", json=body)
            _stop(c, r)
            assert r.status_code == 400, (body, r.status_code, r.text)
            assert "outside the allowed base directories" in r.json()["error"], r.text
        assert c.get("/list").status_code == 200
    assert _bases(admin) == before   # nothing was copied into the base cache
    shutil.rmtree(secrets)


def test_repo_git_filter_never_runs_on_the_host(admin, tmp_path, state_root):
    """A task repo whose .git/config defines a clean filter: refreshing the base's git index
    (on the host) must not run it; inside the sandbox the repo is intact."""
    marker_dir = state_root / "filter-marker"
    marker_dir.mkdir(exist_ok=True)
    marker_dir.chmod(0o777)
    marker = marker_dir / "ran-on-host"
    repo = tmp_path / "evil-repo"
    repo.mkdir()
    (repo / "a.txt").write_text("hello\n")
    (repo / ".gitattributes").write_text("* filter=evil\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "init"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, env=env)
    subprocess.run(["git", "config", "filter.evil.clean", f"sh -c 'touch {marker}; cat'"], cwd=repo, check=True,
                   env=env)
    with _http(admin) as c:
        r = c.post("/start", json={"base_dir": str(repo)})
        assert r.status_code == 200, r.text
        sid = r.json()["result"]["sandbox_id"]
        try:
            out = c.post("/execute",
                         json={"sandbox_id": sid, "command": "cat a.txt; git config filter.evil.clean"}).json()
            assert out["result"]["stdout"].startswith("hello\n") and "touch" in out["result"]["stdout"], out
        finally:
            c.post("/stop", json={"sandbox_id": sid})
    assert not marker.exists(), "the repo's clean filter ran on the host"


def _raw(c: httpx.Client, path: str, text: str) -> httpx.Response:
    return c.post(path, content=text.encode("utf-8", "surrogatepass"), headers={"content-type": "application/json"})


def test_bad_values_get_4xx_and_list_keeps_working(admin):
    with _http(admin) as c:
        for text in ('{"ttl_s": NaN}', '{"lease_s": Infinity}', '{"limits": {"cpus": NaN}}', '{"cpus": -Infinity}',
                     '{"limits": {"memory_mb": 1e400}}', '{"limits": {"cpus": "abc"}}',
                     '{"limits": {"pids": {"a": 1}}}',
                     '{"limits": {"memory_mb": [1]}}', '{"memory": {"x": 1}}', '{"limits": {"cpus": true}}',
                     '{"env": {"A": "x\\u0000y"}}', '{"env": {"A": "\\ud800"}}', '{"sandbox_id": "a\\u0000"}',
                     '{"limits": ' + "[" * 5000 + "]" * 5000 + "}", '{"limits": ' + '{"a":' * 200 + "1" + "}" * 201,
                     '[1, 2]', '"x"', "{bad json"):
            r = _raw(c, "/start", text)
            _stop(c, r)
            assert 400 <= r.status_code < 500, (text[:60], r.status_code, r.text[:300])
        r = c.post("/start", json={})
        assert r.status_code == 200, r.text
        sid = r.json()["result"]["sandbox_id"]
        try:
            for path, text in (("/execute", '{"sandbox_id": "%s", "command": "echo \\u0000"}'),
                               ("/execute", '{"sandbox_id": "%s", "command": "echo \\ud800"}'),
                               ("/execute", '{"sandbox_id": "%s", "command": ["echo", "\\udc80"]}'),
                               ("/execute", '{"sandbox_id": "%s", "command": "id", "timeout": NaN}'),
                               ("/execute", '{"sandbox_id": "%s", "command": "id", "cwd": "\\ud800"}'),
                               ("/execute", '{"sandbox_id": "%s", "command": "id", "max_output": "lots"}'),
                               ("/run_in_session", '{"sandbox_id": "%s", "command": "id", "timeout": Infinity}'),
                               ("/write_file", '{"sandbox_id": "%s", "path": "x", "content": "\\ud800"}'),
                               ("/write_file",
                                '{"sandbox_id": "%s", "path": "x", "content": "!!", "encoding": "base64"}'),
                               ("/write_file",
                                '{"sandbox_id": "%s", "path": "x", "content": "a", "encoding": "bogus"}'),
                               ("/read_file", '{"sandbox_id": "%s", "path": "/etc/hostname", "encoding": "bogus"}'),
                               ("/read_file", '{"sandbox_id": "%s", "path": "/etc/hostname", "errors": "bogus"}')):
                r = _raw(c, path, text.replace("%s", sid))
                assert 400 <= r.status_code < 500, (path, text, r.status_code, r.text[:300])
            c.post("/write_file", json={"sandbox_id": sid, "path": "bin.dat", "content": "/4A=", "encoding": "base64"})
            r = c.post("/read_file",
                       json={"sandbox_id": sid, "path": "bin.dat", "encoding": "ascii", "errors": "strict"})
            assert r.status_code == 400, r.text
            r = c.post("/read_file", json={"sandbox_id": sid, "path": "bin.dat", "errors": "surrogateescape"})
            assert r.status_code == 200, r.text
            assert c.post("/execute",
                          json={"sandbox_id": sid, "command": "echo alive"}).json()["result"]["stdout"] == "alive\n"
        finally:
            c.post("/stop", json={"sandbox_id": sid})
        r = c.get("/list")
        assert r.status_code == 200, r.text
        assert all(x["ttl_expires_at"] is None or x["ttl_expires_at"] < 1e12 for x in r.json()["result"])


def test_concurrent_starts_never_exceed_max_sandboxes(tight_admin):
    async def go() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=tight_admin.url + P, headers={"X-Key": tight_admin.key},
                                     timeout=120) as c:
            return await asyncio.gather(*(c.post("/start", json={}) for _ in range(24)))
    rs = asyncio.run(go())
    codes = sorted(r.status_code for r in rs)
    with _http(tight_admin) as c:
        live = [x for x in c.get("/list").json()["result"] if x["is_alive"]]
        for x in live:
            c.post("/stop", json={"sandbox_id": x["sandbox_id"]})
    assert codes.count(200) <= 3 and len(live) <= 3, (codes, len(live))
    assert set(codes) <= {200, 503}, codes


def _targz(members: list[tuple[str, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, size in members:
            info = tarfile.TarInfo(name)
            info.size = size
            tf.addfile(info, io.BytesIO(b"\0" * size))
    return buf.getvalue()


def test_tar_bombs_are_refused_without_stalling(tight_admin):
    many = _targz([(f"f{i}", 0) for i in range(5000)])           # more members than max_tar_members
    big = _targz([("zeros", 64 * 1024 * 1024)])                   # unpacks past max_tar_unpacked_mb
    assert len(many) < 1024 * 1024 and len(big) < 1024 * 1024
    rss0 = _rss_mb(tight_admin.proc.pid)
    with _http(tight_admin) as c:
        sid = c.post("/start", json={}).json()["result"]["sandbox_id"]
        try:
            for data, what in ((many, "members"), (big, "bytes")):
                t = time.monotonic()
                r = c.post("/upload", data={"sandbox_id": sid, "target_path": "/workspace/x", "extract": "tar"},
                           files={"file": ("a.tar.gz", data)})
                assert r.status_code == 413 and what in r.json()["error"], r.text
                assert time.monotonic() - t < 10
            ok = _targz([("d/a.txt", 3)])
            r = c.post("/upload", data={"sandbox_id": sid, "target_path": "/workspace/x", "extract": "tar"},
                       files={"file": ("a.tar.gz", ok)})
            assert r.status_code == 200, r.text
        finally:
            c.post("/stop", json={"sandbox_id": sid})
    grew = _rss_mb(tight_admin.proc.pid) - rss0
    print(f"admin RSS {rss0:.0f} MB, +{grew:.0f} MB after the tar bombs")
    assert grew < 50, grew


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_base_cache_is_evicted_lru_by_bytes(tmp_path):
    cache = BaseCache(tmp_path / "bases", 0, 0, chown=False, max_bytes=3 * 1024 * 1024)
    cache.RECENT_S = 0
    ids = []
    for i in range(4):
        src = tmp_path / f"src{i}"
        src.mkdir()
        (src / "blob").write_bytes(bytes([i]) * (1024 * 1024))
        ids.append(cache.prepare(str(src)).base_id)
        time.sleep(0.02)
        cache.evict(in_use={ids[0]})       # the first one stays mounted somewhere
    left = {p.name for p in (tmp_path / "bases").iterdir()}
    assert ids[0] in left and ids[3] in left and ids[1] not in left, (ids, left)
    assert sum(int((tmp_path / "bases" / b / "bytes").read_text()) for b in left) <= 3 * 1024 * 1024
