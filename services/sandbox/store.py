"""Persistent sandbox records (SQLite), so a restarted admin knows what existed before a
crash and can reap it. One row per sandbox; the admin is the only writer."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# States: running -> stopped (closed by a client) | expired (lease/TTL ran out, reaped)
#                 | orphaned (found without resources after a restart) | failed (could not start)
LIVE_STATES = ("pending", "running")


@dataclass
class SandboxRecord:
    sandbox_id: str
    backend: str
    state: str
    image: str | None
    base_dir: str | None
    limits: dict[str, Any]
    created_at: float
    lease_s: float
    ttl_s: float
    last_seen: float               # last heartbeat or call; the lease ends at last_seen + lease_s
    info: dict[str, Any] = field(default_factory=dict)
    ended_at: float | None = None
    end_reason: str | None = None
    user_id: str | None = None
    experiment_id: str | None = None
    namespace: str | None = None

    @property
    def lease_expires_at(self) -> float:
        return self.last_seen + self.lease_s

    @property
    def ttl_expires_at(self) -> float:
        return self.created_at + self.ttl_s

    def expired(self, now: float | None = None) -> str | None:
        now = time.time() if now is None else now
        if now > self.ttl_expires_at:
            return "ttl"
        if now > self.lease_expires_at:
            return "lease"
        return None


class Store:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS sandboxes (id TEXT PRIMARY KEY, state TEXT, data TEXT)")
        self._lock = threading.Lock()

    def put(self, rec: SandboxRecord) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO sandboxes VALUES (?, ?, ?)",
                             (rec.sandbox_id, rec.state, json.dumps(asdict(rec))))

    def get(self, sandbox_id: str) -> SandboxRecord | None:
        with self._lock:
            row = self._db.execute("SELECT data FROM sandboxes WHERE id = ?", (sandbox_id,)).fetchone()
        return SandboxRecord(**json.loads(row[0])) if row else None

    def live(self) -> list[SandboxRecord]:
        with self._lock:
            rows = self._db.execute("SELECT data FROM sandboxes WHERE state IN (?, ?)", LIVE_STATES).fetchall()
        return [SandboxRecord(**json.loads(r[0])) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
