"""Acceptance 5: bad requests get a clear 4xx, nothing is lost, and the manager keeps serving."""

from __future__ import annotations

import httpx
import pytest

from .conftest import requires_bwrap, requires_root

pytestmark = [requires_bwrap, requires_root]
P = "/apis/envs/sandbox/v1"


@pytest.fixture
def http(admin):
    with httpx.Client(base_url=admin.url + P, headers={"X-Key": admin.key}, timeout=60) as c:
        yield c


@pytest.fixture
def sid(http):
    r = http.post("/start", json={"image": "local"})
    assert r.status_code == 200, r.text
    sandbox_id = r.json()["result"]["sandbox_id"]
    assert http.post("/write_file",
                     json={"sandbox_id": sandbox_id, "path": "keep.txt", "content": "precious"}).status_code == 200
    yield sandbox_id
    http.post("/stop", json={"sandbox_id": sandbox_id})


def _err(r: httpx.Response, status: int, fragment: str) -> None:
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert body["status"] == "Failed" and fragment.lower() in body["error"].lower(), body


def test_missing_or_wrong_key(admin, sid):
    _err(httpx.post(admin.url + P + "/execute", json={"sandbox_id": sid, "command": "id"}), 401, "key")
    _err(httpx.post(admin.url + P + "/execute", json={"sandbox_id": sid, "command": "id"},
                    headers={"X-Key": "wrong"}), 401, "key")
    r = httpx.post(admin.url + P + "/execute", json={"sandbox_id": sid, "command": "echo ok"},
                   headers={"Authorization": f"Bearer {admin.key}"})
    assert r.status_code == 200 and r.json()["result"]["stdout"] == "ok\n"


def test_unknown_sandbox(http):
    _err(http.post("/execute", json={"sandbox_id": "sb-nope", "command": "id"}), 404, "unknown sandbox")
    _err(http.get("/get_status", params={"sandbox_id": "sb-nope"}), 404, "unknown sandbox")
    _err(http.post("/stop", json={"sandbox_id": "sb-nope"}), 404, "unknown sandbox")
    _err(http.post("/read_file", json={"sandbox_id": "sb-nope", "path": "/etc/hosts"}), 404, "unknown sandbox")


def test_path_traversal(http, sid):
    _err(http.post("/read_file", json={"sandbox_id": sid, "path": "../../etc/shadow"}), 400, "traversal")
    _err(http.post("/write_file", json={"sandbox_id": sid, "path": "/workspace/../../etc/x", "content": "x"}), 400,
         "traversal")
    _err(http.post("/execute", json={"sandbox_id": sid, "command": "ls", "cwd": "/workspace/../.."}), 400, "traversal")
    files = {"file": ("a.txt", b"x")}
    _err(http.post("/upload", data={"sandbox_id": sid, "target_path": "../../x"}, files=files), 400, "traversal")


def test_negative_or_zero_timeout(http, sid):
    _err(http.post("/execute", json={"sandbox_id": sid, "command": "true", "timeout": -1}), 400, "timeout")
    _err(http.post("/execute", json={"sandbox_id": sid, "command": "true", "timeout": 0}), 400, "timeout")
    _err(http.post("/run_in_session", json={"sandbox_id": sid, "command": "true", "timeout": -5}), 400, "timeout")


def test_huge_upload_and_write(http, sid):
    big = b"x" * (3 * 1024 * 1024)   # the test config allows 2 MB
    _err(http.post("/upload", data={"sandbox_id": sid, "target_path": "/tmp/big"}, files={"file": ("big", big)}), 413,
         "larger than")
    _err(http.post("/write_file", json={"sandbox_id": sid, "path": "/tmp/big", "content": big.decode()}), 413,
         "larger than")
    assert http.post("/execute",
                     json={"sandbox_id": sid, "command": "head -c 2000000 /dev/zero > /tmp/r"}).status_code == 200
    _err(http.post("/read_file", json={"sandbox_id": sid, "path": "/tmp/r"}), 413, "larger than")   # 1 MB read cap


def test_other_bad_input(http, sid):
    _err(http.post("/start", json={"limits": {"bogus": 1}}), 400, "unknown limit")
    _err(http.post("/start", json={"sandbox_id": "../../etc"}), 400, "invalid sandbox_id")
    _err(http.post("/start", json={"memory": "lots"}), 400, "cannot parse")
    _err(http.post("/start", json={"base_dir": "/tmp/does/not/exist"}), 400, "does not exist")
    _err(http.post("/start", json={"network": "internet"}), 400, "network must be one of")
    _err(http.post("/start", json={"network": "registry"}), 400, "has no network mode")   # local backend
    _err(http.post("/execute", json={"sandbox_id": sid}), 422, "command")
    _err(http.post("/execute", content=b"{not json", headers={"content-type": "application/json"}), 422, "")
    _err(http.post("/run_in_session", json={"sandbox_id": sid, "session": "nope", "command": "true"}), 400,
         "unknown session")
    _err(http.post("/create_session", json={"sandbox_id": sid, "session": "a b;rm"}), 400, "")


def test_still_serving_and_nothing_lost(http, sid):
    for bad in ({"sandbox_id": sid, "command": "true", "timeout": -1},
                {"sandbox_id": "sb-nope", "command": "true"}):
        http.post("/execute", json=bad)
    r = http.post("/read_file", json={"sandbox_id": sid, "path": "keep.txt"})
    assert r.status_code == 200 and r.json()["result"]["content"] == "precious"
    r = http.post("/execute", json={"sandbox_id": sid, "command": "echo fine"})
    assert r.json()["result"]["stdout"] == "fine\n"
