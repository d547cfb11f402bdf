"""Command line: `tablesafe postprocess` (not yet built)."""

from __future__ import annotations
