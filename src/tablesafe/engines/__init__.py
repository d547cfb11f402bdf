"""Engines: where microdata is read and aggregated, behind one narrow protocol."""

from __future__ import annotations

from tablesafe.engines._base import DatasetSummary, Engine
from tablesafe.engines._duckdb import DuckDBEngine
from tablesafe.engines._memory import MemoryEngine
from tablesafe.engines._spark import SparkEngine

__all__ = ["DatasetSummary", "DuckDBEngine", "Engine", "MemoryEngine", "SparkEngine"]
