"""The tablesafe exception hierarchy.

Every error tablesafe raises on purpose is a :class:`TablesafeError`. User
errors (bad input that the caller can fix) are kept apart from internal
errors (a broken invariant, i.e. a bug in tablesafe)::

    TablesafeError
    ├── UserError                 bad input; the HTTP layer answers 4xx
    │   ├── CatalogError          malformed catalog, or a catalog that does not match the data
    │   ├── DataError             microdata problems: missing column, bad weights, bad keys
    │   ├── RequestError          an invalid table request (unknown variable or category, ...)
    │   ├── ParameterError        impossible parameters of a mechanism or method
    │   ├── FormatError           a malformed input file (ptable CSV, table CSV, ...)
    │   ├── ConfigError           a malformed or inconsistent site configuration
    │   └── RefusedError          a valid request that the disclosure rules refuse
    │       ├── BudgetExhausted   its new figures would take a record past a privacy budget
    │       └── RiskCeilingExceeded   it would raise the best guess's claimed uniques past a ceiling
    ├── ComputationError          a computation that could not finish (no convergence, too large)
    └── InternalError             a bug in tablesafe; never the caller's fault

User errors also derive from :class:`ValueError`, so code that already catches
``ValueError`` for bad arguments keeps working. Every message says what was
wrong and what is allowed; no message ever contains an unprotected value, a
record key, a seed or a secret.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeVar

__all__ = [
    "BudgetExhausted",
    "CatalogError",
    "ComputationError",
    "ConfigError",
    "DataError",
    "FormatError",
    "InternalError",
    "ParameterError",
    "RefusedError",
    "RequestError",
    "RiskCeilingExceeded",
    "TablesafeError",
    "TooManyCells",
    "UserError",
    "choice",
]

_Option = TypeVar("_Option", bound=StrEnum)


class TablesafeError(Exception):
    """Base class of every error raised by tablesafe on purpose."""

    #: HTTP status the server answers with for this error.
    status_code: int = 500


class UserError(TablesafeError, ValueError):
    """Bad input that the caller can fix.

    Attributes:
        alternatives: A refusal's nearest passing alternatives, where the server
            found some (:mod:`tablesafe.rules._alternatives`): every door shows them.
    """

    status_code = 400
    alternatives: tuple[Any, ...] = ()


class CatalogError(UserError):
    """A malformed catalog, or a catalog that does not match the microdata."""

    status_code = 422


class DataError(UserError):
    """Microdata that cannot be used: missing columns, bad weights or keys."""

    status_code = 422


class RequestError(UserError):
    """An invalid table request: unknown variable or category, too many dimensions."""

    status_code = 400


class ParameterError(UserError):
    """Impossible parameters for a mechanism or method (e.g. epsilon <= 0)."""

    status_code = 400


class FormatError(UserError):
    """A malformed input file (ptable CSV, table CSV, TOML)."""

    status_code = 400


class ConfigError(UserError):
    """A malformed or inconsistent site configuration."""

    status_code = 500


class RefusedError(UserError):
    """A valid request that the data owner's disclosure rules refuse."""

    status_code = 403


class TooManyCells(RefusedError):
    """A table with more cells than the direct limit (``max_cells``) allows.

    Its own type, so that a client can offer the larger limit of a job
    (``max_job_cells``) for it.
    """

    status_code = 403


class BudgetExhausted(RefusedError):
    """A table whose new figures would take some possible record past a privacy budget.

    The privacy ledger (:mod:`tablesafe.rules._ledger`) decides on what was
    published alone; a table already published is still answered.
    """

    status_code = 403


class RiskCeilingExceeded(RefusedError):
    """A table that would raise the putative reconstruction's uniques share past a ceiling.

    The share is computed from published figures and the table's own
    (``putative_uniques_ceiling``, docs/attacks.md).
    """

    status_code = 403


class ComputationError(TablesafeError):
    """A computation that could not finish: no convergence, or too large to enumerate."""

    status_code = 422


class InternalError(TablesafeError):
    """A broken invariant inside tablesafe: a bug, never the caller's fault."""

    status_code = 500


def choice(
    options: type[_Option],
    value: object,
    what: str,
    error: type[UserError] = ParameterError,
) -> _Option:
    """``value``, one of ``options`` given as its member or its text, as the member.

    Args:
        options: The option's StrEnum.
        value: What the caller gave.
        what: The option's name in the message (``"seeds"``, ``"skip rule"``).
        error: The error to raise (a :class:`RequestError` for a request's option).

    Raises:
        UserError: ``error``, naming the value and every allowed one, when
            ``value`` is none of them.
    """
    if value not in tuple(options):
        raise error(f"unknown {what} {value!r}; allowed: {', '.join(options)}")
    return options(str(value))
