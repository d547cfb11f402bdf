"""Discrete factor products over cycle signs, for the cyclic-perturbation posterior.

The posterior of Duncan & Roehrig's cyclic perturbation (seed 002) is a
product of small factors over the sign variables ``s_k`` in {-1, 0, +1} (one
per cycle): a factor per cycle (the coin probability of what happened at
that step, which depends only on the cells the cycle touches) and a factor
per cell (non-negativity and the prior of the original value). Summing
such a product by variable elimination costs ``3 ** w`` per step, where
``w`` is the largest intermediate scope, instead of ``3 ** k`` for brute
force over k cycles: a 20 x 20 table with the default 20 cycles has
``w = 3``.

Every variable has the three states -1, 0, +1, stored at indices 0, 1, 2.
"""

from __future__ import annotations

import math
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tablesafe._errors import ComputationError

__all__: list[str] = []

#: Letters for :func:`numpy.einsum` subscripts; a step never involves more variables.
_LETTERS = string.ascii_letters


@dataclass(frozen=True)
class Factor:
    """A non-negative function of a few sign variables.

    Attributes:
        scope: The variables, in increasing order.
        table: Values, shape ``(3,) * len(scope)``; axis ``i`` is ``scope[i]``.
    """

    scope: tuple[int, ...]
    table: np.ndarray


def assignments(r: int) -> np.ndarray:
    """All ``3 ** r`` sign vectors of length ``r`` in C order, as int8 (rows)."""
    if r == 0:
        return np.zeros((1, 0), dtype=np.int8)
    grid = np.indices((3,) * r, dtype=np.int8).reshape(r, -1).T
    return grid - np.int8(1)


def _product_sum(factors: Sequence[Factor], keep: tuple[int, ...]) -> np.ndarray:
    """Multiply ``factors`` and sum out every variable not in ``keep``.

    Every variable of ``keep`` must occur in some factor (einsum cannot
    create an axis); :func:`marginal` adds free variables itself.
    """
    letters: dict[int, str] = {}
    for f in factors:
        for v in f.scope:
            if v not in letters:
                if len(letters) == len(_LETTERS):
                    raise ComputationError(
                        "a step of the posterior computation involves more than "
                        f"{len(_LETTERS)} cycles; the cycle set overlaps too much to factorise"
                    )
                letters[v] = _LETTERS[len(letters)]
    for v in keep:
        letters.setdefault(v, _LETTERS[len(letters)])
    inputs = ",".join("".join(letters[v] for v in f.scope) for f in factors)
    output = "".join(letters[v] for v in keep)
    if not factors:
        return np.ones((3,) * len(keep))
    out = np.einsum(f"{inputs}->{output}", *[f.table for f in factors], optimize=True)
    return np.asarray(out, dtype=np.float64)


def marginal(
    factors: Iterable[Factor],
    keep: Sequence[int],
    *,
    max_entries: int,
) -> tuple[np.ndarray, float]:
    """The product of ``factors`` summed over all variables but ``keep``.

    Variables are eliminated greedily, smallest resulting scope first.
    Intermediate factors are rescaled to a maximum of 1 (the scale is
    returned as a natural logarithm) so that products over many cycles
    neither underflow nor overflow.

    Args:
        factors: The factors.
        keep: Variables to keep (any order; the result follows sorted order).
        max_entries: Refuse intermediate factors larger than this.

    Returns:
        ``(table, log_scale)``: the unnormalised marginal over ``sorted(keep)``
        is ``table * exp(log_scale)``.

    Raises:
        ComputationError: if an intermediate factor would exceed ``max_entries``.
    """
    keep_t = tuple(sorted(set(keep)))
    fs = list(factors)
    log_scale = 0.0
    to_eliminate = {v for f in fs for v in f.scope} - set(keep_t)
    while to_eliminate:
        best, best_scope = -1, tuple[int, ...]()
        for v in sorted(to_eliminate):
            scope = tuple(sorted({u for f in fs if v in f.scope for u in f.scope} - {v}))
            if best < 0 or len(scope) < len(best_scope):
                best, best_scope = v, scope
        if 3 ** len(best_scope) > max_entries:
            raise ComputationError(
                f"the posterior needs a joint table over {len(best_scope)} cycles "
                f"({3 ** len(best_scope):,} entries, more than {max_entries:,}); the "
                "cycles overlap too much to factorise. Use fewer or less overlapping cycles."
            )
        involved = [f for f in fs if best in f.scope]
        fs = [f for f in fs if best not in f.scope]
        table = _product_sum(involved, best_scope)
        peak = float(table.max()) if table.size else 0.0
        if peak > 0:
            table = table / peak
            log_scale += math.log(peak)
        fs.append(Factor(best_scope, table))
        to_eliminate.discard(best)
    present = {v for f in fs for v in f.scope}
    table = _product_sum(fs, tuple(v for v in keep_t if v in present))
    # Variables of keep that no factor mentions carry weight 1 in every state.
    for axis, v in enumerate(keep_t):
        if v not in present:
            table = np.expand_dims(table, axis).repeat(3, axis=axis)
    return table, log_scale
