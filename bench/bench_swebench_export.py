"""`prepare_sandbox.py swebench-export` at scale: a generated 30-row SWE-bench Verified export over the stand-in
repositories, written, then N tasks (default 20) prepared on the docker backend, and K of them validated.

    python bench/bench_swebench_export.py [--tasks 20] [--validate 20] [--jobs 2]

Needs a Docker engine with the stand-in images (``prepare_sandbox.py build-swebench-like-images``; the requests and
pytest ones). Each variant row's image is the stand-in's under the row's name (``docker tag``: no extra disk).
Prints, per task: writing the task files, building the task's environment image (the published Dockerfile, the
uv line from its wheel: ``--offline-build``), the history scrub (+ the upstream-file export), validation
(gold 1, empty 0, delete-the-test 0, history; through a sandbox manager with the docker backend and its mirror,
started here), and the disk each task adds (its environment and scrubbed layers, its task dir). Then the
command's own summary table. Removes the images, tags, containers and directories it made.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from services.sandbox import offline_build  # noqa: E402
from services.sandbox.docker_images import docker_client, environment_image, task_image  # noqa: E402
from services.tasks import cli  # noqa: E402
from services.tasks.sources import swebench_export as sx  # noqa: E402
from services.tasks.task import load_task  # noqa: E402
from tests.dockerhost.conftest import DockerAdmin, containers_of, free_port  # noqa: E402


def factory_for(adm: DockerAdmin):
    clients: dict = {}

    async def factory(base):
        loop = asyncio.get_running_loop()
        if loop not in clients:
            clients[loop] = adm.client()
        return await clients[loop].create(image=str(base), limits=base.limits, network=base.network)
    return factory


def tag_variants(client, rows) -> list[str]:
    """Each row's image: its stand-in's image under the row's name."""
    made = []
    for r in rows:
        name = sx.image_of(r["instance_id"])
        head, num = r["instance_id"].rsplit("-", 1)
        src = sx.image_of(f"{head}-{90000 + int(num) % 1000}")   # variant_id's inverse
        try:
            client.images.get(name)
        except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound
            client.images.get(src).tag(*name.rsplit(":", 1))
            made.append(name)
    return made


def size(client, ref: str) -> int:
    return int(client.images.get(ref).attrs["Size"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=30)
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--validate", type=int, default=20, help="how many of the prepared tasks to validate")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    client = docker_client()
    for s in sx.STANDINS:
        client.images.get(sx.image_of(s))   # fails naming the missing stand-in image
    tmp = Path(tempfile.mkdtemp(prefix="lts-swx-bench-"))
    dataset = f"swxbench{os.getpid()}"
    rows = sx.standin_rows(a.rows)
    tags = tag_variants(client, rows)
    os.environ[offline_build.ENV_FLAG] = "1"
    os.environ["LTS_MIRROR_DIR"] = str(tmp / "mirror")
    adm = None
    try:
        t = time.monotonic()
        w = sx.write_export(rows, tmp / "tasks", dataset=dataset, progress=False)
        t_write = time.monotonic() - t
        print(f"write: {len(w.ids)} of {a.rows} rows -> task dirs in {t_write:.1f} s "
              f"({t_write / a.rows:.2f} s/task; swebench's import is most of the first)")
        tasks = [load_task(tmp / "tasks" / i) for i in w.ids[:a.tasks]]
        builds, scrubs, env_mb, ws_mb = [], [], [], []
        for task in tasks:
            t = time.monotonic()
            env = environment_image(client, task)
            builds.append(time.monotonic() - t)
            t = time.monotonic()
            ws = task_image(client, task, tmp / "mirror" / "raw")
            scrubs.append(time.monotonic() - t)
            from_image = sx.image_of(task.path.name)
            env_mb.append((size(client, env) - size(client, from_image)) / 2**20)
            ws_mb.append((size(client, ws["image"]) - size(client, env)) / 2**20)
        du = int(subprocess.run(["du", "-sk", str(tmp / "tasks")], capture_output=True, text=True).stdout.split()[0])
        med = statistics.median
        print(f"prepare {len(tasks)} tasks serially: build P50 {med(builds):.1f} s (first {builds[0]:.1f} s, max "
              f"{max(builds):.1f} s), scrub + upstream export P50 {med(scrubs):.1f} s (max {max(scrubs):.1f} s)")
        print(f"disk per task: environment layers {med(env_mb):.1f} MB (the uv layer; Docker's cache shares it "
              f"between rows of one image), scrubbed layer {med(ws_mb):.1f} MB (max {max(ws_mb):.1f}), "
              f"task dir {du / a.rows:.0f} KB; the {len(sx.STANDINS)} stand-in images "
              f"{sum(size(client, sx.image_of(s)) for s in sx.STANDINS) / 2**20:.0f} MB in all (tags share them)")
        cli._check_manager_backend = lambda backend: None   # the manager below runs the docker backend
        adm = DockerAdmin(tmp / "admin", f"sx{os.getpid()}", free_port(),
                          docker={"mirror": {"dir": str(tmp / "mirror"), "raw_online": False}}).start()
        cli._factory = lambda spec: factory_for(adm)   # type: ignore[assignment]
        export = tmp / "rows.jsonl"
        export.write_text("".join(json.dumps(r) + "\n" for r in rows))
        argv = ["swebench-export", str(export), "--dest", str(tmp / "tasks"), "--dataset", dataset,
                "--out", str(tmp / "prep"), "--jobs", str(a.jobs), "--offline-build"]
        t = time.monotonic()
        rc = cli.main(argv + ["--limit", str(a.tasks)])
        print(f"swebench-export --limit {a.tasks} (images cached): {time.monotonic() - t:.1f} s, exit {rc}")
        if a.validate:
            t = time.monotonic()
            rc = cli.main(argv + ["--limit", str(a.validate), "--validate"])
            wall = time.monotonic() - t
            print(f"swebench-export --limit {a.validate} --validate --jobs {a.jobs}: {wall:.1f} s "
                  f"({wall / a.validate:.1f} s/task wall), exit {rc}")
            t = time.monotonic()
            cli.main(argv + ["--limit", str(a.validate), "--validate", "--no-progress"])
            print(f"re-run (resume: everything done is skipped): {time.monotonic() - t:.1f} s")
    finally:
        if adm is not None:
            adm.stop()
            for c in containers_of(client, adm.worker):
                c.remove(force=True)
        for img in client.images.list():
            for tag in img.tags:
                if tag.startswith((f"lts-ws/{dataset}", f"lts-env/{dataset}")):
                    client.images.remove(tag, noprune=False)
        for tag in tags:
            client.images.remove(tag)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
