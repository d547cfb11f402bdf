"""The audit log's old home: it is part of the state store now (:mod:`tablesafe.state`).

``AuditLog`` is the SQLite state store under its old name, so that code
written against ``tablesafe.server.AuditLog(path)`` keeps working.
"""

from __future__ import annotations

from tablesafe.state import SQLiteState as AuditLog

__all__ = ["AuditLog"]
