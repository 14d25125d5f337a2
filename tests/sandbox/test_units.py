"""Small pure units: limits parsing and in-sandbox path validation."""

import pytest

from services.sandbox.errors import BadRequest
from services.sandbox.limits import Limits, parse_size_mb
from services.sandbox.paths import sandbox_path


def test_parse_size():
    assert parse_size_mb("8g") == 8192
    assert parse_size_mb("512m") == 512
    assert parse_size_mb("50G") == 51200
    assert parse_size_mb(100) == 100
    with pytest.raises(BadRequest):
        parse_size_mb("lots")


def test_limits_from_mapping():
    lim = Limits.from_mapping({"memory_mb": "1g", "cpus": 0.5})
    assert lim.memory_mb == 1024 and lim.cpus == 0.5 and lim.pids == Limits().pids
    with pytest.raises(BadRequest):
        Limits.from_mapping({"bogus": 1})
    with pytest.raises(BadRequest):
        Limits.from_mapping({"pids": -1})


def test_sandbox_path():
    assert sandbox_path("a/b.txt") == "/workspace/a/b.txt"
    assert sandbox_path("/tmp/x") == "/tmp/x"
    for bad in ("../etc/passwd", "/workspace/../../etc/shadow", "a/../../b", "", "x\x00y"):
        with pytest.raises(BadRequest):
            sandbox_path(bad)
