"""The limits of a dataset's protection settings, in one place and without pydantic.

:class:`tablesafe._settings.ProtectionSettings` builds its fields' bounds and
choices from these tables, and the command line checks its protection
options against the same tables to decide whether it can skip importing
pydantic (``tablesafe._cli._methods``): one definition of what is allowed.

The protection's options are defined here, once: the cell-wise method
(:class:`ProtectionMethod`) and the additivity (:class:`Additivity`, which
:mod:`tablesafe.mechanisms._additivity` carries out); the seed scheme is
:class:`tablesafe._seeds.SeedScheme`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from tablesafe._seeds import SeedScheme

__all__ = [
    "BOUNDS",
    "CHOICES",
    "INTEGERS",
    "Additivity",
    "ProtectionMethod",
    "field_bounds",
]


class ProtectionMethod(StrEnum):
    """The protection of counts a dataset is served with (a member equals its text)."""

    CKM = "ckm"
    DP = "dp"
    PRAM = "pram"
    Q = "q"
    Q_RECORDS = "q-records"
    PTABLE = "ptable"
    NONE = "none"


class Additivity(StrEnum):
    """The data owner's additivity option (DESIGN decision 6; a member equals its text).

    ``aggregate``: margins are sums of the perturbed inner cells;
    ``independent``: every cell perturbed on its own; ``ipf``: independent,
    then IPF to the perturbed margins and controlled rounding.
    """

    AGGREGATE = "aggregate"
    INDEPENDENT = "independent"
    IPF = "ipf"


#: The numeric settings' bounds: name -> (lower bound, whether the bound itself
#: is allowed, upper bound (allowed) or ``None``).
BOUNDS: dict[str, tuple[float, bool, float | None]] = {
    "epsilon": (0, False, None),
    "cap": (1, True, None),
    "rate": (0, False, 1),
    "max_deviation": (1, True, None),
    "variance": (0, False, None),
    "js": (0, True, None),
    "weight_noise": (0, True, 10),
    "se_min_count": (1, True, None),
}

#: The numeric settings that are integers (the others of :data:`BOUNDS` are floats).
INTEGERS = frozenset({"cap", "max_deviation", "js", "se_min_count"})

#: The text settings' allowed values.
CHOICES: dict[str, tuple[str, ...]] = {
    "method": tuple(ProtectionMethod),
    "seeds": tuple(SeedScheme),
    "additivity": tuple(Additivity),
}


def field_bounds(name: str) -> dict[str, Any]:
    """The bounds of setting ``name`` as pydantic ``Field`` arguments (``gt``/``ge``, ``le``)."""
    low, low_ok, high = BOUNDS[name]
    out: dict[str, Any] = {"ge" if low_ok else "gt": low}
    if high is not None:
        out["le"] = high
    return out
