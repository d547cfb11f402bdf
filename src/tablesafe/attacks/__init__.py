"""Attack simulations: how much a protection lets an intruder learn."""

from __future__ import annotations

from tablesafe.attacks._sliver import SliverResult, sliver_attack

__all__ = ["SliverResult", "sliver_attack"]
