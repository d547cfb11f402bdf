"""The online table builder: HTTP API, web page, API keys, audit log and rules."""

from __future__ import annotations

from tablesafe.server._app import create_app
from tablesafe.server._audit import AuditLog
from tablesafe.server._auth import Authenticator, Principal, hash_key, new_key
from tablesafe.server._bodies import TableBody
from tablesafe.server._service import TableService, protection_from_settings

__all__ = [
    "AuditLog",
    "Authenticator",
    "Principal",
    "TableBody",
    "TableService",
    "create_app",
    "hash_key",
    "new_key",
    "protection_from_settings",
]
