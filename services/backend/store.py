"""Persistent state of the backend (SQLite, WAL): sessions, models, sampling sessions,
futures and their results. A restart keeps every completed result and all metadata;
checkpoints live on disk next to it (checkpoints.py)."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
  session_id TEXT PRIMARY KEY, created REAL, last_heartbeat REAL, finished TEXT,
  tags TEXT, user_metadata TEXT, sdk_version TEXT);
CREATE TABLE IF NOT EXISTS models (
  model_id TEXT PRIMARY KEY, session_id TEXT, base_model TEXT, train_config TEXT,
  user_metadata TEXT, created REAL, last_request REAL);
CREATE TABLE IF NOT EXISTS samplers (
  sampler_id TEXT PRIMARY KEY, session_id TEXT, base_model TEXT, model_path TEXT,
  weights_key TEXT, created REAL);
CREATE TABLE IF NOT EXISTS futures (
  request_id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT, model_id TEXT, seq_id INTEGER,
  req_hash TEXT, status TEXT, created REAL, finished REAL, content_type TEXT, result BLOB,
  error TEXT, category TEXT);
CREATE INDEX IF NOT EXISTS futures_dedupe ON futures(model_id, seq_id);
"""


class Store:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self.db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)
        self._add_lifecycle_columns()
        # Futures that were still running when the backend died can never finish.
        self._exec("UPDATE futures SET status='failed', error=?, category='server', finished=? WHERE status='pending'",
                   ("the backend restarted while this request was running; submit it again", time.time()))

    def _exec(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            return self.db.execute(sql, args)

    def _one(self, sql: str, args: tuple = ()) -> dict[str, Any] | None:
        with self._lock:
            cur = self.db.execute(sql, args)
            row = cur.fetchone()
            if row is None:
                return None
            return dict(zip([c[0] for c in cur.description], row))

    def _all(self, sql: str, args: tuple = ()) -> list[dict[str, Any]]:
        with self._lock:
            cur = self.db.execute(sql, args)
            cols = [c[0] for c in cur.description]
            return [dict(zip(cols, r)) for r in cur.fetchall()]

    # ---- sessions
    def create_session(self, session_id: str, tags: list[str], user_metadata: dict, sdk_version: str) -> None:
        now = time.time()
        self._exec("INSERT INTO sessions VALUES (?,?,?,?,?,?,?)",
                   (session_id, now, now, None, json.dumps(tags), json.dumps(user_metadata), sdk_version))

    def session(self, session_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM sessions WHERE session_id=?", (session_id,))

    def sessions(self, limit: int = 20, offset: int = 0) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM sessions ORDER BY created DESC LIMIT ? OFFSET ?", (limit, offset))

    def heartbeat(self, session_id: str) -> None:
        self._exec("UPDATE sessions SET last_heartbeat=? WHERE session_id=?", (time.time(), session_id))

    def finish_session(self, session_id: str, reason: str) -> None:
        self._exec("UPDATE sessions SET finished=? WHERE session_id=? AND finished IS NULL", (reason, session_id))

    # ---- models and samplers
    def add_model(self, model_id: str, session_id: str, base_model: str, train_config: dict,
                  user_metadata: dict | None) -> None:
        now = time.time()
        self._exec("INSERT OR REPLACE INTO models VALUES (?,?,?,?,?,?,?)",
                   (model_id, session_id, base_model, json.dumps(train_config), json.dumps(user_metadata or {}),
                    now, now))

    def model(self, model_id: str) -> dict[str, Any] | None:
        row = self._one("SELECT * FROM models WHERE model_id=?", (model_id,))
        if row:
            row["train_config"] = json.loads(row["train_config"])
            row["user_metadata"] = json.loads(row["user_metadata"] or "{}")
        return row

    def models(self, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        rows = self._all("SELECT model_id FROM models ORDER BY created DESC LIMIT ? OFFSET ?", (limit, offset))
        count = self._one("SELECT COUNT(*) AS n FROM models")
        found = [self.model(r["model_id"]) for r in rows]  # a model deleted meanwhile is left out
        return [m for m in found if m is not None], count["n"] if count else 0

    def model_used(self, model_id: str) -> bool:
        """Whether the model has had a request since it was created (touch_model: forward, forward_backward,
        optim_step, save_weights*)."""
        row = self._one("SELECT last_request > created AS used FROM models WHERE model_id=?", (model_id,))
        return bool(row and row["used"])

    def touch_model(self, model_id: str) -> None:
        self._exec("UPDATE models SET last_request=? WHERE model_id=?", (time.time(), model_id))

    def add_sampler(self, sampler_id: str, session_id: str, base_model: str, model_path: str | None,
                    weights_key: str | None) -> None:
        self._exec("INSERT OR REPLACE INTO samplers VALUES (?,?,?,?,?,?)",
                   (sampler_id, session_id, base_model, model_path, weights_key, time.time()))

    def sampler(self, sampler_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM samplers WHERE sampler_id=?", (sampler_id,))

    def session_model_ids(self, session_id: str) -> list[str]:
        return [r["model_id"] for r in self._all("SELECT model_id FROM models WHERE session_id=?", (session_id,))]

    def session_sampler_ids(self, session_id: str) -> list[str]:
        return [r["sampler_id"] for r in self._all("SELECT sampler_id FROM samplers WHERE session_id=?", (session_id,))]

    # ---- futures
    def new_future(self, kind: str, model_id: str | None = None, seq_id: int | None = None,
                   req_hash: str | None = None) -> str:
        cur = self._exec("INSERT INTO futures (kind, model_id, seq_id, req_hash, status, created) VALUES (?,?,?,?,?,?)",
                         (kind, model_id, seq_id, req_hash, "pending", time.time()))
        return str(cur.lastrowid)

    def find_duplicate(self, model_id: str, seq_id: int) -> dict[str, Any] | None:
        return self._one("SELECT request_id, req_hash, kind FROM futures WHERE model_id=? AND seq_id=?",
                         (model_id, seq_id))

    def complete(self, request_id: str, content_type: str, result: bytes) -> None:
        self._exec("UPDATE futures SET status='done', content_type=?, result=?, finished=? WHERE request_id=?",
                   (content_type, result, time.time(), int(request_id)))

    def fail(self, request_id: str, error: str, category: str) -> None:
        self._exec("UPDATE futures SET status='failed', error=?, category=?, finished=? WHERE request_id=?",
                   (error, category, time.time(), int(request_id)))

    def future(self, request_id: str) -> dict[str, Any] | None:
        try:
            rid = int(request_id)
        except (TypeError, ValueError):
            return None
        return self._one("SELECT * FROM futures WHERE request_id=?", (rid,))

    # ---- lifecycle (lifecycle.py): expired sessions, what a session holds, old futures
    def _add_lifecycle_columns(self) -> None:
        """futures.retrieved: when the client first fetched the result (databases of older versions lack it)."""
        if "retrieved" not in {r[1] for r in self.db.execute("PRAGMA table_info(futures)")}:
            self.db.execute("ALTER TABLE futures ADD COLUMN retrieved REAL")

    def expire_sessions(self, max_silence_s: float) -> list[str]:
        """Mark 'expired' the open sessions without a heartbeat for ``max_silence_s``; their ids."""
        cutoff = time.time() - max_silence_s
        with self._lock:
            ids = [r[0] for r in self.db.execute("SELECT session_id FROM sessions WHERE finished IS NULL "
                                                 "AND last_heartbeat < ?",
                                                 (cutoff,))]
            self.db.executemany("UPDATE sessions SET finished='expired' WHERE session_id=? AND finished IS NULL",
                                [(i,) for i in ids])
        return ids

    def session_holdings(self, session_id: str) -> tuple[list[str], list[str]]:
        """The session's training model ids and the weights keys of its sampling sessions."""
        models = self.session_model_ids(session_id)
        keys = [r["weights_key"] for r in self._all("SELECT weights_key FROM samplers WHERE session_id=? "
                                                    "AND weights_key IS NOT NULL",
                                                    (session_id,))]
        return models, keys

    def mark_retrieved(self, request_id: str) -> None:
        self._exec("UPDATE futures SET retrieved=? WHERE request_id=? AND retrieved IS NULL",
                   (time.time(), int(request_id)))

    def purge_futures(self, retrieved_ttl_s: float, unretrieved_ttl_s: float) -> int:
        """Delete finished futures retrieved more than ``retrieved_ttl_s`` ago, or never retrieved and
        finished more than ``unretrieved_ttl_s`` ago (their results are the bulk of the database)."""
        now = time.time()
        cur = self._exec("DELETE FROM futures WHERE status!='pending' AND ((retrieved IS NOT NULL AND retrieved < ?) "
                         "OR (retrieved IS NULL AND finished < ?))", (now - retrieved_ttl_s, now - unretrieved_ttl_s))
        return cur.rowcount

    def close(self) -> None:
        with self._lock:
            self.db.close()
