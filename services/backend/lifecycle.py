"""What the backend frees, and when (docs/backend.md "Lifecycle").

* A session that misses its heartbeats for ``session_timeout_s`` (the SDK beats every 10 s) is
  marked ``expired``; a finished or expired session's training models and sampler snapshots are
  unloaded (its saved checkpoints stay on disk).
* A future's stored result is deleted ``future_ttl_s`` after the client first retrieved it, or
  ``unretrieved_future_ttl_s`` after it finished if nobody ever did.
* Sampler snapshots are bounded by count and bytes in the runtime (snapshots.py).

``reaper`` runs these checks every ``reap_every_s`` on the API's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger("backend.lifecycle")

DEFAULTS = {"session_timeout_s": 300.0, "future_ttl_s": 600.0, "unretrieved_future_ttl_s": 86400.0,
            "reap_every_s": 30.0}


def settings(cfg: dict[str, Any]) -> dict[str, float]:
    return {k: float(cfg.get(k, v)) for k, v in DEFAULTS.items()}


async def end_session(B, session_id: str) -> None:
    """Unload what a finished or expired session holds (on the scheduler thread)."""
    models, keys = B.store.session_holdings(session_id)
    if not models and not keys:
        return
    await asyncio.get_running_loop().run_in_executor(
        None, lambda: B.scheduler.call(lambda rt: rt.release(models, keys)))
    log.info("session %s ended: unloaded %d model(s) and %d sampler snapshot(s)", session_id, len(models), len(keys))


async def reap(B) -> dict[str, int]:
    s = settings(B.cfg)
    expired = B.store.expire_sessions(s["session_timeout_s"])
    for sid in expired:
        log.warning("session %s expired (no heartbeat for %.0f s)", sid, s["session_timeout_s"])
        await end_session(B, sid)
    purged = B.store.purge_futures(s["future_ttl_s"], s["unretrieved_future_ttl_s"])
    if purged:
        log.info("deleted %d old future result(s)", purged)
    return {"expired_sessions": len(expired), "purged_futures": purged}


async def reaper(B) -> None:
    every = settings(B.cfg)["reap_every_s"]
    while True:
        await asyncio.sleep(every)
        try:
            await reap(B)
        except Exception:  # noqa: BLE001  (the next round tries again; the API keeps serving)
            log.exception("lifecycle check failed")
