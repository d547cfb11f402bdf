"""The online table builder: HTTP API, web page, jobs, agent interface, API keys.

The server is a door (DESIGN decision 15): its tables take the one path of
:mod:`tablesafe.service`. The command line starts its processes through
:func:`serve_http`, :func:`serve_agents` and :func:`run_worker` (``tablesafe
serve``, ``mcp``, ``worker``), its only use of this package; the server never
imports the command line.
"""

from __future__ import annotations

import importlib.util

from tablesafe._errors import ConfigError
from tablesafe._protection import site_protection
from tablesafe._settings import SiteConfig
from tablesafe.server._app import create_app
from tablesafe.server._auth import Authenticator, hash_key, new_key
from tablesafe.server._jobs import run_worker
from tablesafe.server._protocol import serve_http
from tablesafe.service import Principal, TableBody, TableService
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
    "run_worker",
    "serve_agents",
    "serve_http",
    "site_protection",
]


def serve_agents(site: SiteConfig, *, api_key: str | None) -> None:
    """Serve the agent interface (MCP) over standard input and output until the client leaves.

    What ``tablesafe mcp`` runs: the tools, resources and prompt of
    :mod:`tablesafe.server._mcp` on the site's one path (its keys, rules,
    ledger and audit log, shared with ``tablesafe serve`` through the state store).

    Args:
        site: The site configuration.
        api_key: The caller's API key (needed where the site configures keys).

    Raises:
        ConfigError: where the MCP SDK is not installed.
        AuthError: for a missing, unknown, expired or revoked key (nothing is answered).
    """
    if importlib.util.find_spec("mcp") is None:
        raise ConfigError("the agent interface needs the MCP SDK: pip install 'tablesafe[mcp]'")
    # Optional dependency: the MCP SDK, imported only where it is installed.
    from tablesafe.server._mcp import serve_stdio

    serve_stdio(site, api_key=api_key)


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
