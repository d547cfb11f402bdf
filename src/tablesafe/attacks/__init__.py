"""Attack simulations: how much a protection lets an intruder learn."""

from __future__ import annotations

from tablesafe.attacks._reconstruct import (
    ReconstructionResult,
    all_k_way_requests,
    published_intervals,
    reconstruction_attack,
)
from tablesafe.attacks._sliver import SliverResult, sliver_attack
from tablesafe.attacks._weighted import WeightedAttackResult, mechanism_support, weighted_attack

__all__ = [
    "ReconstructionResult",
    "SliverResult",
    "WeightedAttackResult",
    "all_k_way_requests",
    "mechanism_support",
    "published_intervals",
    "reconstruction_attack",
    "sliver_attack",
    "weighted_attack",
]
