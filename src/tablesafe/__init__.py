"""tablesafe: a flexible table builder for confidential survey and census microdata.

The public API is re-exported here; everything in ``_``-prefixed modules is
internal and may change without notice. Subpackages with public APIs of
their own: :mod:`tablesafe.catalog`, :mod:`tablesafe.engines`,
:mod:`tablesafe.ptable`, :mod:`tablesafe.mechanisms`, :mod:`tablesafe.prepare`
(the data owner's offline tools), :mod:`tablesafe.postprocess`, and the
workbench's :mod:`tablesafe.attacks`, :mod:`tablesafe.metrics`,
:mod:`tablesafe.experiments`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from tablesafe._lazy import attach
from tablesafe._version import __version__

if TYPE_CHECKING:
    from tablesafe._builder import TableBuilder
    from tablesafe._keys import cell_key_uniform, cell_keys, draw_record_keys
    from tablesafe._protection import Protection, protection_from_settings
    from tablesafe._request import TableRequest
    from tablesafe._rounding import Rounding
    from tablesafe._settings import ProtectionSettings, SiteConfig, load_site_config
    from tablesafe.catalog._catalog import Catalog
    from tablesafe.catalog._custom import CustomGroup, CustomGrouping
    from tablesafe.catalog._dataset import Dataset
    from tablesafe.catalog._variables import Category, Variable
    from tablesafe.cells._aggregates import CellAggregates
    from tablesafe.cells._plan import TabulationPlan
    from tablesafe.output._table import ProtectedTable
    from tablesafe.output._tabulation import Tabulation, tabulate
    from tablesafe.ptable._ptable import PrivacyFigures, PTable

_EXPORTS = {
    "Catalog": "tablesafe.catalog._catalog",
    "Category": "tablesafe.catalog._variables",
    "CellAggregates": "tablesafe.cells._aggregates",
    "CustomGroup": "tablesafe.catalog._custom",
    "CustomGrouping": "tablesafe.catalog._custom",
    "Dataset": "tablesafe.catalog._dataset",
    "PTable": "tablesafe.ptable._ptable",
    "PrivacyFigures": "tablesafe.ptable._ptable",
    "ProtectedTable": "tablesafe.output._table",
    "Protection": "tablesafe._protection",
    "ProtectionSettings": "tablesafe._settings",
    "SiteConfig": "tablesafe._settings",
    "load_site_config": "tablesafe._settings",
    "Rounding": "tablesafe._rounding",
    "TableBuilder": "tablesafe._builder",
    "TableRequest": "tablesafe._request",
    "Tabulation": "tablesafe.output._tabulation",
    "TabulationPlan": "tablesafe.cells._plan",
    "Variable": "tablesafe.catalog._variables",
    "cell_key_uniform": "tablesafe._keys",
    "cell_keys": "tablesafe._keys",
    "draw_record_keys": "tablesafe._keys",
    "protection_from_settings": "tablesafe._protection",
    "tabulate": "tablesafe.output._tabulation",
}

#: Names public in 0.1, moved to the subpackage that owns them (issue 27):
#: importable from here for one more release, with a DeprecationWarning.
_MOVED = {
    "DimensionPlan": "tablesafe.engines",
    "ReplicateDesign": "tablesafe.catalog",
    "StructuralZero": "tablesafe.catalog",
    "add_record_keys": "tablesafe.prepare",
    "add_replicates": "tablesafe.prepare",
    "init_catalog": "tablesafe.prepare",
    "parse_ptable": "tablesafe.ptable",
    "ptable_csv": "tablesafe.ptable",
    "read_ptable": "tablesafe.ptable",
    "write_demo_data": "tablesafe.prepare",
    "write_ptable": "tablesafe.ptable",
}

__getattr__, __dir__ = attach(__name__, _EXPORTS, _MOVED)

__all__ = [
    "Catalog",
    "CatalogError",
    "Category",
    "CellAggregates",
    "ComputationError",
    "ConfigError",
    "CustomGroup",
    "CustomGrouping",
    "DataError",
    "Dataset",
    "FormatError",
    "InternalError",
    "PTable",
    "ParameterError",
    "PrivacyFigures",
    "ProtectedTable",
    "Protection",
    "ProtectionSettings",
    "RefusedError",
    "RequestError",
    "Rounding",
    "SiteConfig",
    "TableBuilder",
    "TableRequest",
    "TablesafeError",
    "Tabulation",
    "TabulationPlan",
    "UserError",
    "Variable",
    "__version__",
    "cell_key_uniform",
    "cell_keys",
    "draw_record_keys",
    "load_site_config",
    "protection_from_settings",
    "tabulate",
]
