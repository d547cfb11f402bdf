"""The catalog: variables, categories, groupings, hierarchies, magnitudes, the dataset."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tablesafe._lazy import attach

if TYPE_CHECKING:
    from tablesafe.catalog._catalog import Catalog, ReplicateDesign, StructuralZero
    from tablesafe.catalog._custom import CustomGroup, CustomGrouping
    from tablesafe.catalog._dataset import Dataset
    from tablesafe.catalog._units import CountingUnit, Unit
    from tablesafe.catalog._variables import Category, Variable

_EXPORTS = {
    "Catalog": "tablesafe.catalog._catalog",
    "ReplicateDesign": "tablesafe.catalog._catalog",
    "StructuralZero": "tablesafe.catalog._catalog",
    "Category": "tablesafe.catalog._variables",
    "Variable": "tablesafe.catalog._variables",
    "CustomGroup": "tablesafe.catalog._custom",
    "CustomGrouping": "tablesafe.catalog._custom",
    "Dataset": "tablesafe.catalog._dataset",
    "CountingUnit": "tablesafe.catalog._units",
    "Unit": "tablesafe.catalog._units",
}

__getattr__, __dir__ = attach(__name__, _EXPORTS)

__all__ = [
    "Catalog",
    "Category",
    "CountingUnit",
    "CustomGroup",
    "CustomGrouping",
    "Dataset",
    "ReplicateDesign",
    "StructuralZero",
    "Unit",
    "Variable",
]
