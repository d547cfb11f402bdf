"""The state store in one SQLite file (WAL mode): the embedded default.

One file holds every table (by default the site's ``[server] audit_db``, as
before the store had a name): ``requests``, ``revoked_keys``,
``reconstructions``, ``publications``, ``decisions``, ``ledger_tables``,
``jobs`` and ``rate_counts``. Several processes
on one machine may share the file (SQLite serialises their writes: every
write transaction is ``BEGIN IMMEDIATE``, waited for up to a minute, never
failed at once); replicas on several machines need PostgreSQL.

The schema's version is SQLite's ``PRAGMA user_version``; a database written
before it had one (version 0) gains what it lacks on open and keeps its rows.
The putative-risk ceiling's refusals are in ``ceiling_refusals``.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tablesafe._errors import ConfigError
from tablesafe.state._jobs import JOB_SCHEMA, JOB_SCHEMA_4
from tablesafe.state._store import (
    CEILING_SCHEMA,
    PUBLICATIONS_SCHEMA,
    PUBLICATIONS_WITHOUT_COUNTS,
    RELEASES_SCHEMA,
    Sql,
    StateStore,
)

__all__ = ["SQLiteState"]

_FIRST = """
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    key_id TEXT NOT NULL,
    dataset TEXT,
    endpoint TEXT NOT NULL,
    request TEXT,
    status INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    client TEXT
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
CREATE TABLE IF NOT EXISTS revoked_keys (
    hash TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    time TEXT NOT NULL,
    reason TEXT
);
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
CREATE TABLE IF NOT EXISTS rate_counts (
    bucket TEXT NOT NULL,
    minute INTEGER NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (bucket, minute)
);
CREATE INDEX IF NOT EXISTS rate_counts_minute ON rate_counts (minute);
"""


def _first(con: sqlite3.Connection) -> None:
    """Version 1: today's tables; a request log older than its ``client`` column gains it."""
    for statement in _FIRST.split(";"):
        if statement.strip():
            con.execute(statement)
    have = {row[1] for row in con.execute("PRAGMA table_info(requests)")}
    if "client" not in have:
        con.execute("ALTER TABLE requests ADD COLUMN client TEXT")


def _ledger(con: sqlite3.Connection) -> None:
    """Version 2: the privacy ledger, one row per table that spent something (issue 28)."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS ledger_tables (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "identity TEXT NOT NULL, time TEXT NOT NULL, key_id TEXT NOT NULL, dataset TEXT, "
        "figures TEXT NOT NULL, digests BLOB NOT NULL)"
    )
    con.execute("CREATE INDEX IF NOT EXISTS ledger_tables_identity ON ledger_tables (identity, id)")


def _jobs(con: sqlite3.Connection) -> None:
    """Version 3: the job queue and its results (issue 31)."""
    for statement in JOB_SCHEMA.split(";"):
        if statement.strip():
            con.execute(statement)


def _publications(con: sqlite3.Connection) -> None:
    """Version 5: the account of every published figure and the stored decisions (issue 37)."""
    for statement in PUBLICATIONS_SCHEMA.split(";"):
        if statement.strip():
            con.execute(statement)


def _fair_jobs(con: sqlite3.Connection) -> None:
    """Version 4: what a job builds (identical jobs of a key are one), workers' heartbeats."""
    for statement in JOB_SCHEMA_4.split(";"):
        if statement.strip():
            con.execute(statement)


def _ceiling(con: sqlite3.Connection) -> None:
    """Version 6: the putative-risk ceiling's stored refusals (issue 40)."""
    con.execute(CEILING_SCHEMA)


def _releases(con: sqlite3.Connection) -> None:
    """Version 7: dp-marginals releases, one per microdata identity and parameters (issue 40)."""
    con.execute(RELEASES_SCHEMA.replace("BYTEA", "BLOB"))


def _without_counts(con: sqlite3.Connection) -> None:
    """Version 8: the account keeps no true count (issue 37)."""
    for statement in PUBLICATIONS_WITHOUT_COUNTS.split(";"):
        if statement.strip():
            con.execute(statement)


#: The schema's migrations, oldest first: version i + 1 is ``MIGRATIONS[i]``. A new
#: table is one more function here and one more script in
#: :data:`tablesafe.state._postgres.MIGRATIONS`.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _first,
    _ledger,
    _jobs,
    _fair_jobs,
    _publications,
    _ceiling,
    _releases,
    _without_counts,
]


class SQLiteState(StateStore):
    """The state store in one SQLite file.

    Args:
        path: The database file (created if missing, with its folder);
            ``":memory:"`` keeps everything in memory for the life of the store.

    Raises:
        ConfigError: if the file's schema is newer than this tablesafe knows.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = str(path)
        self.location = self.path
        self._memory = self.path == ":memory:"
        if not self._memory:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # One connection for the log, keys, counters and audits, shared by the
        # server's threads under a lock (SQLite serialises writes anyway).
        self._con = self._connect()
        self._lock = threading.Lock()
        # The guard's connections, one per microdata identity, so that a check
        # (held for its whole transaction) does not hold this process's log lock.
        self._guard_cons: dict[str, sqlite3.Connection] = {}
        try:
            self._migrate()
        except BaseException:
            self._con.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        # Autocommit mode: transactions are opened explicitly (BEGIN IMMEDIATE);
        # another process holding the write lock is waited for, not failed on.
        con = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=60)
        if not self._memory:
            con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        return con

    def _migrate(self) -> None:
        with self._lock, _immediate(self._con) as sql:
            version = int(sql.execute("PRAGMA user_version").fetchone()[0])
            if version > len(MIGRATIONS):
                raise ConfigError(
                    f"the state store {self.location} has schema version {version}, newer "
                    f"than this tablesafe knows ({len(MIGRATIONS)}): upgrade tablesafe"
                )
            for step in MIGRATIONS[version:]:
                step(sql)
            # (PRAGMA takes no parameters; the number is an int.)
            sql.execute(f"PRAGMA user_version = {len(MIGRATIONS):d}")

    @contextmanager
    def _connection(self) -> Iterator[Sql]:
        with self._lock:
            yield self._con

    @contextmanager
    def _write(self) -> Iterator[Sql]:
        with self._lock, _immediate(self._con) as con:
            yield con

    @contextmanager
    def _guard_write(self, identity: str) -> Iterator[Sql]:
        # The store's lock per identity is held: this identity's connection is ours.
        if self._memory:  # one in-memory database: its one connection
            with self._lock, _immediate(self._con) as con:
                yield con
            return
        with self._lock:
            mine = self._guard_cons.get(identity)
            if mine is None:
                mine = self._guard_cons[identity] = self._connect()
        with _immediate(mine) as con:
            yield con

    def close(self) -> None:
        """Close every connection."""
        with self._lock:
            for con in self._guard_cons.values():
                con.close()
            self._guard_cons.clear()
            self._con.close()


@contextmanager
def _immediate(con: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction on ``con``: waits for the file's write lock first."""
    con.execute("BEGIN IMMEDIATE")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
