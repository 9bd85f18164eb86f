"""Router replay: every routed request recorded in SQLite (signals, decision, model, endpoint,
latencies, optionally the bodies), queryable by the replay API and the dashboard.

One connection per store, used under a lock from worker threads (writes take well under a
millisecond; the event loop never waits on the disk). The table keeps the newest
`max_records` rows.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS routing_records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    requested_model TEXT,
    decision TEXT,
    decision_confidence REAL,
    model TEXT,
    backend TEXT,
    status INTEGER,
    stream INTEGER NOT NULL DEFAULT 0,
    cache_hit INTEGER NOT NULL DEFAULT 0,
    fast_response INTEGER NOT NULL DEFAULT 0,
    signals TEXT,
    routing_ms REAL,
    ttft_ms REAL,
    upstream_ms REAL,
    total_ms REAL,
    attempts TEXT,
    error TEXT,
    request_body TEXT,
    response_body TEXT
);
CREATE INDEX IF NOT EXISTS routing_records_created ON routing_records(created_at);
CREATE INDEX IF NOT EXISTS routing_records_decision ON routing_records(decision);
CREATE INDEX IF NOT EXISTS routing_records_model ON routing_records(model);
"""
_JSON_COLUMNS = ("signals", "attempts", "request_body", "response_body")
_BOOL_COLUMNS = ("stream", "cache_hit", "fast_response")
_FILTERS = ("decision", "model", "backend", "request_id")


@dataclass
class ReplayRecord:
    request_id: str
    requested_model: str | None = None
    decision: str | None = None
    decision_confidence: float | None = None
    model: str | None = None
    backend: str | None = None
    status: int | None = None
    stream: bool = False
    cache_hit: bool = False
    fast_response: bool = False
    signals: dict[str, Any] = field(default_factory=dict)
    routing_ms: float | None = None
    ttft_ms: float | None = None
    upstream_ms: float | None = None
    total_ms: float | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    request_body: Any = None
    response_body: Any = None
    created_at: float = field(default_factory=time.time)


class ReplayStore:
    def __init__(self, path: str | Path, max_records: int = 100_000, store_bodies: bool = True):
        self.path = Path(path)
        self.max_records = max_records
        self.store_bodies = store_bodies
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.executescript(SCHEMA)

    def record(self, rec: ReplayRecord) -> int:
        row = asdict(rec)
        if not self.store_bodies:
            row["request_body"] = row["response_body"] = None
        for col in _JSON_COLUMNS:
            if row[col] is not None:
                row[col] = json.dumps(row[col], default=str)
        for col in _BOOL_COLUMNS:
            row[col] = int(bool(row[col]))
        cols = ", ".join(row)
        marks = ", ".join(f":{c}" for c in row)
        with self.lock:
            cur = self.conn.execute(f"INSERT INTO routing_records ({cols}) VALUES ({marks})", row)
            rid = int(cur.lastrowid or 0)
            if rid > self.max_records:  # keep the newest rows (primary-key range delete)
                self.conn.execute(
                    "DELETE FROM routing_records WHERE id <= ?", (rid - self.max_records,)
                )
        return rid

    @staticmethod
    def _decode(row: sqlite3.Row, bodies: bool) -> dict[str, Any]:
        out = dict(row)
        for col in _JSON_COLUMNS:
            if col in out and out[col] is not None:
                out[col] = json.loads(out[col])
        for col in _BOOL_COLUMNS:
            out[col] = bool(out[col])
        if not bodies:
            out.pop("request_body", None)
            out.pop("response_body", None)
        return out

    def query(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        since: float | None = None,
        bodies: bool = False,
        **filters: str | None,
    ) -> tuple[list[dict[str, Any]], int]:
        """Newest first; returns (records, total matching)."""
        where, args = [], []
        for col in _FILTERS:
            if filters.get(col) is not None:
                where.append(f"{col} = ?")
                args.append(filters[col])
        if since is not None:
            where.append("created_at >= ?")
            args.append(since)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self.lock:
            self.conn.row_factory = sqlite3.Row
            total = self.conn.execute(f"SELECT COUNT(*) FROM routing_records{clause}", args)
            total_n = int(total.fetchone()[0])
            rows = self.conn.execute(
                f"SELECT * FROM routing_records{clause} ORDER BY id DESC LIMIT ? OFFSET ?",
                [*args, limit, offset],
            ).fetchall()
        return [self._decode(r, bodies) for r in rows], total_n

    def get(self, record_id: int) -> dict[str, Any] | None:
        with self.lock:
            self.conn.row_factory = sqlite3.Row
            row = self.conn.execute(
                "SELECT * FROM routing_records WHERE id = ?", (record_id,)
            ).fetchone()
        return self._decode(row, True) if row is not None else None

    def close(self) -> None:
        with self.lock:
            self.conn.close()
