"""tablesafe: a flexible table builder for confidential survey and census microdata.

The public API is re-exported here; everything in ``_``-prefixed modules is
internal and may change without notice.
"""

from __future__ import annotations

from tablesafe._errors import (
    CatalogError,
    ComputationError,
    ConfigError,
    DataError,
    FormatError,
    InternalError,
    ParameterError,
    RefusedError,
    RequestError,
    TablesafeError,
    UserError,
)

__version__ = "0.1.0"

__all__ = [
    "CatalogError",
    "ComputationError",
    "ConfigError",
    "DataError",
    "FormatError",
    "InternalError",
    "ParameterError",
    "RefusedError",
    "RequestError",
    "TablesafeError",
    "UserError",
    "__version__",
]
