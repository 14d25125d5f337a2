"""SWE-bench-shaped tasks at real scale on real containers: the history scrub of a 20k-commit /
160 MB repo (agent sandbox and grading tree hold the base commit only, /testbed intact, gold 1 /
empty 0), the network per phase (agent: nothing answers; verifier: only the manager's mirror), and
a withheld upstream file graded as an infrastructure failure, not 0.

The fixture image (tests/dockerhost/bigrepo.py) is built once per fixture version and cached on
the engine by tag."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from services.sandbox.docker_images import task_image
from services.tasks.grading.cleangrade import grade_patch
from services.tasks.grading.verifier import verify
from services.tasks.preparation.prepare import base_of, prepare_tasks
from services.tasks.task import load_task

from .bigrepo import big_image, uv_binary, write_parser_task, write_task
from .conftest import DockerAdmin, containers_of, free_port, manager_factory

RAW = "raw.githubusercontent.com"


@pytest.fixture(scope="module")
def big(docker_client):
    return big_image(docker_client)


def _fetch_raw(setup: str) -> str:
    """test.sh lines: fetch an upstream file as swebench's make_test_spec does (requests-style HTTPS
    through HTTPS_PROXY, the mirror's CA); without it the grading fails, as the published parser does."""
    url = f"https://{RAW}/lts/calc/{setup}/requirements-dev.txt"
    return (f"python3 -c \"import urllib.request; assert urllib.request.urlopen('{url}', timeout=30).read() == "
            f"b'pytest\\n'\" >> /logs/verifier/test-output.log 2>&1 || rc=1")


@pytest.fixture(scope="module")
def prepared(big, net_admin, docker_client, tmp_path_factory):
    """Two tasks over the big image, prepared (scrubbed, upstream files exported into the admin's
    mirror store) and validated through the admin: ``plain`` (verifier without network) and ``net``
    (``[verifier] network_mode = "public"``, test.sh fetches an upstream file of a later commit)."""
    root = tmp_path_factory.mktemp("bigtasks")
    plain = load_task(write_task(root / "plain", big))
    net = load_task(write_task(root / "net", big, name="bigrepo__calc-net", verifier_network="public",
                               test_extra=_fetch_raw(big["setup"])))
    out = root / "prep"
    old = os.environ.get("LTS_MIRROR_DIR")
    os.environ["LTS_MIRROR_DIR"] = str(net_admin.dir / "mirror")   # where prepare exports the raw files
    try:
        async def main():
            async with net_admin.client() as c:
                return await prepare_tasks([plain, net], out, validate=True, factory=manager_factory(c),
                                           backend="docker", docker=docker_client, force=True, progress=False,
                                           dataset="bigrepo")
        manifest = asyncio.run(main())
    finally:
        if old is None:
            os.environ.pop("LTS_MIRROR_DIR", None)
        else:
            os.environ["LTS_MIRROR_DIR"] = old
    return {"plain": plain, "net": net, "manifest": manifest}


def test_big_history_scrubbed_gold_1_empty_0(prepared, big):
    for key in ("plain", "net"):
        e = prepared["manifest"]["tasks"][prepared[key].slug]
        v = e.get("validation") or {}
        assert not e["excluded"], e["reason"]
        assert (v["gold_reward"], v["empty_reward"], v["history_problems"]) == (1.0, 0.0, []), v
        assert v["patches"].get("delete_test_reward") == 0.0, v["patches"]
        assert e["base"]["commit"] == big["base"] and e["base"]["workdir"] == "/testbed"
    assert big["pack_mb"] >= 150 and int(big["commits"]) >= 20_000


def test_agent_sandbox_holds_the_base_only_and_no_network(prepared, big, net_admin, docker_client):
    entry = prepared["manifest"]["tasks"][prepared["plain"].slug]
    later = [big[k] for k in ("fix", "setup", "later0", "later1")]
    probes = " ; ".join(f"git cat-file -e {sha} 2>/dev/null && echo LEAK {sha}" for sha in later)
    net_probe = ("import socket\n"
                 "for host, port in [('127.0.0.1', %d), ('127.0.0.1', 3128), ('1.1.1.1', 443), ('10.0.0.1', 80)]:\n"
                 "    try:\n"
                 "        socket.create_connection((host, port), timeout=3).close(); print('OPEN', host, port)\n"
                 "    except OSError as e:\n"
                 "        print('closed', host, port)\n" % net_admin.port)

    async def main():
        async with net_admin.client() as c:
            sb = await manager_factory(c)(base_of(entry))
            try:
                host = next(x for x in containers_of(docker_client, net_admin.worker)
                            if x.labels["lts.sandbox"] == sb.sandbox_id).attrs["HostConfig"]
                assert host["NetworkMode"] == "none"
                hist = await sb.run("pwd -P; git log --all --reflog --format=%H; "
                                    "git for-each-ref --format='%(refname)'; "
                                    "git stash list | wc -l; git tag | wc -l; ls .git/objects/pack | wc -l; "
                                    "ls .git/objects/info; for f in ORIG_HEAD FETCH_HEAD packed-refs logs; do "
                                    "[ -e .git/$f ] && echo HAS $f; done; git status --porcelain | wc -l; "
                                    f"{probes}; true")
                ifaces = await sb.run("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
                net = await sb.run(f"python3 - <<'EOF'\n{net_probe}EOF")
                return hist.output.split(), ifaces.output.split(), net.output
            finally:
                await sb.close()
    hist, ifaces, net = asyncio.run(main())
    assert hist == ["/testbed", big["base"], "refs/heads/main", "0", "0", "0", "0"], hist
    assert ifaces == ["lo"], ifaces
    assert "OPEN" not in net and net.count("closed") == 4, net


def test_verifier_reaches_only_the_mirror(prepared, net_admin, docker_client):
    """A registry sandbox: the index answers through the mirror; another host through the proxy,
    the host's loopback services and any address: refused."""
    entry = prepared["manifest"]["tasks"][prepared["net"].slug]
    probe = ("import os, socket, urllib.request\n"
             "r = urllib.request.urlopen('http://127.0.0.1:3128/simple/six/', timeout=60)\n"
             "print('INDEX', r.status, b'/files/files.pythonhosted.org/' in r.read())\n"
             "for url in ['https://example.com/', 'https://pypi.org/simple/six/']:\n"
             "    try:\n"
             "        urllib.request.urlopen(url, timeout=10); print('OPEN', url)\n"
             "    except Exception as e:\n"
             "        print('refused', url)\n"
             "for host, port in [('127.0.0.1', %d), ('1.1.1.1', 443), ('172.17.0.1', 80)]:\n"
             "    try:\n"
             "        socket.create_connection((host, port), timeout=3).close(); print('OPEN', host, port)\n"
             "    except OSError:\n"
             "        print('refused', host, port)\n" % net_admin.port)

    async def main():
        async with net_admin.client() as c:
            sb = await c.create(image=str(base_of(entry)), network="registry")
            try:
                host = next(x for x in containers_of(docker_client, net_admin.worker)
                            if x.labels["lts.sandbox"] == sb.sandbox_id).attrs["HostConfig"]
                assert host["NetworkMode"] == "none" and host["CapDrop"] == ["ALL"]
                r = await sb.run(f"python3 - <<'EOF'\n{probe}EOF", timeout=120)
                denied = await sb.run("cat /.lts-net/denied.log; touch /.lts-net/misses.log 2>&1 || echo RO")
                return r.output, denied.output
            finally:
                await sb.close()
    out, denied = asyncio.run(main())
    assert "INDEX 200 True" in out, out
    assert "OPEN" not in out and out.count("refused") == 5, out
    assert "example.com:443" in denied and "pypi.org:443" in denied and "RO" in denied, denied


def test_withheld_upstream_file_is_an_infra_failure(prepared, big, net_admin):
    """The gold patch of the task whose verifier fetches an upstream file: 1 with the file the
    mirror exported from the image's history; with it withheld, an infrastructure failure (never 0)."""
    task, entry = prepared["net"], prepared["manifest"]["tasks"][prepared["net"].slug]
    gold = json.loads((task.tests_dir / "config.json").read_text())["patch"].encode()
    stored = net_admin.dir / "mirror" / "raw" / "lts" / "calc" / big["setup"] / "requirements-dev.txt"
    assert stored.read_bytes() == b"pytest\n"   # exported from the full history before the scrub

    async def grade():
        async with net_admin.client() as c:
            return await grade_patch(task, base_of(entry), manager_factory(c), gold)
    assert asyncio.run(grade()).reward == 1.0
    stored.unlink()
    try:
        res = asyncio.run(grade())
    finally:
        stored.write_bytes(b"pytest\n")
    assert res.infra and res.error == "VerifierInfraError", res
    assert f"{RAW}/lts/calc/{big['setup']}/requirements-dev.txt" in res.reason


def test_parser_resolves_its_packages_through_the_mirror_then_offline(big, net_admin, docker_client, tmp_path):
    """``uv run parser.py`` (PEP 723: swebench==4.1.0, datasets==2.16.1) in the verifier's registry
    sandbox: resolved through the mirror from the host's index, then again with the mirror's upstream
    index unreachable (its cache only): gold 1 both times."""
    task = load_task(write_parser_task(tmp_path / "parser", big, uv_binary(tmp_path)))
    img = task_image(docker_client, task, net_admin.dir / "mirror" / "raw")
    gold = (task.solution_dir / "solve.sh").read_text().split("\n", 2)[2]
    offline = DockerAdmin(tmp_path / "offline", f"do{os.getpid()}", free_port(),
                          docker={"mirror": {"dir": str(net_admin.dir / "mirror"), "raw_online": False,
                                             "index_url": "http://127.0.0.1:9/simple"}})

    async def grade(adm):
        async with adm.client() as c:
            sb = await c.create(image=img["image"], limits={"cpus": 2.0, "memory_mb": 2048}, network="registry")
            try:
                assert (await sb.run(gold, timeout=60, cwd="/testbed")).exit_code == 0
                return await verify(sb, task, timeout=900)
            finally:
                await sb.close()
    try:
        first = asyncio.run(grade(net_admin))
        assert (first.reward, first.error) == (1.0, None), first
        assert first.report == {"swebench": "4.1.0", "datasets": "2.16.1"}
        offline.start()
        second = asyncio.run(grade(offline))
        assert (second.reward, second.error) == (1.0, None), second
    finally:
        assert offline.stop() == 0
        assert containers_of(docker_client, offline.worker) == []
        for tag in (img["image"], img["env_image"]):
            docker_client.images.remove(tag, force=True)
