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
    from tablesafe._aggregates import CellAggregates
    from tablesafe._builder import TableBuilder
    from tablesafe._catalog import Catalog, ReplicateDesign, StructuralZero
    from tablesafe._catalog_init import init_catalog
    from tablesafe._custom import CustomGroup, CustomGrouping
    from tablesafe._dataset import Dataset
    from tablesafe._demo import write_demo_data
    from tablesafe._keys import add_record_keys, cell_key_uniform, cell_keys, draw_record_keys
    from tablesafe._protection import Protection, protection_from_settings
    from tablesafe._ptable import PrivacyFigures, PTable
    from tablesafe._ptable_io import parse_ptable, ptable_csv, read_ptable, write_ptable
    from tablesafe._replicates import add_replicates
    from tablesafe._request import DimensionPlan, TableRequest, TabulationPlan
    from tablesafe._rounding import Rounding
    from tablesafe._settings import ProtectionSettings, SiteConfig, load_site_config
    from tablesafe._table import ProtectedTable
    from tablesafe._tabulation import Tabulation, tabulate
    from tablesafe._variables import Category, Variable

_EXPORTS = {
    "add_replicates": "tablesafe._replicates",
    "init_catalog": "tablesafe._catalog_init",
    "Catalog": "tablesafe._catalog",
    "Category": "tablesafe._variables",
    "CellAggregates": "tablesafe._aggregates",
    "CustomGroup": "tablesafe._custom",
    "CustomGrouping": "tablesafe._custom",
    "Dataset": "tablesafe._dataset",
    "DimensionPlan": "tablesafe._request",
    "PTable": "tablesafe._ptable",
    "PrivacyFigures": "tablesafe._ptable",
    "ProtectedTable": "tablesafe._table",
    "Protection": "tablesafe._protection",
    "ProtectionSettings": "tablesafe._settings",
    "SiteConfig": "tablesafe._settings",
    "load_site_config": "tablesafe._settings",
    "ReplicateDesign": "tablesafe._catalog",
    "Rounding": "tablesafe._rounding",
    "StructuralZero": "tablesafe._catalog",
    "TableBuilder": "tablesafe._builder",
    "TableRequest": "tablesafe._request",
    "Tabulation": "tablesafe._tabulation",
    "TabulationPlan": "tablesafe._request",
    "Variable": "tablesafe._variables",
    "add_record_keys": "tablesafe._keys",
    "cell_key_uniform": "tablesafe._keys",
    "cell_keys": "tablesafe._keys",
    "draw_record_keys": "tablesafe._keys",
    "parse_ptable": "tablesafe._ptable_io",
    "protection_from_settings": "tablesafe._protection",
    "ptable_csv": "tablesafe._ptable_io",
    "read_ptable": "tablesafe._ptable_io",
    "tabulate": "tablesafe._tabulation",
    "write_demo_data": "tablesafe._demo",
    "write_ptable": "tablesafe._ptable_io",
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
