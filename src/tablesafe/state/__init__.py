"""The state store: what the server shares across requests, processes and replicas.

DESIGN decision 10: what the server has published decides the next answer,
so it lives in one store behind one interface, :class:`StateStore`, changed
atomically. It holds

* the request audit log (one row per request, written before the answer
  starts), and the results of the reconstruction audit;
* revoked API keys, read on every request;
* rate-limit counters, one row per bucket (API key or client address) and
  minute, checked and incremented in one statement
  (:mod:`tablesafe.state._rates`);
* the sliver guard's published record sets and the privacy ledger's tables
  (:mod:`tablesafe.rules._ledger`), keyed by the microdata's identity:
  :meth:`StateStore.transaction` serialises one check of both and the
  writes it depends on per identity, across threads, processes and replicas.

Two backends: :class:`SQLiteState`, one file, the embedded default (the
site's ``[server] audit_db``); :class:`PostgresState`, one database for
several replicas (``[state] url``). :func:`open_state` opens the one a site
configuration names. The server, the command line and the audit import
this package, and the rules read and write through it; it sits below the
rules (it keeps their rows: :func:`tablesafe.state._store.register_ledger`)
and never imports them, nor the server.

Adding what must be shared next (as the privacy ledger was, issue 28):

1. its tables: one more migration at the end of
   :data:`tablesafe.state._sqlite.MIGRATIONS` (a function) and of
   :data:`tablesafe.state._postgres.MIGRATIONS` (a script); both backends
   number their schema (SQLite ``PRAGMA user_version``, PostgreSQL table
   ``schema_version``) and apply what a database lacks on open;
2. its methods on :class:`StateStore`, written once with ``?`` placeholders
   on ``self._connection()`` (one statement, one transaction) or
   ``self._write()`` (several statements, one transaction: a check and the
   write it depends on), or ``self._guard_write(identity)`` to serialise per
   microdata as the guard does;
3. its tests in ``tests/test_state.py``, whose ``store`` fixture runs each
   test on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from tablesafe.state._open import open_state
from tablesafe.state._postgres import PostgresState
from tablesafe.state._rates import MemoryRates, RateCounter
from tablesafe.state._sqlite import SQLiteState
from tablesafe.state._store import MCP_TABLE_ENDPOINTS, GuardTransaction, StateStore

__all__ = [
    "MCP_TABLE_ENDPOINTS",
    "GuardTransaction",
    "MemoryRates",
    "PostgresState",
    "RateCounter",
    "SQLiteState",
    "StateStore",
    "open_state",
]
