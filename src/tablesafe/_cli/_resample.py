"""Command line: `tablesafe resample` (not yet built)."""

from __future__ import annotations
