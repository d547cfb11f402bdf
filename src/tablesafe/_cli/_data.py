"""Command line: `tablesafe data` (not yet built)."""

from __future__ import annotations
