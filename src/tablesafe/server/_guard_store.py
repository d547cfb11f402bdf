"""The sliver guard's store: the record sets published from each microdata.

DESIGN decision 10: what the server has published decides the next answer,
so the guard's check and the write it depends on happen in one transaction.
:meth:`GuardStore.transaction` serialises the requests of one microdata: an
in-process lock per microdata identity (threads of one server), then SQLite
``BEGIN IMMEDIATE`` (other processes on the same file: replicas, workers).
Inside it, the in-memory :class:`~tablesafe.rules._guard.SetIndex` first reads the
rows other processes committed since it last looked, then the check runs, then
the new record sets are written, and the transaction commits; a refusal rolls
back and writes nothing.

The store is keyed by the microdata's identity
(:func:`~tablesafe.rules._guard.dataset_identity`), not by a dataset's name, so every
name that serves the same records shares one memory. Table ``guard_sets``: per
row, the identity, time, API key id, the set's fingerprint, size, key sketch,
breakdown columns, canonical definition (microdata columns and codes) and the
fingerprints of the sets of its table that contain it. Never a record.

The interface is narrow (``transaction`` and ``close``), so another backend
(PostgreSQL, issue 31) can serve several replicas.
"""

from __future__ import annotations

import gc
import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import numpy as np

from tablesafe.rules._guard import BUCKETS, RecordSet, SetIndex, parse_definition

__all__ = ["GuardStore", "GuardTransaction", "SQLiteGuardStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS guard_sets (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    identity TEXT NOT NULL,
    time TEXT NOT NULL,
    key_id TEXT NOT NULL,
    fingerprint BLOB NOT NULL,
    size INTEGER NOT NULL,
    sketch BLOB,
    columns TEXT NOT NULL,
    definition TEXT NOT NULL,
    ancestors BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS guard_sets_identity ON guard_sets (identity, id);
"""

#: Sets added to the indexes after which the collector is told they stay.
_FREEZE_AFTER = 10_000


class GuardTransaction(Protocol):
    """One check of the guard, inside the store's transaction."""

    index: SetIndex

    def remember(self, key_id: str, sets: Sequence[RecordSet]) -> None:
        """Write ``sets`` when the transaction commits."""
        ...


class GuardStore(Protocol):
    """Where the guard's published record sets live."""

    def transaction(self, identity: str) -> AbstractContextManager[GuardTransaction]:
        """Serialise one check and its write for the microdata ``identity``."""
        ...

    def close(self) -> None:
        """Release the store's connections."""
        ...


@dataclass
class _Transaction:
    index: SetIndex
    rows: list[tuple[str, RecordSet]] = field(default_factory=list)

    def remember(self, key_id: str, sets: Sequence[RecordSet]) -> None:
        self.rows.extend((key_id, s) for s in sets)


@dataclass
class _Shard:
    """One microdata identity: its lock, connection and index."""

    lock: threading.Lock
    con: sqlite3.Connection
    index: SetIndex


class SQLiteGuardStore:
    """The guard's store in one SQLite file (the audit database by default).

    Args:
        path: The database file; ``":memory:"`` keeps each identity's sets in
            memory for the life of the store (tests).
        buckets: Buckets of the key sketches.
    """

    def __init__(self, path: str | Path, buckets: int = BUCKETS) -> None:
        self.path = str(path)
        self.buckets = buckets
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._unfrozen = 0  # sets added to the indexes since the last gc.freeze()
        self._shards: dict[str, _Shard] = {}

    def _connect(self) -> sqlite3.Connection:
        # Autocommit mode: transactions are opened explicitly (BEGIN IMMEDIATE);
        # another process holding the write lock is waited for, not failed on.
        con = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=60)
        if self.path != ":memory:":
            con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        con.executescript(_SCHEMA)
        return con

    def _shard(self, identity: str) -> _Shard:
        with self._lock:
            shard = self._shards.get(identity)
            if shard is None:
                shard = _Shard(threading.Lock(), self._connect(), SetIndex(buckets=self.buckets))
                self._shards[identity] = shard
            return shard

    @contextmanager
    def _transaction(self, identity: str) -> Iterator[_Transaction]:
        shard = self._shard(identity)
        with shard.lock:
            con = shard.con
            con.execute("BEGIN IMMEDIATE")
            try:
                read = self._catch_up(con, identity, shard.index)
                tx = _Transaction(shard.index)
                yield tx
                self._write(con, identity, tx.rows)
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
            self._grown(read)  # (its own rows are read back by the next catch-up)

    def _grown(self, rows: int) -> None:
        """Count sets added to the indexes; past ``_FREEZE_AFTER``, freeze them for the collector.

        The sets live as long as the process. Python's full collection walked
        100,000 of them in 0.3 to 1.5 s, a request's worth of latency now and
        then (docs/benchmarks.md); frozen, the collector no longer walks them.
        Not more often: after each freeze the collector counts its old
        generation afresh and runs full passes sooner (every 1,000 sets, the
        check's median rose from 4.3 to 6.2 ms).
        """
        with self._lock:
            self._unfrozen += rows
            if self._unfrozen < _FREEZE_AFTER:
                return
            self._unfrozen = 0
        gc.freeze()

    def transaction(self, identity: str) -> AbstractContextManager[GuardTransaction]:
        """Serialise one check and its write for the microdata ``identity``.

        Yields a transaction whose index holds every set committed so far
        (by this process or another); sets given to ``remember`` are written
        when the block ends without an exception.
        """
        return self._transaction(identity)

    def _catch_up(self, con: sqlite3.Connection, identity: str, index: SetIndex) -> int:
        rows = con.execute(
            "SELECT id, key_id, fingerprint, size, sketch, columns, definition, ancestors "
            "FROM guard_sets WHERE identity = ? AND id > ? ORDER BY id",
            (identity, index.last_id),
        ).fetchall()
        index.add(
            (
                int(row_id),
                str(key_id),
                RecordSet(
                    definition=parse_definition(definition),
                    columns=frozenset(json.loads(columns)),
                    size=int(size),
                    fingerprint=bytes(fp),
                    sketch=None if sketch is None else np.frombuffer(sketch, dtype="<i4"),
                    ancestors=frozenset(
                        bytes(ancestors[i : i + 16]) for i in range(0, len(ancestors), 16)
                    ),
                ),
            )
            for row_id, key_id, fp, size, sketch, columns, definition, ancestors in rows
        )
        return len(rows)

    def _write(
        self, con: sqlite3.Connection, identity: str, rows: Sequence[tuple[str, RecordSet]]
    ) -> None:
        if not rows:
            return
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        con.executemany(
            "INSERT INTO guard_sets (identity, time, key_id, fingerprint, size, sketch, columns, "
            "definition, ancestors) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    identity,
                    now,
                    key_id,
                    s.fingerprint,
                    s.size,
                    None if s.sketch is None else np.asarray(s.sketch, dtype="<i4").tobytes(),
                    json.dumps(sorted(s.columns)),
                    s.text,
                    b"".join(sorted(s.ancestors)),
                )
                for key_id, s in rows
            ],
        )

    def close(self) -> None:
        """Close every connection."""
        with self._lock:
            for shard in self._shards.values():
                with shard.lock:
                    shard.con.close()
            self._shards.clear()
