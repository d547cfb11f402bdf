"""tablesafe: a flexible table builder for confidential survey and census microdata.

The public API is re-exported here; everything in ``_``-prefixed modules is
internal and may change without notice. Subpackages with public APIs of
their own: :mod:`tablesafe.engines`, :mod:`tablesafe.mechanisms`,
:mod:`tablesafe.postprocess`.
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
    from tablesafe._keys import add_record_keys, cell_key_uniform, cell_keys, draw_record_keys
    from tablesafe._protection import Protection, protection_from_settings
    from tablesafe._request import DimensionPlan, TableRequest, TabulationPlan
    from tablesafe._rounding import Rounding
    from tablesafe._settings import ProtectionSettings, SiteConfig, load_site_config
    from tablesafe.catalog._catalog import Catalog, ReplicateDesign, StructuralZero
    from tablesafe.catalog._custom import CustomGroup, CustomGrouping
    from tablesafe.catalog._dataset import Dataset
    from tablesafe.catalog._variables import Category, Variable
    from tablesafe.cells._aggregates import CellAggregates
    from tablesafe.output._table import ProtectedTable
    from tablesafe.output._tabulation import Tabulation, tabulate
    from tablesafe.prepare._catalog_init import init_catalog
    from tablesafe.prepare._demo import write_demo_data
    from tablesafe.prepare._replicates import add_replicates
    from tablesafe.ptable._io import parse_ptable, ptable_csv, read_ptable, write_ptable
    from tablesafe.ptable._ptable import PrivacyFigures, PTable

_EXPORTS = {
    "add_replicates": "tablesafe.prepare._replicates",
    "init_catalog": "tablesafe.prepare._catalog_init",
    "Catalog": "tablesafe.catalog._catalog",
    "Category": "tablesafe.catalog._variables",
    "CellAggregates": "tablesafe.cells._aggregates",
    "CustomGroup": "tablesafe.catalog._custom",
    "CustomGrouping": "tablesafe.catalog._custom",
    "Dataset": "tablesafe.catalog._dataset",
    "DimensionPlan": "tablesafe._request",
    "PTable": "tablesafe.ptable._ptable",
    "PrivacyFigures": "tablesafe.ptable._ptable",
    "ProtectedTable": "tablesafe.output._table",
    "Protection": "tablesafe._protection",
    "ProtectionSettings": "tablesafe._settings",
    "SiteConfig": "tablesafe._settings",
    "load_site_config": "tablesafe._settings",
    "ReplicateDesign": "tablesafe.catalog._catalog",
    "Rounding": "tablesafe._rounding",
    "StructuralZero": "tablesafe.catalog._catalog",
    "TableBuilder": "tablesafe._builder",
    "TableRequest": "tablesafe._request",
    "Tabulation": "tablesafe.output._tabulation",
    "TabulationPlan": "tablesafe._request",
    "Variable": "tablesafe.catalog._variables",
    "add_record_keys": "tablesafe._keys",
    "cell_key_uniform": "tablesafe._keys",
    "cell_keys": "tablesafe._keys",
    "draw_record_keys": "tablesafe._keys",
    "parse_ptable": "tablesafe.ptable._io",
    "protection_from_settings": "tablesafe._protection",
    "ptable_csv": "tablesafe.ptable._io",
    "read_ptable": "tablesafe.ptable._io",
    "tabulate": "tablesafe.output._tabulation",
    "write_demo_data": "tablesafe.prepare._demo",
    "write_ptable": "tablesafe.ptable._io",
}

__getattr__, __dir__ = attach(__name__, _EXPORTS)

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
    "DimensionPlan",
    "FormatError",
    "InternalError",
    "PTable",
    "ParameterError",
    "PrivacyFigures",
    "ProtectedTable",
    "Protection",
    "ProtectionSettings",
    "RefusedError",
    "ReplicateDesign",
    "RequestError",
    "Rounding",
    "SiteConfig",
    "StructuralZero",
    "TableBuilder",
    "TableRequest",
    "TablesafeError",
    "Tabulation",
    "TabulationPlan",
    "UserError",
    "Variable",
    "__version__",
    "add_record_keys",
    "add_replicates",
    "cell_key_uniform",
    "cell_keys",
    "draw_record_keys",
    "init_catalog",
    "load_site_config",
    "parse_ptable",
    "protection_from_settings",
    "ptable_csv",
    "read_ptable",
    "tabulate",
    "write_demo_data",
    "write_ptable",
]
