"""The one path every door takes (DESIGN decision 15): a site's datasets served.

The HTTP API and the page, jobs, the agent interface (MCP) and the command
line's attacks on a site build tables through :class:`TableService`: one
builder per dataset, whose admission (:mod:`tablesafe.rules._admit`) applies
every rule with the site's state store, the cache of answered tables, the
number of builds at once. A table request as JSON (:class:`TableBody`) is read
here once for every door that receives one (the HTTP body, a job, an agent's
call, a request file of the command line, the audit log's rows). The doors
(``server/``, ``_cli/``) import this package and never each other's modules.
"""

from __future__ import annotations

from tablesafe.service._bodies import TableBody
from tablesafe.service._service import NotFound, Principal, TableService

__all__ = ["NotFound", "Principal", "TableBody", "TableService"]
