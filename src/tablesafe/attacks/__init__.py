"""Attack simulations: how much a protection lets an intruder learn."""

from __future__ import annotations

from tablesafe.attacks._sliver import SliverResult, sliver_attack
from tablesafe.attacks._weighted import WeightedAttackResult, mechanism_support, weighted_attack

__all__ = [
    "SliverResult",
    "WeightedAttackResult",
    "mechanism_support",
    "sliver_attack",
    "weighted_attack",
]
