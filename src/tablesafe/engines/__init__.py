"""Engines: where microdata is read and aggregated, behind one narrow protocol."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tablesafe._lazy import attach

if TYPE_CHECKING:
    from tablesafe.cells._plan import DimensionPlan
    from tablesafe.engines._base import DatasetSummary, Engine
    from tablesafe.engines._cube import CubeCache
    from tablesafe.engines._duckdb import DuckDBEngine
    from tablesafe.engines._memory import MemoryEngine
    from tablesafe.engines._spark import SparkEngine

_EXPORTS = {
    "DimensionPlan": "tablesafe.cells._plan",
    "CubeCache": "tablesafe.engines._cube",
    "DatasetSummary": "tablesafe.engines._base",
    "DuckDBEngine": "tablesafe.engines._duckdb",
    "Engine": "tablesafe.engines._base",
    "MemoryEngine": "tablesafe.engines._memory",
    "SparkEngine": "tablesafe.engines._spark",
}

__getattr__, __dir__ = attach(__name__, _EXPORTS)

__all__ = [
    "CubeCache",
    "DatasetSummary",
    "DimensionPlan",
    "DuckDBEngine",
    "Engine",
    "MemoryEngine",
    "SparkEngine",
]


def engine_or_default(engine: Engine | None) -> Engine:
    """``engine``, or a new DuckDB engine (the default, DESIGN decision 7) for ``None``."""
    if engine is not None:
        return engine
    # Start-up: DuckDB loads only where it is the engine (a table on another never imports it).
    from tablesafe.engines._duckdb import DuckDBEngine

    return DuckDBEngine()
