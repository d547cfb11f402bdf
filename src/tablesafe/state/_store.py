"""The state store's interface, and the SQL every backend shares.

:class:`StateStore` is the one interface the server, the command line and
the audit use for everything shared between requests, processes and
replicas. A backend supplies only connections (the way an HTTP client's
transport supplies the sending of a request):

* ``_connection()``: a connection in autocommit mode, each statement its
  own transaction (reads, and writes of one statement: one round trip);
* ``_write()``: one transaction of several statements, committed when the
  block ends and rolled back when it raises, that waits for other writers
  where the database needs it (SQLite ``BEGIN IMMEDIATE``);
* ``_guard_write(identity)``: the same, also holding the lock of one
  microdata identity until it commits (SQLite: the write lock of the file;
  PostgreSQL: ``pg_advisory_xact_lock``);
* ``close()``.

Every statement below is written once, with ``?`` placeholders, in the SQL
both SQLite and PostgreSQL accept (``ON CONFLICT``, ``RETURNING``); a
backend's connection translates the placeholders if it must. Times are ISO
8601 text in UTC with milliseconds, so they sort as they compare and read
the same from either database.
"""

from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from tablesafe._errors import InternalError
from tablesafe.state._rates import MINUTE_MS, minute_and_rest

__all__ = [
    "CEILING_SCHEMA",
    "MCP_TABLE_ENDPOINTS",
    "PUBLICATIONS_SCHEMA",
    "PUBLICATIONS_WITHOUT_COUNTS",
    "RELEASES_SCHEMA",
    "GuardTransaction",
    "Publication",
    "Sql",
    "StateStore",
]

#: A dp-marginals release (its measurements and model) per microdata identity and
#: release digest: written once, the first writer's kept (tablesafe._release).
RELEASES_SCHEMA = """
CREATE TABLE IF NOT EXISTS releases (
    identity TEXT NOT NULL,
    digest TEXT NOT NULL,
    time TEXT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (identity, digest)
)
"""

#: One request counted in a bucket unless the limit is reached, in one statement:
#: ``previous_weight`` of the previous minute's counter, plus this minute's, below the limit.
_HIT = """
WITH prev AS (
    SELECT (COALESCE((SELECT n FROM rate_counts WHERE bucket = ? AND minute = ?), 0)
            * CAST(? AS BIGINT) + ?) / ? AS n
)
INSERT INTO rate_counts (bucket, minute, n)
SELECT ?, ?, 1 FROM prev WHERE prev.n < ?
ON CONFLICT (bucket, minute) DO UPDATE SET n = rate_counts.n + 1
WHERE rate_counts.n + (SELECT n FROM prev) < ?
RETURNING n
"""

#: The endpoint of a table request, as the audit log writes it.
_TABLES_ENDPOINT = "POST /api/datasets/%/tables"
#: The audit row a worker writes for a table built as a job.
_JOBS_ENDPOINT = "JOB /api/datasets/%/jobs/%"
#: The audit rows of the agent interface (MCP) that build a table: its two table tools
#: and a full table read as a resource (tablesafe.server._mcp writes them).
MCP_TABLE_ENDPOINTS = ("mcp build_table", "mcp explain_table", "mcp read table")

#: The putative-risk ceiling's refusals (issue 40): one row per refused table, keyed by
#: the digest of what decides it (the checked request, the dataset's settings, the
#: microdata's identity), with the refusal, the table's figures (the ledger's, for the
#: next key that asks) and what it was measured against.
CEILING_SCHEMA = """
CREATE TABLE IF NOT EXISTS ceiling_refusals (
    dataset TEXT NOT NULL,
    digest TEXT NOT NULL,
    message TEXT NOT NULL,
    figures TEXT NOT NULL,
    digests BLOB NOT NULL,
    measured TEXT NOT NULL,
    time TEXT NOT NULL,
    PRIMARY KEY (dataset, digest)
)
"""

_REQUEST_COLUMNS = ["id", "time", "key_id", "dataset", "endpoint", "request", "status", "outcome",
                    "client"]  # fmt: skip


class Cursor(Protocol):
    """What a statement gives back."""

    @property
    def rowcount(self) -> int:
        """Rows the statement changed."""
        ...

    def fetchone(self) -> Any:
        """The next row, or None."""
        ...

    def fetchall(self) -> list[Any]:
        """The remaining rows."""
        ...


class Sql(Protocol):
    """A connection as the shared statements see it (``?`` placeholders)."""

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Cursor:
        """Run one statement."""
        ...


#: The account of published figures and the stored decisions (issue 37), one schema
#: for both backends (PostgreSQL's migration swaps the id and BLOB types).
PUBLICATIONS_SCHEMA = """
CREATE TABLE IF NOT EXISTS publications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    identity TEXT NOT NULL,
    scope TEXT NOT NULL,
    digest BIGINT NOT NULL,
    definition TEXT NOT NULL,
    n BIGINT NOT NULL,
    cell_key BIGINT NOT NULL,
    key_id TEXT NOT NULL,
    time TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS publications_digest ON publications (identity, scope, digest);
CREATE INDEX IF NOT EXISTS publications_order ON publications (identity, scope, id);
CREATE TABLE IF NOT EXISTS decisions (
    identity TEXT NOT NULL,
    scope TEXT NOT NULL,
    digest BIGINT NOT NULL,
    withheld BLOB NOT NULL,
    time TEXT NOT NULL,
    PRIMARY KEY (identity, scope, digest)
);
DROP TABLE IF EXISTS guard_sets
"""

#: Version 8: the account keeps no count (issue 37). A block's true count is read
#: from the engine when a check needs it, so the state store holds no true count
#: of any published figure (a copy of it tells which tables were asked, not their counts).
PUBLICATIONS_WITHOUT_COUNTS = """
ALTER TABLE publications DROP COLUMN n;
ALTER TABLE publications DROP COLUMN cell_key
"""

#: A published figure as stored: (digest, its domain and canonical definition's text).
Publication = tuple[int, str]


class LedgerFigures(Protocol):
    """A table's figures as the ledger stores them: their definitions and 8-byte digests.

    The rules' :class:`~tablesafe.rules._ledger.TableFigures`; the store keeps
    them as rows and gives them back through :func:`register_ledger`'s decoder.
    """

    @property
    def digests(self) -> npt.NDArray[np.uint64]:
        """The figures' digests."""
        ...

    def spec(self) -> str:
        """The figures' definitions, as text."""
        ...


class LedgerMirror(Protocol):
    """The rules' ledger of one microdata identity in memory, as the store replays rows into it."""

    last_id: int

    def add_row(self, key_id: str, spec: str, digests: bytes) -> None:
        """Take one stored row (a table given to ``key_id``) into the ledger."""
        ...


@dataclass(frozen=True)
class _LedgerTypes:
    mirror: Callable[[], LedgerMirror]
    figures: Callable[[str, bytes], LedgerFigures]


#: The rules' ledger types, registered by :mod:`tablesafe.rules._ledger` (the store
#: sits below the rules: it keeps rows, the rules read them).
_LEDGER: list[_LedgerTypes] = []


def register_ledger(
    mirror: Callable[[], LedgerMirror], figures: Callable[[str, bytes], LedgerFigures]
) -> None:
    """Register the rules' ledger: its in-memory mirror and the figures a row decodes to."""
    _LEDGER[:] = [_LedgerTypes(mirror, figures)]


def _ledger_types() -> _LedgerTypes:
    if not _LEDGER:
        raise InternalError(
            "the privacy ledger's types are not registered: import tablesafe.rules._ledger "
            "(every admission does) before asking the state store for the ledger"
        )
    return _LEDGER[0]


class GuardTransaction(Protocol):
    """One admission of a table, inside the store's transaction for its microdata identity.

    Reads see every row committed so far, by any process; writes are made
    when the transaction commits, and a refusal (an exception) writes nothing.
    """

    ledger: LedgerMirror

    def publications(self, scope: str, after: int) -> list[tuple[int, Publication]]:
        """The published figures of ``scope`` with an id above ``after``, in id order."""
        ...

    def publish(self, scope: str, key_id: str, rows: Sequence[Publication]) -> None:
        """Record ``rows`` as published (a digest already recorded is kept as it was)."""
        ...

    def decision(self, scope: str, digest: int) -> bytes | None:
        """The stored decision of a table (which cells it withholds), or None."""
        ...

    def decide(self, scope: str, digest: int, withheld: bytes) -> None:
        """Store a table's decision, so that it is answered again the same way."""
        ...

    def spend(self, key_id: str, figures: LedgerFigures, dataset: str | None = None) -> None:
        """Write a table's figures to the ledger when the transaction commits."""
        ...

    def on_commit(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` once the writes are committed, still under this process's lock."""
        ...


@dataclass
class _Transaction:
    sql: Sql
    identity: str
    ledger: LedgerMirror
    rows: list[tuple[str, str, Publication]] = field(default_factory=list)
    decided: list[tuple[str, int, bytes]] = field(default_factory=list)
    spent: list[tuple[str, LedgerFigures, str | None]] = field(default_factory=list)
    committed: list[Callable[[], None]] = field(default_factory=list)

    def publications(self, scope: str, after: int) -> list[tuple[int, Publication]]:
        rows = self.sql.execute(
            "SELECT id, digest, definition FROM publications "
            "WHERE identity = ? AND scope = ? AND id > ? ORDER BY id",
            (self.identity, scope, int(after)),
        ).fetchall()
        return [(int(i), (int(d), str(t))) for i, d, t in rows]

    def publish(self, scope: str, key_id: str, rows: Sequence[Publication]) -> None:
        self.rows.extend((scope, key_id, row) for row in rows)

    def decision(self, scope: str, digest: int) -> bytes | None:
        row = self.sql.execute(
            "SELECT withheld FROM decisions WHERE identity = ? AND scope = ? AND digest = ?",
            (self.identity, scope, int(digest)),
        ).fetchone()
        return None if row is None else bytes(row[0])

    def decide(self, scope: str, digest: int, withheld: bytes) -> None:
        self.decided.append((scope, digest, withheld))

    def spend(self, key_id: str, figures: LedgerFigures, dataset: str | None = None) -> None:
        self.spent.append((key_id, figures, dataset))

    def on_commit(self, hook: Callable[[], None]) -> None:
        self.committed.append(hook)


@dataclass
class _Shard:
    """One microdata identity in this process: its lock and the ledger."""

    lock: threading.Lock
    ledger: LedgerMirror = field(default_factory=lambda: _ledger_types().mirror())


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class StateStore(ABC):
    """Everything the server shares across requests, processes and replicas.

    The request audit log, revoked API keys, rate-limit counters, the results
    of the reconstruction audit, and the sliver guard's published record sets
    (checked and remembered in one transaction per microdata identity).

    """

    #: Where the store is, for messages (a file, or a URL without a password).
    location: str

    def __init__(self) -> None:
        self._shards: dict[str, _Shard] = {}
        self._shards_lock = threading.Lock()
        self._rate_minute = -1  # the minute whose older counters this process last deleted

    # -- what a backend supplies ----------------------------------------------------------

    @abstractmethod
    def _connection(self) -> AbstractContextManager[Sql]:
        """A connection in autocommit mode: each statement is its own transaction."""

    @abstractmethod
    def _write(self) -> AbstractContextManager[Sql]:
        """One transaction: committed when the block ends, rolled back if it raises."""

    @abstractmethod
    def _guard_write(self, identity: str) -> AbstractContextManager[Sql]:
        """One transaction holding the lock of the microdata ``identity`` until it ends."""

    @abstractmethod
    def close(self) -> None:
        """Release the store's connections."""

    def ping(self) -> None:
        """One round trip to the store (the server's readiness); raises if it does not answer."""
        with self._connection() as sql:
            sql.execute("SELECT 1").fetchone()

    # -- the audit log ------------------------------------------------------------------------

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
        """Append one request to the audit log (``client``: the caller's address).

        Committed when this returns: the server writes the row before its answer starts.
        """
        body = None if request is None else json.dumps(request, sort_keys=True)
        with self._connection() as sql:
            sql.execute(
                "INSERT INTO requests (time, key_id, dataset, endpoint, request, status, outcome,"
                " client) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (_now(), key_id, dataset, endpoint, body, status, outcome, client),
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
        for column, value in (("key_id", key_id), ("dataset", dataset)):
            if value:
                where.append(f"{column} = ?")
                params.append(value)
        if since:
            where.append("time >= ?")
            params.append(since)
        sql_text = f"SELECT {', '.join(_REQUEST_COLUMNS)} FROM requests"
        if where:
            sql_text += " WHERE " + " AND ".join(where)
        sql_text += " ORDER BY id DESC LIMIT ?"
        with self._connection() as sql:
            rows = sql.execute(sql_text, [*params, int(limit)]).fetchall()
        out = []
        for row in rows:
            rec = dict(zip(_REQUEST_COLUMNS, row, strict=True))
            rec["id"], rec["status"] = int(rec["id"]), int(rec["status"])
            if rec["request"] is not None:
                rec["request"] = json.loads(rec["request"])
            out.append(rec)
        return out

    def last_used(self) -> dict[str, str]:
        """Each key id's last request that its key authenticated: id -> ISO time."""
        with self._connection() as sql:
            rows = sql.execute(
                "SELECT key_id, MAX(time) FROM requests WHERE status != 401 GROUP BY key_id"
            ).fetchall()
        return {str(k): str(t) for k, t in rows}

    def served_tables(self, dataset: str) -> list[tuple[str, dict[str, Any]]]:
        """Every table answered for ``dataset`` (any key, jobs and agents too), oldest first.

        Returns:
            (time, body) pairs, the body as a table request's JSON.
        """
        with self._connection() as sql:
            rows = sql.execute(
                "SELECT time, request FROM requests WHERE dataset = ? AND status = 200 AND "
                "(endpoint LIKE ? OR endpoint LIKE ? OR endpoint IN (?, ?, ?)) "
                "AND request IS NOT NULL ORDER BY id",
                (dataset, _TABLES_ENDPOINT, _JOBS_ENDPOINT, *MCP_TABLE_ENDPOINTS),
            ).fetchall()
        out = []
        for when, body in rows:
            request = json.loads(body)
            request.pop("format", None)
            out.append((str(when), request))
        return out

    # -- revoked API keys -------------------------------------------------------------------

    def revoke_key(self, key_id: str, key_hash: str, reason: str | None = None) -> bool:
        """Revoke the key with stored hash ``key_hash``; False if it already was."""
        with self._connection() as sql:
            done = sql.execute(
                "INSERT INTO revoked_keys (hash, key_id, time, reason) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (hash) DO NOTHING",
                (key_hash, key_id, _now(), reason),
            )
            return done.rowcount == 1

    def revoked(self, key_hash: str) -> str | None:
        """When the key with stored hash ``key_hash`` was revoked (ISO time), or None."""
        with self._connection() as sql:
            row = sql.execute(
                "SELECT time FROM revoked_keys WHERE hash = ?", (key_hash,)
            ).fetchone()
        return None if row is None else str(row[0])

    # -- rate limits --------------------------------------------------------------------------

    def hit(self, bucket: str, limit: int, now: float | None = None) -> bool:
        """Count one request in ``bucket`` if fewer than ``limit`` were counted in the last minute.

        One counter row per bucket and minute, shared by every process on the
        store (:mod:`tablesafe.state._rates` says how the last 60 seconds are
        estimated); the check and the increment are one statement, atomic.

        Returns:
            Whether the request is allowed (and counted).
        """
        minute, rest = minute_and_rest(time.time() if now is None else now)
        with self._connection() as sql:
            if minute != self._rate_minute:
                # Counters older than the previous minute never count again.
                sql.execute("DELETE FROM rate_counts WHERE minute < ?", (minute - 1,))
                self._rate_minute = minute
            params = (bucket, minute - 1, rest, MINUTE_MS - 1, MINUTE_MS, bucket, minute)
            counted = sql.execute(_HIT, (*params, limit, limit)).fetchone()
        return counted is not None

    # -- dp-marginals releases ----------------------------------------------------------------

    def load_release(self, identity: str, digest: str) -> bytes | None:
        """The release stored for the microdata ``identity`` under ``digest``, or ``None``."""
        with self._connection() as sql:
            row = sql.execute(
                "SELECT data FROM releases WHERE identity = ? AND digest = ?", (identity, digest)
            ).fetchone()
        return None if row is None else bytes(row[0])

    def store_release(self, identity: str, digest: str, data: bytes) -> bytes:
        """Store a release unless one is stored under ``digest``; the stored one.

        The first writer's bytes are kept, and every process serves them: two
        that made the release at once answer from the same model.
        """
        with self._write() as sql:
            sql.execute(
                "INSERT INTO releases (identity, digest, time, data) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (identity, digest) DO NOTHING",
                (identity, digest, _now(), data),
            )
        stored = self.load_release(identity, digest)
        assert stored is not None
        return stored

    # -- the reconstruction audit -------------------------------------------------------------

    def record_reconstruction(
        self, dataset: str, served_until: str | None, tables: int, result: dict[str, Any]
    ) -> None:
        """Store the result of one reconstruction audit."""
        with self._connection() as sql:
            sql.execute(
                "INSERT INTO reconstructions (time, dataset, served_until, tables, result) "
                "VALUES (?, ?, ?, ?, ?)",
                (_now(), dataset, served_until, tables, json.dumps(result, sort_keys=True)),
            )

    def reconstructions(self, dataset: str, limit: int = 1000) -> list[dict[str, Any]]:
        """The stored reconstruction audits of ``dataset``, oldest first."""
        with self._connection() as sql:
            rows = sql.execute(
                "SELECT time, served_until, tables, result FROM (SELECT id, time, served_until, "
                "tables, result FROM reconstructions WHERE dataset = ? ORDER BY id DESC LIMIT ?) "
                "AS recent ORDER BY id",
                (dataset, int(limit)),
            ).fetchall()
        return [
            {"time": t, "served_until": u, "tables": int(n), **json.loads(r)} for t, u, n, r in rows
        ]

    # -- the putative-risk ceiling -------------------------------------------------------

    def ceiling_refusal(self, dataset: str, digest: str) -> tuple[str, Any] | None:
        """The ceiling's stored refusal of a table (its message and figures), or None."""
        with self._connection() as sql:
            row = sql.execute(
                "SELECT message, figures, digests FROM ceiling_refusals "
                "WHERE dataset = ? AND digest = ?",
                (dataset, digest),
            ).fetchone()
        if row is None:
            return None
        return str(row[0]), _ledger_types().figures(str(row[1]), bytes(row[2]))

    def record_ceiling_refusal(
        self,
        dataset: str,
        digest: str,
        message: str,
        figures: LedgerFigures,
        measured: dict[str, Any],
    ) -> tuple[str, Any]:
        """Store a refusal unless one is stored for ``digest``; the stored one wins.

        Two processes refusing one table at once store one row: each reads
        back the refusal stored first, so both give its message.

        Returns:
            The stored refusal: its message and figures.
        """
        with self._connection() as sql:
            sql.execute(
                "INSERT INTO ceiling_refusals (dataset, digest, message, figures, digests, "
                "measured, time) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (dataset, digest) DO NOTHING",
                (
                    dataset,
                    digest,
                    message,
                    figures.spec(),
                    figures.digests.astype("<u8").tobytes(),
                    json.dumps(measured, sort_keys=True),
                    _now(),
                ),
            )
        stored = self.ceiling_refusal(dataset, digest)
        assert stored is not None  # written above, or by another process first
        return stored

    def ceiling_refusals(self, dataset: str) -> list[dict[str, Any]]:
        """The ceiling's stored refusals of ``dataset``, oldest first (for the owner)."""
        with self._connection() as sql:
            rows = sql.execute(
                "SELECT time, digest, message, measured FROM ceiling_refusals "
                "WHERE dataset = ? ORDER BY time, digest",
                (dataset,),
            ).fetchall()
        return [
            {"time": str(t), "digest": str(d), "message": str(m), "measured": json.loads(x)}
            for t, d, m, x in rows
        ]

    # -- the account of published figures, and the ledger ----------------------------------

    def transaction(self, identity: str) -> AbstractContextManager[GuardTransaction]:
        """Serialise one admission of a table and its writes for the microdata ``identity``.

        Threads of this process wait on a lock per identity; other processes
        and replicas wait on the backend's lock of the identity. Inside, reads
        see every row committed so far by any process (the ledger's index
        first reads the rows committed since it last looked); what is given
        to ``publish``, ``decide`` and ``spend`` is written when the block
        ends without an exception. A refusal (an exception) writes nothing.
        """
        return self._guarded(identity)

    @contextmanager
    def _guarded(self, identity: str) -> Iterator[GuardTransaction]:
        shard = self._shard(identity)
        with shard.lock:
            with self._guard_write(identity) as sql:
                _ledger_catch_up(sql, identity, shard.ledger)
                tx = _Transaction(sql, identity, shard.ledger)
                yield tx
                _write_publications(sql, identity, tx.rows)
                _write_decisions(sql, identity, tx.decided)
                _write_ledger(sql, identity, tx.spent)
            for hook in tx.committed:  # committed; no other thread has read since
                hook()

    def ledger_rows(self, identity: str, after: int = 0) -> list[tuple[int, str, str | None, Any]]:
        """The ledger's rows of the microdata ``identity`` after id ``after``, in order.

        Returns:
            (id, key id, dataset name, the table's figures) per table that spent something.
        """
        with self._connection() as sql:
            rows = sql.execute(
                "SELECT id, key_id, dataset, figures, digests FROM ledger_tables "
                "WHERE identity = ? AND id > ? ORDER BY id",
                (identity, int(after)),
            ).fetchall()
        decode = _ledger_types().figures
        return [
            (int(i), str(k), None if d is None else str(d), decode(f, bytes(g)))
            for i, k, d, f, g in rows
        ]

    def _shard(self, identity: str) -> _Shard:
        with self._shards_lock:
            shard = self._shards.get(identity)
            if shard is None:
                shard = self._shards[identity] = _Shard(threading.Lock())
            return shard


#: Published figures written by one statement (6 parameters each: under SQLite's 32,766).
_ROWS_PER_INSERT = 1000


def _write_publications(
    sql: Sql, identity: str, rows: Sequence[tuple[str, str, Publication]]
) -> None:
    now = _now()
    values = [
        (identity, scope, digest, text, key_id, now) for scope, key_id, (digest, text) in rows
    ]
    # Many rows to one statement: one round trip to PostgreSQL for a table's figures.
    for start in range(0, len(values), _ROWS_PER_INSERT):
        chunk = values[start : start + _ROWS_PER_INSERT]
        sql.execute(
            "INSERT INTO publications (identity, scope, digest, definition, key_id, time) VALUES "
            + ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(chunk))
            + " ON CONFLICT (identity, scope, digest) DO NOTHING",
            [v for row in chunk for v in row],
        )


def _write_decisions(sql: Sql, identity: str, decided: Sequence[tuple[str, int, bytes]]) -> None:
    now = _now()
    for scope, digest, withheld in decided:
        sql.execute(
            "INSERT INTO decisions (identity, scope, digest, withheld, time) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (identity, scope, digest) DO NOTHING",
            (identity, scope, int(digest), withheld, now),
        )


def _ledger_catch_up(sql: Sql, identity: str, ledger: LedgerMirror) -> None:
    """Replay into ``ledger`` the tables of ``identity`` committed since it last read."""
    rows = sql.execute(
        "SELECT id, key_id, figures, digests FROM ledger_tables WHERE identity = ? AND id > ? "
        "ORDER BY id",
        (identity, ledger.last_id),
    ).fetchall()
    for row_id, key_id, spec, digests in rows:
        ledger.add_row(str(key_id), str(spec), bytes(digests))
        ledger.last_id = int(row_id)


def _write_ledger(
    sql: Sql, identity: str, spent: Sequence[tuple[str, LedgerFigures, str | None]]
) -> None:
    now = _now()
    for key_id, figures, dataset in spent:
        sql.execute(
            "INSERT INTO ledger_tables (identity, time, key_id, dataset, figures, digests) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                identity,
                now,
                key_id,
                dataset,
                figures.spec(),
                figures.digests.astype("<u8").tobytes(),
            ),
        )
