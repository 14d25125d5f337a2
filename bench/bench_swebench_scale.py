"""SWE-bench-shaped images at real scale on the docker backend: history scrub, first exec, and the
verifier's ``uv run parser.py`` through the manager's mirror (cold, warm, and with the upstream
index unreachable).

    python bench/bench_swebench_scale.py [--commits 20000] [--blob-mb 160] [--uv-wheel PATH]

Needs a Docker engine with ``lts/base:bookworm`` (``sudo bash setup.sh docker``). Builds (or
reuses) the fixture image of tests/dockerhost/bigrepo.py: /testbed with ``--commits`` commits and a
pack of about ``--blob-mb`` MB, the fix and later commits reachable through branches, tags, reflog,
stash, packed-refs. Prints, in one run:

* scrub: the current scrub (services.sandbox.docker_images) of that image, against the previous
  one (``mv .git`` out of the workspace, then the same depth-1 fetch) as the baseline;
* first exec: sandbox create + the first ``git status`` in /testbed through the sandbox manager;
* verifier: a task whose test.sh runs ``uv run parser.py`` (PEP 723: ``swebench==4.1.0``,
  ``datasets==2.16.1``) in a ``registry`` sandbox: first run (the mirror fetches from the
  host's index), second run (warm mirror cache), third run with the mirror's upstream index set to an
  unreachable address (offline: served from the cache). uv comes from its PyPI wheel
  (``--uv-wheel``, else ``pip download uv==0.7.13``, the version of the published Dockerfiles).

Starts its own sandbox manager (docker backend) on a free port and stops it; removes the containers
and the bench's scrubbed images it made (the fixture image stays cached).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import docker  # noqa: E402

from services.sandbox.docker_images import SCRUB_SCRIPT, environment_image, scrubbed_image, task_image  # noqa: E402
from services.tasks.grading.bases import ImageRef  # noqa: E402
from services.tasks.grading.verifier import verify  # noqa: E402
from services.tasks.task import load_task  # noqa: E402
from tests.dockerhost.bigrepo import big_image, uv_binary, write_parser_task, write_task  # noqa: E402
from tests.dockerhost.conftest import DockerAdmin, free_port, manager_factory  # noqa: E402

# the scrub before this change (SCRUB_VERSION 2): moves .git out of the workspace first
OLD_SCRUB = r"""
set -eu
ws="$1"
cd "$ws"
base=$(git rev-parse HEAD)
old=/tmp/.lts-old-git
rm -rf "$old"; mv .git "$old"
git --git-dir="$old" update-ref refs/lts/base "$base"
git init -q
git symbolic-ref HEAD refs/heads/main
git -c fetch.unpackLimit=100000000 -c transfer.unpackLimit=100000000 fetch -q --no-tags --depth 1 --update-head-ok \
    "file://$old" refs/lts/base:refs/heads/main
git reset -q
git update-index -q --refresh >/dev/null || true
rm -rf "$old" .git/logs .git/FETCH_HEAD .git/ORIG_HEAD .git/hooks/*
"""

def timed(fn, *a, **kw):
    t = time.monotonic()
    r = fn(*a, **kw)
    return r, time.monotonic() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=20_000)
    ap.add_argument("--blob-mb", type=int, default=160)
    ap.add_argument("--uv-wheel", help="a uv wheel (default: pip download uv==0.7.13)")
    ap.add_argument("--skip-verifier", action="store_true")
    a = ap.parse_args()
    client = docker.from_env(timeout=900)
    tmp = Path(tempfile.mkdtemp(prefix="lts-bench-scale-"))
    made: list[str] = []
    try:
        info, t_fixture = timed(big_image, client, a.commits, a.blob_mb)
        print(f"fixture {info['image']}: {info['commits']} commits, pack {info['pack_mb']} MB "
              f"({t_fixture:.1f} s{' (cached)' if t_fixture < 5 else ''})")

        # --- scrub: the old path (baseline), then the current one (fresh, then cached) -----------------
        for label, script in (("previous path (mv .git out, depth-1 fetch)", OLD_SCRUB),
                              ("current path (fresh repo on the layer, depth-1 fetch, renamed in)", SCRUB_SCRIPT)):
            c = client.containers.run(info["image"], ["sleep", "infinity"], entrypoint=[], detach=True,
                                      network_mode="none", user="0:0", labels={"lts.bench": "scale"})
            try:
                t = time.monotonic()
                rc, out = c.exec_run(["/bin/sh", "-c", script, "scrub", "/testbed"], user="0:0")
                t_in = time.monotonic() - t
                _, hist = c.exec_run(["/bin/sh", "-c", "cd /testbed && git log --all --reflog --oneline | wc -l"])
            finally:
                c.remove(force=True)
            print(f"scrub script in a container, {label}: {t_in:.2f} s (exit {rc}; commits left: "
                  f"{hist.decode().strip()})")
        task = load_task(write_task(tmp / "task", info, name=f"bench__scale-{os.getpid()}"))
        env_image = environment_image(client, task)
        made.append(env_image)
        ws, t_new = timed(scrubbed_image, client, task, env_image, tmp / "raw")
        made.append(ws["image"])
        _, t_cached = timed(scrubbed_image, client, task, env_image, tmp / "raw")
        print(f"scrub of the task image (container, export of upstream files, scrub, commit): "
              f"{t_new:.2f} s; cached by image id: {t_cached:.3f} s")

        # --- first exec and the verifier through the manager --------------------------------------------
        mirror_dir = tmp / "mirror"
        adm = DockerAdmin(tmp / "admin", f"bs{os.getpid()}", free_port(),
                          docker={"mirror": {"dir": str(mirror_dir), "raw_online": False}}).start()
        try:
            async def first_exec():
                async with adm.client() as mc:
                    t = time.monotonic()
                    ref = ImageRef(ws["image"], ws["commit"], {"cpus": 1.0, "memory_mb": 1024})
                    sb = await manager_factory(mc)(ref)
                    t_create = time.monotonic() - t
                    r = await sb.run("git status --short | wc -l; git log --all --oneline | wc -l")
                    t_exec = time.monotonic() - t - t_create
                    await sb.close()
                    return t_create, t_exec, r.output.split()
            t_create, t_exec, out = asyncio.run(first_exec())
            print(f"sandbox create {t_create:.2f} s, first exec (git status + git log --all) {t_exec:.2f} s "
                  f"-> changed files {out[0]}, commits {out[1]}")
        finally:
            adm.stop()
        if a.skip_verifier:
            return 0

        uv = uv_binary(tmp, a.uv_wheel)
        vt = write_parser_task(tmp / "vtask", info, uv, name=f"bench__parser-{os.getpid()}")
        vtask = load_task(vt)
        vimg = task_image(client, vtask, tmp / "raw")
        made += [vimg["env_image"], vimg["image"]]
        gold = (vt / "solution" / "solve.sh").read_text()
        for label, index in (("first run (mirror fetches from the host's index)", None),
                             ("second run (warm mirror cache)", None),
                             ("third run, upstream index unreachable (offline)", "http://127.0.0.1:9/simple")):
            mcfg = {"dir": str(mirror_dir), "raw_online": False, **({"index_url": index} if index else {})}
            adm = DockerAdmin(tmp / f"admin-{len(label)}", f"bv{os.getpid()}", free_port(),
                              docker={"mirror": mcfg}).start()
            try:
                async def run_verifier(adm: DockerAdmin = adm):
                    async with adm.client() as mc:
                        sb = await mc.create(image=vimg["image"], limits={"cpus": 2.0, "memory_mb": 2048},
                                             network="registry")
                        try:
                            await sb.run(gold.split("\n", 2)[2], timeout=60, cwd="/testbed")
                            t = time.monotonic()
                            res = await verify(sb, vtask, timeout=900)
                            return res, time.monotonic() - t
                        finally:
                            await sb.close()
                res, t_v = asyncio.run(run_verifier())
            finally:
                adm.stop()
            print(f"verifier, {label}: {t_v:.1f} s, reward {res.reward:g}"
                  + (f", {res.error}: {res.reason}" if res.error else "")
                  + ("" if res.reward == 1.0 else f"\n{res.output_tail[-1500:]}"))
        files = sum(1 for p in (mirror_dir / "pypi" / "files").rglob("*") if p.is_file())
        size = sum(p.stat().st_size for p in (mirror_dir / "pypi" / "files").rglob("*") if p.is_file()) >> 20
        print(f"mirror cache: {files} files, {size} MB")
        return 0
    finally:
        for tag in reversed(made):
            try:
                client.images.remove(tag, force=True)
            except Exception:  # noqa: BLE001 - shared with another image or gone
                pass
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
