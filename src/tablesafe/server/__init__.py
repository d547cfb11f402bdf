"""The online table builder: HTTP API, web page, API keys, audit log and rules."""

from __future__ import annotations

from tablesafe.server._app import create_app
from tablesafe.server._auth import Authenticator, Principal, hash_key, new_key
from tablesafe.server._bodies import TableBody
from tablesafe.server._service import TableService, site_protection
from tablesafe.state import SQLiteState as AuditLog

__all__ = [
    "AuditLog",
    "Authenticator",
    "Principal",
    "TableBody",
    "TableService",
    "create_app",
    "hash_key",
    "new_key",
    "site_protection",
]


def __getattr__(name: str) -> object:
    # One name per idea (issue 27): tablesafe.protection_from_settings turns
    # settings into a Protection; the server's, of a site's dataset, is
    # site_protection. The old name stays one release, with a warning.
    if name == "protection_from_settings":
        import warnings

        warnings.warn(
            "tablesafe.server.protection_from_settings is now site_protection; the old name "
            "goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return site_protection
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
