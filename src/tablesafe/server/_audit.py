"""The audit log: one SQLite database (WAL mode) written for every request.

Two tables:

* ``requests``: one row per request: time, API key id, dataset, endpoint,
  the request as JSON (variables, categories, statistic: never output
  values), HTTP status, outcome (``ok`` or the error's type and message) and
  the client's address.
* ``revoked_keys``: API keys revoked (``tablesafe api-key revoke``): the
  stored hash, the key id, time and reason; the server reads it per request.
* ``guard_sets``: the sliver guard's record sets, written by its own store
  (:mod:`tablesafe.server._guard_store`) in the same file.
* ``reconstructions``: the results of the reconstruction audit
  (``tablesafe audit reconstruct``, the admin endpoint): time, the last
  served request it covers, the number of tables and the figures as JSON.

The guard's sizes are true values: the database is the data owner's and is
readable only through the admin endpoint and ``tablesafe audit``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["AuditLog"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    key_id TEXT NOT NULL,
    dataset TEXT,
    endpoint TEXT NOT NULL,
    request TEXT,
    status INTEGER NOT NULL,
    outcome TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_key ON requests (key_id, time);
CREATE TABLE IF NOT EXISTS reconstructions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    dataset TEXT NOT NULL,
    served_until TEXT,
    tables INTEGER NOT NULL,
    result TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS reconstructions_dataset ON reconstructions (dataset, id);
"""


# The request log's additions since its first schema: a database written by an
# older tablesafe gains the column on open (SQLite cannot say ADD COLUMN IF NOT EXISTS).
_REQUEST_COLUMNS = {"client": "TEXT"}
_KEYS_SCHEMA = """
CREATE TABLE IF NOT EXISTS revoked_keys (
    hash TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    time TEXT NOT NULL,
    reason TEXT
);
"""


class AuditLog:
    """An append-only audit store in SQLite.

    Args:
        path: The database file (created if missing); ``":memory:"`` for tests.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # One connection shared by the server's worker threads, serialised by a
        # lock: SQLite writes are serialised anyway, and this keeps ":memory:" usable.
        self._con = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            if self.path != ":memory:":
                self._con.execute("PRAGMA journal_mode=WAL")
            self._con.execute("PRAGMA synchronous=NORMAL")
            self._con.executescript(_SCHEMA)
            self._con.executescript(_KEYS_SCHEMA)
            have = {row[1] for row in self._con.execute("PRAGMA table_info(requests)")}
            for column, kind in _REQUEST_COLUMNS.items():
                if column not in have:
                    self._con.execute(f"ALTER TABLE requests ADD COLUMN {column} {kind}")

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._con.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._con.execute("BEGIN")
            try:
                yield self._con
            except BaseException:
                self._con.execute("ROLLBACK")
                raise
            self._con.execute("COMMIT")

    @staticmethod
    def _now() -> str:
        return datetime.now(UTC).isoformat(timespec="milliseconds")

    def record(
        self,
        *,
        key_id: str,
        endpoint: str,
        status: int,
        outcome: str,
        dataset: str | None = None,
        request: Any = None,
        client: str | None = None,
    ) -> None:
        """Append one request to the log (``client``: the caller's address)."""
        with self._tx() as con:
            con.execute(
                "INSERT INTO requests (time, key_id, dataset, endpoint, request, status, outcome,"
                " client) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    self._now(),
                    key_id,
                    dataset,
                    endpoint,
                    None if request is None else json.dumps(request, sort_keys=True),
                    status,
                    outcome,
                    client,
                ),
            )

    def query(
        self,
        *,
        key_id: str | None = None,
        dataset: str | None = None,
        since: str | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """The newest requests first, optionally filtered."""
        where, params = [], []
        if key_id:
            where.append("key_id = ?")
            params.append(key_id)
        if dataset:
            where.append("dataset = ?")
            params.append(dataset)
        if since:
            where.append("time >= ?")
            params.append(since)
        sql = (
            "SELECT id, time, key_id, dataset, endpoint, request, status, outcome, client "
            "FROM requests"
        )
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(str(int(limit)))
        with self._lock:
            rows = self._con.execute(sql, params).fetchall()
        cols = [
            "id", "time", "key_id", "dataset", "endpoint", "request", "status", "outcome", "client"
        ]  # fmt: skip
        out = []
        for row in rows:
            rec = dict(zip(cols, row, strict=True))
            if rec["request"] is not None:
                rec["request"] = json.loads(rec["request"])
            out.append(rec)
        return out

    def last_used(self) -> dict[str, str]:
        """Each key id's last request that its key authenticated: id -> ISO time."""
        with self._lock:
            rows = self._con.execute(
                "SELECT key_id, MAX(time) FROM requests WHERE status != 401 GROUP BY key_id"
            ).fetchall()
        return {str(k): str(t) for k, t in rows}

    # -- revoked API keys ---------------------------------------------------------

    def revoke_key(self, key_id: str, key_hash: str, reason: str | None = None) -> bool:
        """Revoke the key with stored hash ``key_hash``; False if it already was."""
        with self._tx() as con:
            done = con.execute(
                "INSERT OR IGNORE INTO revoked_keys (hash, key_id, time, reason) "
                "VALUES (?, ?, ?, ?)",
                (key_hash, key_id, self._now(), reason),
            )
            return done.rowcount == 1

    def revoked(self, key_hash: str) -> str | None:
        """When the key with stored hash ``key_hash`` was revoked (ISO time), or None."""
        with self._lock:
            row = self._con.execute(
                "SELECT time FROM revoked_keys WHERE hash = ?", (key_hash,)
            ).fetchone()
        return None if row is None else str(row[0])

    # -- the reconstruction audit ---------------------------------------------------

    def served_tables(self, dataset: str) -> list[tuple[str, dict[str, Any]]]:
        """Every table answered for ``dataset`` (any key), oldest first: (time, request body)."""
        with self._lock:
            rows = self._con.execute(
                "SELECT time, request FROM requests WHERE dataset = ? AND status = 200 AND "
                "endpoint LIKE 'POST /api/datasets/%/tables' AND request IS NOT NULL "
                "ORDER BY id",
                (dataset,),
            ).fetchall()
        out = []
        for time, body in rows:
            request = json.loads(body)
            request.pop("format", None)
            out.append((str(time), request))
        return out

    def record_reconstruction(
        self, dataset: str, served_until: str | None, tables: int, result: dict[str, Any]
    ) -> None:
        """Store the result of one reconstruction audit."""
        with self._tx() as con:
            con.execute(
                "INSERT INTO reconstructions (time, dataset, served_until, tables, result) "
                "VALUES (?, ?, ?, ?, ?)",
                (self._now(), dataset, served_until, tables, json.dumps(result, sort_keys=True)),
            )

    def reconstructions(self, dataset: str, limit: int = 1000) -> list[dict[str, Any]]:
        """The stored reconstruction audits of ``dataset``, oldest first."""
        with self._lock:
            rows = self._con.execute(
                "SELECT time, served_until, tables, result FROM (SELECT * FROM reconstructions "
                "WHERE dataset = ? ORDER BY id DESC LIMIT ?) ORDER BY id",
                (dataset, int(limit)),
            ).fetchall()
        return [
            {"time": t, "served_until": u, "tables": int(n), **json.loads(r)} for t, u, n, r in rows
        ]
