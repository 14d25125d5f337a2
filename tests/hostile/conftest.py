"""The hostile suite (issue 17): attacks from task data, from a caller and from inside a sandbox
against real services. Fixtures: the sandbox tests' admin (local backend) and one with tight
limits, both as real processes."""

from __future__ import annotations

import os

import pytest

from tests.sandbox.conftest import admin, base_repo, requires_bwrap, requires_root, start_admin, state_root  # noqa: F401

TIGHT_ADMIN = {"lifecycle": {"reaper_interval_s": 0.5, "max_sandboxes": 3},
               "admin": {"max_tar_members": 1000, "max_tar_unpacked_mb": 8, "max_upload_mb": 2, "max_read_mb": 1}}


@pytest.fixture(scope="module")
def tight_admin(state_root):  # noqa: F811
    """An admin with max_sandboxes 3 and small tar limits."""
    tmp = state_root / "tight-admin"
    tmp.mkdir()
    a = start_admin(tmp, f"tight{os.getpid()}", **TIGHT_ADMIN)
    yield a
    assert a.stop() == 0
