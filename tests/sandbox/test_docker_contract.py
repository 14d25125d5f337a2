"""Contract test of the docker backend with a fake Docker SDK client (the SDK calls it makes):
the container is created locked down, commands run as the sandbox user under a timeout,
timeouts kill every process of the user through the API, and destroy kills + removes.
The same backend on a real engine: tests/dockerhost/."""

from __future__ import annotations

import io
import tarfile
import time

import pytest

from services.sandbox.backends.base import ExecRequest, SandboxSpec
from services.sandbox.backends.docker_backend import DockerBackend
from services.sandbox.limits import Limits

from .conftest import run

pytest.importorskip("docker")


class FakeContainer:
    def __init__(self, api, kwargs):
        self.id = f"c{len(api.containers)}"
        self.kwargs = kwargs
        self.api = api
        self.archives: list[tuple[str, bytes]] = []
        self.exec_runs: list[tuple[list[str], str]] = []
        self.killed = self.removed = False

    def exec_run(self, argv, user=None):
        self.exec_runs.append((argv, user))
        if argv[:3] == ["kill", "-9", "-1"]:
            self.api.release.set = True
        return 0, b""

    def put_archive(self, path, data):
        self.archives.append((path, data))
        return True

    def kill(self):
        self.killed = True

    def remove(self, force=False):
        self.removed = True


class _Flag:
    set = False


class FakeAPI:
    def __init__(self):
        self.containers: list[FakeContainer] = []
        self.execs: dict[str, dict] = {}
        self.release = _Flag()

    def exec_create(self, cid, argv, **kw):
        eid = f"e{len(self.execs)}"
        self.execs[eid] = {"argv": argv, **kw}
        return eid

    def exec_start(self, eid, stream, demux):
        argv = self.execs[eid]["argv"]
        script = " ".join(argv)

        def gen():
            if "hang" in script:           # a setsid child keeps the stream open until killed
                while not self.release.set:
                    time.sleep(0.01)
                self.execs[eid]["rc"] = 137
                return
            if "flood" in script:
                for _ in range(100):
                    yield (b"y" * 1000, None)
            yield (b"out\n", b"err\n")
            self.execs[eid]["rc"] = 3
        return gen()

    def exec_inspect(self, eid):
        return {"ExitCode": self.execs[eid].get("rc")}


class FakeDocker:
    def __init__(self):
        self.api = FakeAPI()
        outer = self

        class Containers:
            def run(self, image, **kwargs):
                c = FakeContainer(outer.api, {"image": image, **kwargs})
                outer.api.containers.append(c)
                return c

            def list(self, all=False, filters=None):
                return []
        self.containers = Containers()

        class Image:
            attrs = {"Config": {"WorkingDir": ""}}   # no WORKDIR: the backend's /workspace

        class Images:
            def get(self, name):
                return Image()
        self.images = Images()

    def ping(self):
        return True

    def info(self):
        return {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]}


def test_docker_backend_contract(tmp_path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "a.py").write_text("x = 1\n")
    fake = FakeDocker()
    b = DockerBackend(fake, worker_name="w1", default_image="task-image:1", user="1000:1000")

    async def main():
        await b.start()
        await b.create("sb1", SandboxSpec(base_dir=str(tmp_path / "repo"),
                                          limits=Limits(memory_mb=512, cpus=0.5, pids=64, disk_mb=100)))
        out = await b.exec("sb1", ExecRequest(argv=["bash", "-c", "echo hi"], timeout=5, cwd="/workspace"))
        flood = await b.exec("sb1", ExecRequest(argv=["flood"], timeout=5, max_output=5000))
        hang = await b.exec("sb1", ExecRequest(argv=["hang"], timeout=0.2))
        stdin = await b.exec("sb1", ExecRequest(argv=["cat"], stdin=b"data", timeout=5))
        await b.destroy("sb1")
        return out, flood, hang, stdin

    out, flood, hang, stdin = run(main())
    c = fake.api.containers[0]
    kw = c.kwargs
    assert kw["image"] == "task-image:1" and kw["network_mode"] == "none" and kw["cap_drop"] == ["ALL"]
    assert kw["security_opt"] == ["no-new-privileges"] and kw["user"] == "1000:1000"
    assert kw["mem_limit"] == "512m" and kw["pids_limit"] == 64 and kw["nano_cpus"] == 500_000_000
    assert kw["labels"] == {"lts.sandbox": "sb1", "lts.worker": "w1", "lts.network": "none"}
    assert "privileged" not in kw
    # base copied in as a tar owned by the sandbox user
    path, data = c.archives[0]
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        m = tf.getmember("a.py")
        assert path == "/workspace" and (m.uid, m.gid) == (1000, 1000)
    first = fake.api.execs["e0"]
    assert first["argv"][:4] == ["timeout", "-s", "KILL", "5"] and first["user"] == "1000:1000"
    assert out.exit_code == 3 and out.stdout == b"out\n" and out.stderr == b"err\n"
    assert flood.truncated and len(flood.stdout) == 5000
    assert hang.timed_out and hang.exit_code == -1
    assert (["kill", "-9", "-1"], "1000:1000") in c.exec_runs      # timeout kills the whole user via the API
    assert any(p == "/.lts-stdin" for p, _ in c.archives[1:])       # stdin travelled as a file
    assert c.killed and c.removed
