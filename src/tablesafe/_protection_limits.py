"""The limits of a dataset's protection settings, in one place and without pydantic.

:class:`tablesafe._settings.ProtectionSettings` builds its fields' bounds and
choices from these tables, and the command line checks its protection
options against the same tables to decide whether it can skip importing
pydantic (``tablesafe._cli._methods``): one definition of what is allowed.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

__all__ = [
    "BOUNDS",
    "CHOICES",
    "INTEGERS",
    "AdditivityName",
    "MethodName",
    "SeedsName",
    "field_bounds",
]

MethodName = Literal["ckm", "dp", "pram", "q", "q-records", "ptable", "none"]
SeedsName = Literal["cellkey", "keyed", "dynamic"]
AdditivityName = Literal["aggregate", "independent", "ipf"]

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
    "method": get_args(MethodName),
    "seeds": get_args(SeedsName),
    "additivity": get_args(AdditivityName),
}


def field_bounds(name: str) -> dict[str, Any]:
    """The bounds of setting ``name`` as pydantic ``Field`` arguments (``gt``/``ge``, ``le``)."""
    low, low_ok, high = BOUNDS[name]
    out: dict[str, Any] = {"ge" if low_ok else "gt": low}
    if high is not None:
        out["le"] = high
    return out
