"""Reproductions of the source papers' studies."""

from __future__ import annotations

from tablesafe.experiments._shlomo2019 import (
    PAPER_TABLE_4,
    PAPER_TABLE_5,
    Shlomo2019,
    run_shlomo2019,
)

__all__ = ["PAPER_TABLE_4", "PAPER_TABLE_5", "Shlomo2019", "run_shlomo2019"]
