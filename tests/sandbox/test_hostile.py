"""Acceptance 1: hostile agents. Each attack runs inside a real sandbox of a real admin and
must fail harmlessly, leaving the host unchanged and the manager serving."""

from __future__ import annotations

import hashlib
import socket
import time
from pathlib import Path

import httpx
import pytest

from services.sandbox.client import SandboxManagerClient

from .conftest import REPO, requires_bwrap, requires_root, run, sandbox_processes

pytestmark = [requires_bwrap, requires_root]

TIGHT = {"memory_mb": 256, "pids": 64, "disk_mb": 64, "cpus": 1.0}


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("host-sentinel")
    d.chmod(0o755)
    (d / "host-secret.txt").write_text("HOST-SECRET-4711\n")
    (d / "host-secret.txt").chmod(0o644)
    return d


def _host_state(sentinel: Path, base_repo: Path) -> dict[str, str]:
    def h(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else "missing"
    files = sorted(p for p in base_repo.rglob("*") if p.is_file() and ".git" not in p.parts)
    return {"passwd": h(Path("/etc/passwd")), "shadow": h(Path("/etc/shadow")), "pyproject": h(REPO / "pyproject.toml"),
            "sentinel": h(sentinel / "host-secret.txt"),
            "sentinel_dir": ",".join(sorted(x.name for x in sentinel.iterdir())),
            "base": ",".join(f"{p.relative_to(base_repo)}:{h(p)}" for p in files),
            "pwned": ",".join(str(p) for p in (Path("/usr/pwned"), Path("/etc/pwned"), Path("/pwned"),
                                               Path("/root/pwned"),
                                                 REPO / ".venv-control" / "pwned", REPO / "pwned") if p.exists())}


async def _attack(admin, base_repo, script: str, timeout: float = 20, max_output: int = 100_000, limits=TIGHT):
    async with SandboxManagerClient(admin.url, admin.key) as mgr:
        sb = await mgr.create(base_dir=base_repo, limits=limits)
        try:
            t = time.monotonic()
            res = await sb.run(script, timeout=timeout, max_output=max_output)
            elapsed = time.monotonic() - t
            after = await sb.run("echo still-serving", timeout=20)   # the sandbox survives the attack
            return res, elapsed, after
        finally:
            await sb.close()


@pytest.fixture
def host_unchanged(admin, sentinel, base_repo):
    before = _host_state(sentinel, base_repo)
    yield
    assert _host_state(sentinel, base_repo) == before
    assert httpx.get(admin.url + "/health").status_code == 200
    deadline = time.monotonic() + 5
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sandbox_processes() == []


def test_read_host_secrets(admin, base_repo, sentinel, host_unchanged):
    res, _, _ = run(_attack(admin, base_repo, f"""
        cat /etc/shadow; cat /root/.bash_history; ls -la /root; cat {REPO}/pyproject.toml; ls {REPO};
        cat {sentinel}/host-secret.txt; cat /proc/1/environ; ls /home; cat /sys/class/net/*/address"""))
    assert "HOST-SECRET-4711" not in res.output
    assert "[project]" not in res.output          # host project files are not visible
    assert "root:" not in res.output.split("cat /etc/shadow")[0] or "$" not in res.output
    assert "No such file" in res.output


def test_write_outside_workspace(admin, base_repo, sentinel, host_unchanged):
    res, _, _ = run(_attack(admin, base_repo, f"""
        for p in /usr/pwned /etc/pwned /pwned {REPO}/pwned {REPO}/.venv-control/pwned {sentinel}/pwned \
                 /root/.pyenv/versions/3.11.7/pwned /root/.pyenv/versions/3.11.7/bin/python3 /etc/passwd; do
            (echo x >> "$p") 2>/dev/null && echo "WROTE $p"; done; true"""))
    # A path under /tmp (e.g. a checkout there) exists inside the sandbox only as a mount-point
    # skeleton on the sandbox's private /tmp tmpfs: writing there cannot reach the host. What
    # matters is the host file system, checked below and by host_unchanged.
    wrote = [l for l in res.output.splitlines() if l.startswith("WROTE") and not l.split(" ", 1)[1].startswith("/tmp/")]
    assert not wrote, res.output
    assert not (sentinel / "pwned").exists()
    for p in (REPO / "pwned", REPO / ".venv-control" / "pwned", Path("/pwned"), Path("/etc/pwned"), Path("/usr/pwned")):
        assert not p.exists(), f"{p} appeared on the host"


def test_remount_readonly_bind(admin, base_repo, host_unchanged):
    res, _, _ = run(_attack(admin, base_repo, """
        mount -o remount,rw /usr 2>&1; mount -o remount,rw,bind /usr 2>&1;
        unshare -Ur sh -c 'mount -o remount,rw /usr && touch /usr/pwned && echo ESCAPED' 2>&1;
        touch /usr/pwned 2>/dev/null && echo WROTE-USR; grep -E '^Cap(Eff|Prm)' /proc/self/status"""))
    assert "ESCAPED" not in res.output and "WROTE-USR" not in res.output
    assert "CapEff:\t0000000000000000" in res.output
    assert not Path("/usr/pwned").exists()


def test_network_and_host_loopback(admin, base_repo, host_unchanged):
    host_ip = socket.gethostbyname(socket.gethostname())
    script = f"""python3 - <<'PY'
import socket
for host, port in [("127.0.0.1", {admin.port}), ("{host_ip}", {admin.port}), ("8.8.8.8", 53), ("1.1.1.1", 443)]:
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, port)); print("CONNECTED", host, port)
    except OSError as e:
        print("BLOCKED", host, port, e)
try:
    socket.getaddrinfo("pypi.org", 443); print("RESOLVED")
except OSError as e:
    print("NO-DNS", e)
PY"""
    res, _, _ = run(_attack(admin, base_repo, script))
    assert "CONNECTED" not in res.output and "RESOLVED" not in res.output, res.output
    assert res.output.count("BLOCKED") == 4


def test_fork_bomb(admin, base_repo, host_unchanged):
    res, elapsed, after = run(_attack(admin, base_repo, "bomb() { bomb | bomb & }; bomb; sleep 2; echo bombed",
                                      timeout=8))
    assert after.output.strip() == "still-serving"
    assert elapsed < 15


def test_memory_bomb(admin, base_repo, host_unchanged):
    res, elapsed, after = run(_attack(admin, base_repo, """python3 -c "
x = []
while True:
    x.append(bytearray(32 * 1024 * 1024))
" """, timeout=30))
    assert res.exit_code != 0 and not res.timed_out, res
    assert after.output.strip() == "still-serving"


def test_fill_disk(admin, base_repo, host_unchanged):
    res, _, after = run(_attack(admin, base_repo, """
        dd if=/dev/zero of=/workspace/big bs=1M count=500 2>&1 | tail -1
        dd if=/dev/zero of=/tmp/big bs=1M count=500 2>&1 | tail -1
        echo more >> /workspace/pkg/__init__.py || echo COPYUP-FAILED; df -m /workspace | tail -1"""))
    assert "No space left on device" in res.output, res.output
    assert after.output.strip() == "still-serving"


def test_flood_stdout(admin, base_repo, host_unchanged):
    res, elapsed, after = run(_attack(admin, base_repo, "yes flood", timeout=30, max_output=10_000))
    assert res.truncated and len(res.output) <= 10_000
    assert elapsed < 20
    assert after.output.strip() == "still-serving"


def test_sleep_past_timeout_with_setsid_children(admin, base_repo, host_unchanged):
    res, elapsed, after = run(_attack(admin, base_repo, """
        setsid sleep 3001 & (setsid sh -c 'sleep 3002' &); nohup sleep 3003 >/dev/null 2>&1 & disown; sleep 3004""",
                                      timeout=2))
    assert res.timed_out and res.exit_code == -1
    assert elapsed < 6
    deadline = time.monotonic() + 5
    while any("sleep 300" in p for p in sandbox_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any("sleep 300" in p for p in sandbox_processes())


def test_kill_the_parent(admin, base_repo, host_unchanged):
    res, _, after = run(_attack(admin, base_repo, "kill -9 $PPID; kill -9 1; kill -9 -1; sleep 1; echo survived"))
    assert after.output.strip() == "still-serving"


def test_cannot_see_host_processes(admin, base_repo, host_unchanged):
    res, _, _ = run(_attack(admin, base_repo, f"""
        ls /proc | grep -cE '^[0-9]+$'; cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '; echo;
        cat /proc/{admin.proc.pid}/cmdline 2>&1 | tr '\\0' ' '"""))
    count = int(res.output.splitlines()[0])
    assert count <= 6, res.output
    assert "services.sandbox" not in res.output and "uvicorn" not in res.output


def test_cannot_read_other_sandbox(admin, base_repo, host_unchanged):
    async def go():
        async with SandboxManagerClient(admin.url, admin.key) as mgr:
            a = await mgr.create(base_dir=base_repo, limits=TIGHT)
            b = await mgr.create(base_dir=base_repo, limits=TIGHT)
            try:
                await a.write_file("/workspace/secret_a.txt", "TOKEN-A-123\n")
                await a.run("echo TOKEN-A-123 > /tmp/secret_a_tmp.txt")
                r = await b.run(f"""find / \\( -path /proc -o -path /sys \\) -prune \\
                                        -o -name 'secret_a*' -print 2>/dev/null \\
                                        | sed 's/^/FOUND /'
                    cat /workspace/secret_a.txt 2>/dev/null || echo NOT-IN-MY-WORKSPACE
                    ls {admin.state_dir} >/dev/null 2>&1 || echo NO-STATE-DIR""", timeout=60)
                return r, await a.read_file("/workspace/secret_a.txt")
            finally:
                await a.close()
                await b.close()
    r, mine = run(go())
    assert "TOKEN-A-123" not in r.output and "FOUND" not in r.output, r.output
    assert "NOT-IN-MY-WORKSPACE" in r.output and "NO-STATE-DIR" in r.output
    assert mine == "TOKEN-A-123\n"
