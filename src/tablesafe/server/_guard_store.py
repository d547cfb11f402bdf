"""The sliver guard's store's old home: it is part of the state store now.

:meth:`tablesafe.state.StateStore.transaction` checks and remembers in one
transaction per microdata identity, on SQLite or PostgreSQL. The old names
stay for code that imported them.
"""

from __future__ import annotations

from tablesafe.state import GuardTransaction
from tablesafe.state import SQLiteState as SQLiteGuardStore
from tablesafe.state import StateStore as GuardStore

__all__ = ["GuardStore", "GuardTransaction", "SQLiteGuardStore"]
