"""A ``tablesafe serve`` replica that times its guard transactions (bench_server.py --replicas).

Run as ``python benchmarks/_replica.py serve --config SITE ...``: the command
line of ``tablesafe``, with timers wrapped around the state store's guard
transaction from outside (nothing in ``src`` changes). Per table request the
replica records, in wall seconds:

* ``table``: the whole of ``TableService.table`` (build, record sets, guard),
  and ``table cpu``, the thread CPU time of the same (the rest is waiting:
  for the GIL, for a lock, for PostgreSQL);
* ``wait here``: waiting for the identity's lock among this process's threads;
* ``wait db``: from holding it to holding the database's lock of the identity
  (BEGIN and ``pg_advisory_xact_lock``: other replicas' transactions, plus a
  round trip);
* ``held``: from the database's lock to the commit: reading the sets other
  replicas wrote since, the ledger, the guard's check, writing the sets, COMMIT;
  each step but the commit also alone (``held: ...``).

and, per replica, the statements it sent to PostgreSQL (round trips), its
connection pool's borrows and the seconds they waited
for a free connection (``pool_size``).

SIGUSR1 writes the figures gathered since the last signal as JSON to the
file ``$TABLESAFE_BENCH_STATS`` (then renames it into place) and starts afresh.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_times: dict[str, list[float]] = {}
_local = threading.local()
#: The PostgreSQL stores opened (their pools' statistics are dumped with the timers).
_stores: list[Any] = []


def _add(name: str, seconds: float) -> None:
    with _lock:
        _times.setdefault(name, []).append(seconds)


class _TimedLock:
    """A shard's lock that notes when the thread holding it got it."""

    def __init__(self, lock: Any) -> None:
        self._inner = lock

    def __enter__(self) -> bool:
        t0 = time.perf_counter()
        got = self._inner.__enter__()
        _local.shard = time.perf_counter()
        _add("wait here", _local.shard - t0)
        return bool(got)

    def __exit__(self, *exc: object) -> None:
        self._inner.__exit__(*exc)


def _patch() -> None:
    from tablesafe.service._service import TableService
    from tablesafe.state import _store
    from tablesafe.state._postgres import PostgresState

    shard = _store.StateStore._shard

    def timed_shard(self: Any, identity: str) -> Any:
        found = shard(self, identity)
        if not isinstance(found.lock, _TimedLock):
            found.lock = _TimedLock(found.lock)
        return found

    guard_write = PostgresState._guard_write

    @contextmanager
    def timed_guard_write(self: Any, identity: str) -> Iterator[Any]:
        with guard_write(self, identity) as sql:
            _local.locked = time.perf_counter()
            _add("wait db", _local.locked - _local.shard)
            yield sql

    guarded = _store.StateStore._guarded

    @contextmanager
    def timed_guarded(self: Any, identity: str) -> Iterator[Any]:
        try:
            with guarded(self, identity) as tx:
                yield tx
        finally:  # answered or refused: the lock was held either way
            _add("held", time.perf_counter() - _local.locked)

    table = TableService.table

    def timed_table(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return table(self, *args, **kwargs)
        finally:
            _add("table", time.perf_counter() - t0)
            _add("table cpu", time.thread_time() - c0)

    init = PostgresState.__init__

    def registered_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _stores.append(self)

    PostgresState.__init__ = registered_init  # type: ignore[method-assign]
    _time_steps()
    _count_round_trips()
    _store.StateStore._shard = timed_shard  # type: ignore[method-assign]
    PostgresState._guard_write = timed_guard_write  # type: ignore[method-assign,assignment]
    _store.StateStore._guarded = timed_guarded  # type: ignore[method-assign]
    TableService.table = timed_table  # type: ignore[method-assign]


def _timed(name: str, function: Any) -> Any:
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _add(name, time.perf_counter() - t0)

    return timed


def _time_steps() -> None:
    """Timers on the steps inside the held lock (looked up by name when called)."""
    from tablesafe.rules._ledger import LedgerIndex
    from tablesafe.service import _service
    from tablesafe.state import _store

    steps = {"catch-up": "_catch_up", "ledger catch-up": "_ledger_catch_up",
             "write sets": "_write_sets", "write ledger": "_write_ledger"}  # fmt: skip
    for name, step in steps.items():
        setattr(_store, step, _timed("held: " + name, getattr(_store, step)))
    _service.guard_check = _timed("held: guard check", _service.guard_check)  # type: ignore[attr-defined]
    LedgerIndex.check = _timed("held: ledger check", LedgerIndex.check)  # type: ignore[method-assign]


_trips = [0]


def _count_round_trips() -> None:
    """Count the statements sent to PostgreSQL (each a round trip; the pool's check too)."""
    import psycopg

    execute = psycopg.Connection.execute

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _lock:
            _trips[0] += 1
        return execute(self, *args, **kwargs)

    psycopg.Connection.execute = counted  # type: ignore[method-assign,assignment]


def _dump(signum: int, frame: object) -> None:
    global _times
    with _lock:
        gathered, _times = _times, {}
        gathered["round trips"], _trips[0] = [_trips[0]], 0
    for store in _stores:
        pool = store._pool.pop_stats()
        # Summed over the replicas by the reader: borrows, and the time they waited.
        gathered.setdefault("pool borrows", []).append(pool.get("requests_num", 0))
        gathered.setdefault("pool wait", []).append(pool.get("requests_wait_ms", 0) / 1000)
    path = os.environ["TABLESAFE_BENCH_STATS"]
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(gathered, f)
    os.replace(path + ".tmp", path)


# -- a prototype to measure, not the product: the guard transaction with fewer waits ---------

_SETS = (
    "SELECT id, key_id, fingerprint, size, sketch, columns, definition, ancestors "
    "FROM guard_sets WHERE identity = %s AND id > %s ORDER BY id"
)
_LEDGER = (
    "SELECT id, key_id, figures, digests FROM ledger_tables WHERE identity = %s AND id > %s "
    "ORDER BY id"
)


class _Rows:
    """Rows already read, given to the store's catch-up functions as their query's answer."""

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def execute(self, sql: str, params: Any = ()) -> _Rows:
        return self

    def fetchall(self) -> list[Any]:
        return self.rows


def _pipelined() -> None:
    """``TABLESAFE_BENCH_PIPELINED=1``: the guard transaction of the PostgreSQL store, rearranged.

    The connection (and the pool's check) is borrowed before the identity's
    lock in this process; BEGIN, the advisory lock and the two catch-up reads
    go in one pipeline (one wait for PostgreSQL), and the two writes with the
    COMMIT in another. The same statements in the same order, so the same
    answers; only how often the thread waits differs. For measuring what such
    a change would save (docs/benchmarks.md), never for serving.
    """
    from contextlib import suppress

    from tablesafe.state import _postgres, _store
    from tablesafe.state._postgres import identity_lock

    @contextmanager
    def guarded(self: Any, identity: str) -> Iterator[Any]:
        shard = self._shard(identity)
        read = 0
        with self._pool.connection() as con, shard.lock:
            try:
                with con.pipeline():
                    con.execute("BEGIN")
                    con.execute(f"SELECT pg_advisory_xact_lock({identity_lock(identity):d})")
                    sets = con.execute(_SETS, (identity, shard.index.last_id), binary=True)
                    ledger = con.execute(_LEDGER, (identity, shard.ledger.last_id), binary=True)
                _local.locked = time.perf_counter()
                _add("wait db", _local.locked - _local.shard)
                read = _store._catch_up(_Rows(sets.fetchall()), identity, shard.index)
                _store._ledger_catch_up(_Rows(ledger.fetchall()), identity, shard.ledger)
                tx = _store._Transaction(shard.index, shard.ledger)
                yield tx
                sql = _postgres._Connection(con)
                with con.pipeline():
                    _store._write_sets(sql, identity, tx.rows)
                    _store._write_ledger(sql, identity, tx.spent)
                    con.execute("COMMIT")
            except BaseException:
                with suppress(Exception):
                    con.execute("ROLLBACK")
                raise
            finally:
                _add("held", time.perf_counter() - _local.locked)
                self._grown(read)

    _store.StateStore._guarded = guarded  # type: ignore[method-assign,assignment]


if __name__ == "__main__":
    import sys

    from tablesafe._cli import main

    _patch()
    if os.environ.get("TABLESAFE_BENCH_PIPELINED") == "1":
        _pipelined()
    signal.signal(signal.SIGUSR1, _dump)
    main(sys.argv[1:])
