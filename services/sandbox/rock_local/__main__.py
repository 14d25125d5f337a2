"""python -m services.sandbox.rock_local start|stop|status — a real ROCK admin (rl-rock 1.11.0,
.venv-rock from `bash setup.sh rock`) on this host's Docker engine, for tests and for trying the
``rock`` backend without a ROCK cluster.

start: a Ray head on 127.0.0.1, ROCK's host worker rocklet (127.0.0.1), and ROCK's admin (its
address forced to 127.0.0.1) with rock_local/admin.yaml.tmpl, the docker shim (rock_local/docker)
first in its PATH. Prints the admin URL once it answers. Logs: <state>/*.log; pids:
<state>/pids.json. stop: stops exactly those processes (their process groups) and removes the
containers this ROCK started (label lts.rock=<key of the state dir>). Never uses `ray stop` or
`rock admin stop` (both stop other people's processes too).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
ADMIN_BOOT = ("import sys, uvicorn; run = uvicorn.run\n"
              "uvicorn.run = lambda *a, **k: run(*a, **{**k, 'host': '127.0.0.1'})\n"
              "from rock.admin.main import main; sys.argv[0] = 'admin'; main()\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def state_key(state: Path) -> str:
    return hashlib.sha256(str(state.resolve()).encode()).hexdigest()[:12]


def render(template: Path, values: dict[str, str]) -> str:
    text = template.read_text()
    for k, v in values.items():
        text = text.replace("{{" + k + "}}", v)
    return text


PROCS: dict[int, subprocess.Popen] = {}


def spawn(argv: list[str], log: Path, env: dict[str, str]) -> int:
    p = subprocess.Popen(argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=env, cwd=log.parent, start_new_session=True)
    PROCS[p.pid] = p
    return p.pid


def exited(pid: int) -> bool:
    return PROCS[pid].poll() is not None


def wait_http(url: str, pid: int, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if exited(pid):
            raise SystemExit(f"rock_local: {log.name} process exited; see {log}:\n{log.read_text()[-3000:]}")
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.3)
    raise SystemExit(f"rock_local: {url} did not answer within {timeout:.0f} s; see {log}")


def start(args: argparse.Namespace) -> None:
    state: Path = args.state.resolve()
    venv: Path = args.venv.resolve()
    if (state / "pids.json").exists():
        raise SystemExit(f"rock_local: {state}/pids.json exists: stop that one first (or remove the file)")
    for tool in ("ray", "rocklet", "python"):
        if not (venv / "bin" / tool).exists():
            raise SystemExit(f"rock_local: {venv}/bin/{tool} missing: run `bash setup.sh rock`")
    real_docker = shutil.which("docker")
    if real_docker is None or subprocess.run([real_docker, "info"], capture_output=True).returncode != 0:
        raise SystemExit("rock_local: no Docker engine answers (`sudo bash setup.sh docker`)")
    state.mkdir(parents=True, exist_ok=True)
    key = state_key(state)
    ray_tmp = Path("/tmp") / f"lts-rock-{key}"   # Ray's socket paths must stay short
    ray_port, rocklet_port, admin_port = free_port(), free_port(), args.port or free_port()
    python_prefix = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print(sys.base_prefix)"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    conf = state / "rock-admin.yml"
    agent_venv = args.agent_venv.resolve()
    agent_mount = (f"          - {{local: {agent_venv}, container: {agent_venv}}}"
                   if (agent_venv / "bin" / "mini").exists() else "")
    conf.write_text(render(HERE / "admin.yaml.tmpl", {
        "ray_address": f"127.0.0.1:{ray_port}", "ray_tmp": str(ray_tmp),
        "aes_key": base64.b64encode(secrets.token_bytes(32)).decode(), "python_prefix": python_prefix,
        "venv": str(venv), "agent_mount": agent_mount}))
    env = {**os.environ, "PATH": f"{HERE}:{venv / 'bin'}:{os.environ.get('PATH', '')}", "LTS_REAL_DOCKER": real_docker,
           "LTS_ROCK_LABEL": key, "ROCK_CONFIG": str(conf), "ROCK_WORKER_ROCKLET_PORT": str(rocklet_port),
           "ROCK_SERVICE_STATUS_DIR": str(state / "status"), "ROCK_PIP_INDEX_URL": "https://pypi.org/simple",
           "RAY_USAGE_STATS_ENABLED": "0", "VIRTUAL_ENV": str(venv)}
    (state / "status").mkdir(exist_ok=True)
    pids: dict[str, int] = {}
    try:
        pids["ray"] = spawn([str(venv / "bin" / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
                             f"--port={ray_port}", "--include-dashboard=false", f"--temp-dir={ray_tmp}",
                             f"--num-cpus={args.num_cpus}", "--disable-usage-stats"], state / "ray.log", env)
        pids["rocklet"] = spawn([str(venv / "bin" / "rocklet"), "--host", "127.0.0.1", "--port", str(rocklet_port)],
                                state / "rocklet.log", env)
        (state / "pids.json").write_text(json.dumps({**pids, "label": key}))
        wait_http(f"http://127.0.0.1:{rocklet_port}/is_alive", pids["rocklet"], state / "rocklet.log", 60)
        wait_ray(venv, ray_port, pids["ray"], state / "ray.log")
        pids["admin"] = spawn([str(venv / "bin" / "python"), "-c", ADMIN_BOOT, "--env", "local", "--port",
                               str(admin_port)], state / "admin.log", env)
        (state / "pids.json").write_text(json.dumps({**pids, "label": key}))
        wait_http(f"http://127.0.0.1:{admin_port}/", pids["admin"], state / "admin.log", args.timeout)
    except BaseException:
        stop(args)
        raise
    url = f"http://127.0.0.1:{admin_port}"
    (state / "url").write_text(url)
    print(url, flush=True)


def wait_ray(venv: Path, port: int, pid: int, log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if exited(pid):
            raise SystemExit(f"rock_local: the Ray head exited; see {log}:\n{log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise SystemExit(f"rock_local: the Ray head did not come up within 90 s; see {log}")


def stop(args: argparse.Namespace) -> None:
    state: Path = args.state.resolve()
    f = state / "pids.json"
    if not f.exists():
        print(f"rock_local: nothing started in {state}")
        return
    pids = json.loads(f.read_text())
    for name in ("admin", "rocklet", "ray"):   # the admin first: it stops its sandboxes' actors
        pid = pids.get(name)
        if pid is None:
            continue
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    docker = os.environ.get("LTS_REAL_DOCKER") or shutil.which("docker") or "docker"
    ids = subprocess.run([docker, "ps", "-aq", "--filter", f"label=lts.rock={pids['label']}"],
                         capture_output=True, text=True).stdout.split()
    if ids:
        subprocess.run([docker, "rm", "-f", *ids], capture_output=True)
    f.unlink()
    shutil.rmtree(Path("/tmp") / f"lts-rock-{pids['label']}", ignore_errors=True)   # Ray's session files
    print(f"rock_local: stopped ({len(ids)} leftover containers removed)")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m services.sandbox.rock_local", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["start", "stop"])
    p.add_argument("--state", type=Path, default=REPO / "state" / "rock",
                   help="logs, config, pids (default state/rock)")
    p.add_argument("--venv", type=Path, default=REPO / ".venv-rock", help="rl-rock[admin] venv (setup.sh rock)")
    p.add_argument("--agent-venv", type=Path, default=REPO / ".venv-agent",
                   help="mini-swe-agent venv bind-mounted into the sandboxes when it exists (default .venv-agent)")
    p.add_argument("--port", type=int, default=None, help="admin port (default: a free one)")
    p.add_argument("--num-cpus", type=int, default=max(8, os.cpu_count() or 2),
                   help="Ray's logical CPUs: each sandbox actor takes its sandbox's cpus, so this bounds the sandboxes "
                        "at once (the containers' real limit is their own --cpus; default max(8, cores))")
    p.add_argument("--timeout", type=float, default=180, help="seconds to wait for the admin")
    args = p.parse_args()
    start(args) if args.action == "start" else stop(args)


if __name__ == "__main__":
    sys.exit(main())
