"""Risk and utility measures (seed 000 Section 3.5; seed 003 eqs. 4-5; seed 004)."""

from __future__ import annotations

from tablesafe.mechanisms._variance import ci_overlap
from tablesafe.metrics._measures import (
    chi_square_independence,
    entropy_risk,
    exact_disclosure_probability,
    hellinger_distance,
    hellinger_utility,
    mean_absolute_deviation,
    modified_hellinger_distance,
    percent_perturbed,
    relative_absolute_difference,
)

__all__ = [
    "chi_square_independence",
    "ci_overlap",
    "entropy_risk",
    "exact_disclosure_probability",
    "hellinger_distance",
    "hellinger_utility",
    "mean_absolute_deviation",
    "modified_hellinger_distance",
    "percent_perturbed",
    "relative_absolute_difference",
]
