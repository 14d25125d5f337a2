"""Acceptance 2: 64 sandboxes created, used (git status + a pytest run) and closed
concurrently on this machine, with 0 failures and 0 leftovers."""

from __future__ import annotations

import asyncio
import os
import time

from services.sandbox.client import SandboxManagerClient

from .conftest import requires_bwrap, requires_root, run, wait_no_leftovers

pytestmark = [requires_bwrap, requires_root]

N = int(os.environ.get("LTS_TEST_N", "64"))
USE = ("git status --short && echo '# change' >> pkg/__init__.py && git status --short && "
       "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -q -p no:cacheprovider tests")


def test_64_concurrent_sandboxes(admin, base_repo):
    async def one(mgr: SandboxManagerClient, i: int):
        sb = await mgr.create(base_dir=base_repo, limits={"memory_mb": 512, "pids": 128, "disk_mb": 128})
        try:
            return await sb.run(USE, timeout=120)
        finally:
            await sb.close()

    async def main():
        async with SandboxManagerClient(admin.url, admin.key) as mgr:
            t = time.monotonic()
            results = await asyncio.gather(*(one(mgr, i) for i in range(N)), return_exceptions=True)
            return results, time.monotonic() - t, await mgr.list()

    results, elapsed, still_listed = run(main())
    failures = [r for r in results if isinstance(r, BaseException) or r.exit_code != 0]
    assert not failures, failures[:3]
    for r in results:
        assert " M pkg/__init__.py" in r.output and "2 passed" in r.output, r.output
    assert still_listed == []
    left = wait_no_leftovers(admin)
    assert not any(left.values()), left
    # the base stays untouched
    assert (base_repo / "pkg" / "__init__.py").read_text() == "def add(a, b):\n    return a + b\n"
    print(f"{N} sandboxes in {elapsed:.1f}s")
