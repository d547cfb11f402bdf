"""Attack simulations: how much a protection lets an intruder learn."""

from __future__ import annotations

from tablesafe.attacks._averaging import AveragingCell, AveragingResult, averaging_attack
from tablesafe.attacks._reconstruct import (
    ReconstructionResult,
    all_k_way_requests,
    published_intervals,
    reconstruction_attack,
)
from tablesafe.attacks._sliver import SliverResult, sliver_attack
from tablesafe.attacks._weighted import WeightedAttackResult, mechanism_support, weighted_attack
from tablesafe.attacks._zeros import (
    DefinitionResult,
    ZeroResult,
    definition_attack,
    zero_attack,
)

__all__ = [
    "AveragingCell",
    "AveragingResult",
    "DefinitionResult",
    "ReconstructionResult",
    "SliverResult",
    "WeightedAttackResult",
    "ZeroResult",
    "all_k_way_requests",
    "averaging_attack",
    "definition_attack",
    "mechanism_support",
    "published_intervals",
    "reconstruction_attack",
    "sliver_attack",
    "weighted_attack",
    "zero_attack",
]
