"""Structural zeros: the cells of a table that cannot hold a record, from the catalog alone."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tablesafe.catalog._catalog import Catalog

if TYPE_CHECKING:
    from tablesafe.cells._plan import TabulationPlan

__all__ = ["structural_zero_mask"]


def structural_zero_mask(catalog: Catalog, plan: TabulationPlan) -> npt.NDArray[np.bool_]:
    """Which cells of the table are structural zeros.

    An inner cell is a structural zero when, for some declared structural
    zero, every variable it names is either a dimension whose category in
    the cell lies inside the declared codes, or restricted by the universe
    to codes inside them. A margin cell is a structural zero when all the
    inner cells it adds up are.
    """
    shape = plan.shape
    inner_shape = tuple(s - 1 for s in shape)
    inner = np.zeros(inner_shape, dtype=bool)
    universe = dict(plan.universe)
    for zero in catalog.structural_zeros:
        cond = np.ones(inner_shape, dtype=bool)
        for name, codes in zero.codes.items():
            var = catalog.variable(name)
            source = {s for c in codes for s in var.source_codes(c)}
            dims = [i for i, d in enumerate(plan.dimensions) if d.column == var.column]
            if dims:
                i = dims[0]
                inside = np.array(
                    [set(m) <= source for m in plan.dimensions[i].members], dtype=bool
                )
                cond &= inside.reshape([-1 if j == i else 1 for j in range(len(shape))])
            elif var.column in universe and set(universe[var.column]) <= source:
                continue
            else:
                cond[...] = False
        inner |= cond
    # A margin is a structural zero when every inner cell it spans is (a
    # logical "all" over the axes it totals; read from the plan, no stage).
    mask = np.zeros(shape, dtype=bool)
    n = len(shape)
    for r in range(n + 1):
        for axes in itertools.combinations(range(n), r):
            at = tuple(-1 if i in axes else slice(0, inner_shape[i]) for i in range(n))
            mask[at] = inner.all(axis=axes) if axes else inner
    return mask
