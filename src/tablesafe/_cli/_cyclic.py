"""Command line: `tablesafe cyclic` (not yet built)."""

from __future__ import annotations
