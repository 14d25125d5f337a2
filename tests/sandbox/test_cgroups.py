"""The cgroup v2 (unified hierarchy) path of services/sandbox/local/cgroups.py over a fake cgroupfs:
a plain directory plus the kernel's side of mkdir / rmdir / writes (interface files appear in a new
group for each controller its parent enables; "+c" to cgroup.subtree_control needs c in
cgroup.controllers; a group with children cannot be removed). The real kernel path runs in
tests/sandbox/test_hostile.py on a cgroup v2 host."""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import shutil
from pathlib import Path

import httpx
import pytest

from services.sandbox.client import SandboxManagerClient
from services.sandbox.limits import Limits
from services.sandbox.local import cgroups
from services.sandbox.local.backend import LocalBackend, LocalSandbox

from .conftest import requires_bwrap, requires_root

ALL = "cpuset cpu io memory hugetlb pids"
FILES = {"memory": {"memory.max": "max", "memory.swap.max": "max",
                    "memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"},
         "pids": {"pids.max": "max"}, "cpu": {"cpu.max": "max 100000"}}


class FakeCgroupFS:
    def __init__(self, root: Path, controllers: str = ALL, swap: bool = True):
        self.root, self.swap, self.killed = root, swap, []
        root.mkdir()
        for name, value in (("cgroup.procs", "1\n"), ("cgroup.controllers", controllers),
                            ("cgroup.subtree_control", "")):
            (root / name).write_text(value)

    def mkdir(self, d: Path) -> None:
        if d.exists():
            return
        d.mkdir()
        enabled = (d.parent / "cgroup.subtree_control").read_text().split()
        files = {"cgroup.procs": "", "cgroup.kill": "", "cgroup.subtree_control": "",
                 "cgroup.controllers": " ".join(enabled)}
        for c in enabled:
            files.update({k: v for k, v in FILES.get(c, {}).items() if self.swap or k != "memory.swap.max"})
        for name, value in files.items():
            (d / name).write_text(value)

    def rmdir(self, d: Path) -> None:
        if not d.exists():
            raise FileNotFoundError(d)
        if any(p.is_dir() for p in d.iterdir()):
            raise OSError(errno.EBUSY, "Device or resource busy", str(d))
        shutil.rmtree(d)

    def write(self, path: Path, value: str) -> None:
        if not path.exists():
            raise FileNotFoundError(path)
        if path.name == "cgroup.subtree_control":
            c = value.removeprefix("+")
            if c not in (path.parent / "cgroup.controllers").read_text().split():
                raise OSError(errno.ENOENT, "No such file or directory", str(path))
            path.write_text(" ".join(path.read_text().split() + [c]))
            for child in (p for p in path.parent.iterdir() if p.is_dir()):  # children see it at once
                ctl = child / "cgroup.controllers"
                ctl.write_text(" ".join(ctl.read_text().split() + [c]))
                for k, v in FILES.get(c, {}).items():
                    if self.swap or k != "memory.swap.max":
                        (child / k).write_text(v)
        elif path.name == "cgroup.kill":
            self.killed.append(path.parent.name)
        else:
            path.write_text(value)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    def make(**kw) -> FakeCgroupFS:
        fs = FakeCgroupFS(tmp_path / "cgroup", **kw)
        monkeypatch.setattr(cgroups, "CGROUP_ROOT", fs.root)
        monkeypatch.setattr(cgroups, "_mkdir", fs.mkdir)
        monkeypatch.setattr(cgroups, "_rmdir", fs.rmdir)
        monkeypatch.setattr(cgroups, "_write", fs.write)
        return fs
    return make


def test_unified_host_enforces_memory_pids_cpu_and_kill(fake):
    fs = fake()
    sup = cgroups.detect("lts-test")
    assert (sup.mode, sup.enforced, sup.usable) == ("v2", cgroups.LIMITS, True) and sup.describe()["fallback"] == {}
    for d in (fs.root, fs.root / "lts-test"):  # the controllers reach the sandboxes' parent
        assert set((d / "cgroup.subtree_control").read_text().split()) == {"memory", "pids", "cpu"}
    assert not (fs.root / "lts-test" / ".probe").exists()

    cg = cgroups.SandboxCgroups("lts-test", "sb1", sup)
    cg.create(Limits(memory_mb=256, pids=64, cpus=1.5))
    sb = fs.root / "lts-test" / "sb1"
    assert (sb / "memory.max").read_text() == str(256 * 1024 * 1024) and (sb / "memory.swap.max").read_text() == "0"
    assert (sb / "pids.max").read_text() == "64" and (sb / "cpu.max").read_text() == "150000 100000"
    assert cg.v1 == [] and cg.unit("cmd1") == [str(sb / "cmd1" / "cgroup.procs")]  # no v1 groups to join
    cg.unit("cmd2")
    cg.kill_unit("cmd1")
    assert fs.killed == ["cmd1"] and not (sb / "cmd1").exists()
    cg.apply(Limits(memory_mb=512, pids=32, cpus=0.5))  # new limits on a live group
    assert (sb / "memory.max").read_text() == str(512 * 1024 * 1024) and (sb / "cpu.max").read_text() == "50000 100000"
    cg.destroy()
    assert "cmd2" in fs.killed and "sb1" in fs.killed and not sb.exists()


def test_missing_controller_is_reported_and_falls_back(fake):
    fake(controllers="cpuset cpu io memory", swap=False)  # no pids controller, no swap accounting
    sup = cgroups.detect("lts-test")
    assert sup.mode == "v2" and sup.enforced == ("memory", "cpu", "kill") and sup.usable
    info = sup.describe()
    assert list(info["fallback"]) == ["pids"] and "RLIMIT_NPROC" in info["fallback"]["pids"]
    assert "pids" in info["reason"]
    cg = cgroups.SandboxCgroups("lts-test", "sb1", sup)
    cg.create(Limits(memory_mb=128, pids=64))  # writes only what is enforced (no pids.max, no memory.swap.max here)
    assert (cg.v2 / "memory.max").read_text() == str(128 * 1024 * 1024) and not (cg.v2 / "pids.max").exists()
    cg.destroy()


def test_local_backend_logs_loudly_and_adds_rlimit_nproc_without_pids(fake, tmp_path, caplog):

    fake(controllers="cpuset cpu io memory")
    be = LocalBackend(tmp_path / "state")
    be.cgroup_support, be.use_cgroups = cgroups.detect(be.cgroup_parent), True
    with caplog.at_level(logging.WARNING):
        be._log_limits()
    assert any("pids limit NOT enforced" in r.getMessage() and "RLIMIT_NPROC" in r.getMessage() for r in caplog.records)
    assert be.limits_info()["enforced"] == ["memory", "cpu", "kill"]
    cg = cgroups.SandboxCgroups(be.cgroup_parent, "sb1", be.cgroup_support)
    cg.create(Limits())
    sb = LocalSandbox("sb1", None, Limits(pids=77), {}, cg, [])
    cont, _ = be._containment(sb, "u1")
    assert (resource.RLIMIT_NPROC, 77) in cont.rlimits
    cg.destroy()


def test_no_cgroups_at_all_reports_every_fallback(tmp_path, monkeypatch):
    monkeypatch.setattr(cgroups, "CGROUP_ROOT", tmp_path / "none")
    sup = cgroups.detect("lts-test")
    assert sup.mode is None and not sup.usable and set(sup.describe()["fallback"]) == set(cgroups.LIMITS)


@requires_bwrap
@requires_root
def test_real_sandbox_gets_its_cgroup_limits(admin, base_repo):
    """On this host's real cgroups (v1 hybrid or v2 unified): /health says every limit is enforced, the
    sandbox's own group carries its limits, and a memory bomb is stopped by the memory cgroup (its OOM
    or fail counter moves), not by the 16 GB RLIMIT_AS backstop."""

    info = httpx.get(admin.url + "/health", timeout=10).json()["result"]["limits"]
    assert info["enforced"] == list(cgroups.LIMITS) and info["fallback"] == {}, info
    bomb = 'python3 -c "\nx = []\nwhile True:\n    x.append(bytearray(16 * 1024 * 1024))\n"'

    async def go():
        async with SandboxManagerClient(admin.url, admin.key) as mgr:
            sb = await mgr.create(base_dir=base_repo, limits={"memory_mb": 128, "pids": 48, "disk_mb": 64, "cpus": 0.5})
            try:
                v2 = cgroups.v2_root()
                if info["cgroups"] == "v2":
                    (d,) = v2.glob(f"lts-sandbox-*/{sb.sandbox_id}")
                    limits = [(d / f).read_text().strip() for f in ("memory.max", "pids.max", "cpu.max")]
                    events = d / "memory.events"
                    counter = lambda: int(dict(l.split() for l in events.read_text().splitlines())["oom_kill"])  # noqa: E731
                else:
                    (m,) = (cgroups.CGROUP_ROOT / "memory").glob(f"lts-sandbox-*/{sb.sandbox_id}")
                    (p,) = (cgroups.CGROUP_ROOT / "pids").glob(f"lts-sandbox-*/{sb.sandbox_id}")
                    (c,) = (cgroups.CGROUP_ROOT / "cpu").glob(f"lts-sandbox-*/{sb.sandbox_id}")
                    limits = [(m / "memory.limit_in_bytes").read_text().strip(), (p / "pids.max").read_text().strip(),
                              f"{(c / 'cpu.cfs_quota_us').read_text().strip()} "
                              f"{(c / 'cpu.cfs_period_us').read_text().strip()}"]
                    counter = lambda: int((m / "memory.failcnt").read_text())  # noqa: E731
                before = counter()
                res = await sb.run(bomb, timeout=60)
                return limits, before, counter(), res
            finally:
                await sb.close()

    limits, before, after, res = asyncio.run(go())
    assert limits == [str(128 * 1024 * 1024), "48", "50000 100000"], limits
    assert res.exit_code != 0 and not res.timed_out, res
    assert after > before, f"the memory cgroup never stopped the bomb ({info['cgroups']}): {res.output[-500:]}"
