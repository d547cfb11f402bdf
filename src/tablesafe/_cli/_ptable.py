"""Command line: `tablesafe ptable` (not yet built)."""

from __future__ import annotations
