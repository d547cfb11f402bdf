"""Perturbation tables: the PTable type and its CSV files (Destatis and ABS layouts)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tablesafe._lazy import attach

if TYPE_CHECKING:
    from tablesafe.ptable._io import parse_ptable, ptable_csv, read_ptable, write_ptable
    from tablesafe.ptable._ptable import PrivacyFigures, PTable

_EXPORTS = {
    "PTable": "tablesafe.ptable._ptable",
    "PrivacyFigures": "tablesafe.ptable._ptable",
    "parse_ptable": "tablesafe.ptable._io",
    "ptable_csv": "tablesafe.ptable._io",
    "read_ptable": "tablesafe.ptable._io",
    "write_ptable": "tablesafe.ptable._io",
}

__getattr__, __dir__ = attach(__name__, _EXPORTS)

__all__ = [
    "PTable",
    "PrivacyFigures",
    "parse_ptable",
    "ptable_csv",
    "read_ptable",
    "write_ptable",
]
