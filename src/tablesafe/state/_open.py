"""The state store a site configuration names."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tablesafe.state._postgres import PostgresState
from tablesafe.state._sqlite import SQLiteState
from tablesafe.state._store import StateStore

if TYPE_CHECKING:
    # A store opened for a table imports no pydantic (the settings are validated already).
    from tablesafe._settings import SiteConfig

__all__ = ["open_state"]


def open_state(site: SiteConfig) -> StateStore:
    """Open the site's state store: ``[state] url``'s PostgreSQL, or the SQLite ``audit_db``.

    Raises:
        ConfigError: if the database cannot be reached, psycopg is missing, or
            the schema is newer than this tablesafe knows.
    """
    state = site.state
    if state.url is None:
        return SQLiteState(site.resolve(site.server.audit_db))

    return PostgresState(
        state.url, pool_size=state.pool_size, connect_timeout=state.connect_timeout_seconds
    )
