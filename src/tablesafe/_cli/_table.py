"""Command line: `tablesafe table` (not yet built)."""

from __future__ import annotations
