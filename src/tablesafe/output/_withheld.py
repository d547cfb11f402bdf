"""Withheld cells: a table published with the cells the account finds unsafe left out.

DESIGN decision 13: a rule that finds a few cells of a table unsafe
withholds those cells (every statistic of them, in every format) and
publishes the rest; the site refuses the whole table only past a set share.
Which cells are withheld is decided by :mod:`tablesafe.rules._account`;
this module applies the decision to a protected table:

* every statistic of a withheld cell is blank (``null``), with the flag
  ``withheld``;
* in an additive table the margins add up the inner cells published (the
  builder sums them so), and a margin that leaves some out has the flag
  ``excludes_withheld``; its sums, means and quantiles (which cover all its
  records) are blank, as are percentages of or within a withheld cell;
* where margins are perturbed on their own, the account withholds every
  margin over a withheld cell too.

Formats that show one figure at a time (text, the XLSX's cross-tabs, the
page, JSON-stat, SDMX) mark each withheld figure (:func:`withheld_figures`:
a withheld cell's, a percentage of a withheld denominator's, a sum's, mean's
or quantile's of a total that leaves withheld cells out) with
:data:`WITHHELD_MARK` or their own status, and a total that adds up only the
cells published with :data:`EXCLUDES_WITHHELD_MARK` (docs/formats.md).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from tablesafe.output._published import figure_masks
from tablesafe.output._render import EXCLUDES_WITHHELD_MARK, WITHHELD_MARK
from tablesafe.output._table import ProtectedTable

__all__ = [
    "EXCLUDES_WITHHELD_MARK",
    "WITHHELD_MARK",
    "figure_masks",
    "margins_over",
    "withhold",
]


def margins_over(withheld: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """The margins (extended arrays) that add up at least one withheld inner cell."""
    shape = withheld.shape
    k = len(shape)
    inner = withheld[tuple(slice(0, s - 1) for s in shape)]
    out = np.zeros(shape, dtype=bool)
    for r in range(1, k + 1):
        for axes in itertools.combinations(range(k), r):
            at = tuple(
                slice(s - 1, s) if i in axes else slice(0, s - 1) for i, s in enumerate(shape)
            )
            out[at] |= inner.any(axis=axes, keepdims=True)
    return out


def withhold(
    table: ProtectedTable, withheld: npt.NDArray[np.bool_], *, additive: bool
) -> ProtectedTable:
    """``table`` with the cells of ``withheld`` left out (module docstring).

    Args:
        table: The protected table, its additive margins already summed over
            the inner cells published.
        withheld: The cells to withhold (extended shape; within ``table.computed``).
        additive: Whether the table's margins are sums of its inner cells.
    """
    over = margins_over(withheld) & table.computed & ~withheld

    def hidden(
        values: npt.NDArray[np.float64], also: npt.NDArray[np.bool_] | None = None
    ) -> npt.NDArray[np.float64]:
        hide = withheld if also is None else withheld | also
        if values.ndim > withheld.ndim:  # replicates: (R, *shape)
            return np.where(hide[None], np.nan, values)
        return np.where(hide, np.nan, values)

    def blank(values: npt.NDArray[np.float64] | None) -> npt.NDArray[np.float64] | None:
        return None if values is None else hidden(values)

    masks = figure_masks([*(table.percentages or {})], withheld, None, frozenset())
    percentages = None
    if table.percentages is not None:
        percentages = {name: hidden(v, masks[name]) for name, v in table.percentages.items()}
    meta = dict(table.metadata)
    meta["withheld"] = {
        "cells": int(withheld.sum()),
        "margins": "sums of the cells published" if additive else "withheld with their cells",
        "margins_excluding": int(over.sum()) if additive else 0,
    }
    return replace(
        table,
        counts=None if table.counts is None else np.where(withheld, 0, table.counts),
        # Zero, not NaN, where a column is whole numbers: the flag blanks it in every export.
        weighted=None if table.weighted is None else np.where(withheld, 0.0, table.weighted),
        se=blank(table.se),
        ci_low=blank(table.ci_low),
        ci_high=blank(table.ci_high),
        replicate_weighted=None
        if table.replicate_weighted is None
        else np.where(withheld[None], 0.0, table.replicate_weighted),
        percentages=percentages,
        magnitudes=None
        if table.magnitudes is None
        else {name: hidden(v, over) for name, v in table.magnitudes.items()},
        withheld=withheld,
        excludes_withheld=over if additive else None,
        metadata=meta,
    )
