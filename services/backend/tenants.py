"""Tenants: API keys map to owners (issue 17). A key sees, loads and deletes only its own
sessions and what hangs off them (training runs ``<session>:train:<n>``, samplers
``<session>:sample:<n>``, their checkpoints ``tinker://<run>/...`` and futures); an admin key
sees everything.

``backend.api_keys`` in config/runtime.yaml, each entry one of
    "tml-..."                                   an admin key (one plain key = the old behaviour)
    {key: "tml-...", owner: alice}              a tenant key
    {key: "tml-...", owner: ops, admin: true}   an admin key with a name
Several keys may share one owner. Another tenant's ids answer 404, as unknown ones do.
"""

from __future__ import annotations

import contextvars
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import NotFound


@dataclass(frozen=True)
class Caller:
    owner: str
    admin: bool


ADMIN = Caller("admin", True)
current: contextvars.ContextVar[Caller] = contextvars.ContextVar("tinker_caller", default=ADMIN)


def parse_keys(entries: Any) -> dict[str, Caller]:
    out: dict[str, Caller] = {}
    for e in entries or []:
        if isinstance(e, str):
            out[e] = ADMIN
        elif isinstance(e, dict) and isinstance(e.get("key"), str) and e["key"]:
            owner = e.get("owner") or "admin"
            out[e["key"]] = Caller(str(owner), bool(e.get("admin", "owner" not in e)))
        else:
            raise ValueError(f"backend.api_keys: each entry is a key or {{key, owner, admin}}, got {e!r}")
    return out


class Tenants:
    """Owner of each session and future, in ``owners.sqlite3`` next to the store."""

    def __init__(self, path: Path, keys: dict[str, Caller]):
        self.keys = keys
        self.enforced = any(not c.admin for c in keys.values())   # only admin keys: nothing to check
        self._lock = threading.Lock()
        self.db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")   # as store.py: no fsync per future claimed (0.27 -> 0.02 ms)
        self.db.execute("CREATE TABLE IF NOT EXISTS owners (kind TEXT, id TEXT, owner TEXT, PRIMARY KEY (kind, id))")

    def caller(self, key: str | None) -> Caller | None:
        return self.keys.get(key or "")

    def claim(self, kind: str, id_: str) -> None:
        """Record the current caller as the owner of a new session or future."""
        with self._lock:
            self.db.execute("INSERT OR REPLACE INTO owners VALUES (?, ?, ?)", (kind, id_, current.get().owner))

    def _owner(self, kind: str, id_: str) -> str | None:
        with self._lock:
            row = self.db.execute("SELECT owner FROM owners WHERE kind=? AND id=?", (kind, id_)).fetchone()
        return row[0] if row else None

    def sees(self, kind: str, id_: str) -> bool:
        c = current.get()
        return c.admin or not self.enforced or self._owner(kind, id_) == c.owner

    def sees_id(self, run_or_session_id: str) -> bool:
        """Sessions own their runs and samplers: the session id is their prefix."""
        return self.sees("session", str(run_or_session_id).split(":", 1)[0])

    def check_id(self, run_or_session_id: str, what: str = "id") -> None:
        if not self.sees_id(run_or_session_id):
            raise NotFound(f"unknown {what} {run_or_session_id!r}")

    def check_future(self, request_id: str) -> None:
        if not self.sees("future", request_id):
            raise NotFound(f"unknown request_id {request_id!r}")

    def close(self) -> None:
        self.db.close()
