"""The putative (best-guess) reconstruction: the most probable table given what is published.

Provable pins (:mod:`._decide`) count only the cells no other table consistent
with the publication could change. An intruder need not prove anything: the
US Census Bureau's attack on its 2010 tables took *one* non-negative integer
full cross-classification whose tables come closest to the published figures
and read it as the microdata. This module builds the strongest such table it
knows (HiGHS), with every published cell's interval under the mechanism
(:mod:`._intervals`) as a hard constraint (the truth always satisfies it):

* under a ptable (the cell-key method, DP, PRAM, drop/add-up-to-q) and
  without protection, the table of highest posterior (:mod:`._likely`): the
  ptable's ``p(j | i)`` for each distinct published figure (a record set
  published twice carries the same noise: one observation) and a log-linear
  prior fitted to the published figures;
* otherwise (record-level drop/add-up-to-q, which has no ptable), and when
  more than :data:`POSTERIOR_MAX_CELLS` full cells can hold records, the
  table closest in L1 to the published figures (:mod:`._closest`), the
  Census Bureau's objective.

The posterior's model is far larger than the L1 model (a binary per true
count each figure allows, 13 prior steps per cell): on issue 15's target
(8,352 open cells, every 2-way table of 6 demo variables) HiGHS spent 223 s
of a 120 s time limit at its root node and found no table, where the L1
model was proven closest in 117 s (docs/attacks.md, "How far the best guess
scales"). The choice depends on the published tables only, never on time;
the block states it (``objective``, ``posterior_max_cells``) and the time
limit (``time_limit``; ``optimal`` false when it stopped the solve).

The guess is scored against the truth (cells, records and sample uniques
reconstructed exactly; the precision of the uniques it claims), next to a
``baseline``: the integer table nearest to the independence fit of the true
one-way margins (each cell the fit rounded), which is all a guess from the
one-way margins can do, so the owner sees what the tables add.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe.attacks._reconstruct._ranked import ranked_precision
from tablesafe.catalog._catalog import Catalog
from tablesafe.output._table import ProtectedTable
from tablesafe.rules._ceiling._closest import closest_table
from tablesafe.rules._ceiling._constraints import System, figures
from tablesafe.rules._ceiling._cross import Cross
from tablesafe.rules._ceiling._likely import Likelihood, likeliest_table

#: Above this many full cells that can hold records the best guess is the L1-closest table.
POSTERIOR_MAX_CELLS = 2_000

_Intervals = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]


def independence_guess(cross: Cross) -> npt.NDArray[np.int64]:
    """The integer table nearest the independence fit of the true one-way margins (flat)."""
    truth = cross.truth.reshape(cross.shape)
    n = float(truth.sum())
    fit = np.full(cross.shape, n)
    for axis in range(truth.ndim):
        others = tuple(i for i in range(truth.ndim) if i != axis)
        share = truth.sum(axis=others) / n if n else np.zeros(cross.shape[axis])
        fit = fit * share.reshape([-1 if i == axis else 1 for i in range(truth.ndim)])
    guess: npt.NDArray[np.int64] = np.rint(fit).astype(np.int64).reshape(-1)
    return guess


def score(guess: npt.NDArray[np.int64], truth: npt.NDArray[np.int64]) -> dict[str, Any]:
    """How close a guessed full cross-classification is to the truth."""
    exact = guess == truth
    records = int(truth.sum())
    uniques = truth == 1
    claimed = guess == 1
    hit = int((uniques & claimed).sum())

    def ratio(a: int, b: int) -> float:
        return round(a / b, 6) if b else 0.0

    return {
        "cells_exact_share": ratio(int(exact.sum()), int(truth.size)),
        "records_exact_share": ratio(int(truth[exact].sum()), records),
        "uniques_exact_share": ratio(hit, int(uniques.sum())),
        "uniques_claimed": int(claimed.sum()),
        "uniques_precision": ratio(hit, int(claimed.sum())),
        "l1_distance": int(np.abs(guess - truth).sum()),
    }


def _solver(
    system: System,
    ub0: npt.NDArray[np.float64],
    members: Sequence[npt.NDArray[np.int64]],
    values: npt.NDArray[np.float64],
    lik: Likelihood | None,
) -> Callable[..., tuple[npt.NDArray[np.int64] | None, bool]]:
    """The best guess's solve with a time limit and perturbed costs: L1 or most probable."""

    def solve(
        limit: float, perturbation: npt.NDArray[np.float64] | None = None
    ) -> tuple[npt.NDArray[np.int64] | None, bool]:
        if lik is None:
            return closest_table(
                system, ub0, members, values, time_limit=limit, perturbation=perturbation
            )
        return likeliest_table(
            system, ub0, members, values, lik, time_limit=limit, perturbation=perturbation
        )

    return solve


def putative_attack(
    catalog: Catalog,
    cross: Cross,
    tables: Sequence[ProtectedTable],
    intervals: Sequence[_Intervals],
    system: System,
    ub0: npt.NDArray[np.float64],
    *,
    time_limit: float,
    ranked: int = 0,
    likelihood: Callable[[int], Likelihood] | None = None,
    posterior_max_cells: int = POSTERIOR_MAX_CELLS,
) -> dict[str, Any]:
    """The putative reconstruction's scores, its baseline's, and (optionally) the ranked one's.

    Args:
        catalog: The dataset's catalog.
        cross: The full cross-classification (with the truth, to score).
        tables: The published tables.
        intervals: Per table, what the intruder knows of each cell.
        system: The intervals as constraints.
        ub0: Each full cell's upper bound.
        time_limit: Seconds for the best-guess solve (the ranked solves share
            what it leaves).
        ranked: Perturbed re-solves for the confidence-ranked reconstruction
            (0: none).
        likelihood: The mechanism's ``log p(j | i)`` for published values up
            to a given one; ``None`` for the L1-closest table.
        posterior_max_cells: Above this many full cells that can hold
            records, the L1-closest table even with a ``likelihood``.

    Returns:
        The ``putative`` block: ``objective`` (``posterior`` or ``l1``),
        ``posterior_max_cells``, ``time_limit`` (seconds), ``optimal``
        (false: the time limit stopped the solve), ``base_rate`` (share of
        cells holding a sample unique), the shares of :func:`score`, and
        ``baseline`` (the same for :func:`independence_guess`); with
        ``ranked`` > 0, ``ranked_precision``.
    """
    members, values = figures(catalog, cross, tables, intervals, system)
    too_large = int(system.alive.size) > posterior_max_cells
    lik = (
        likelihood(int(values.max(initial=0.0)))
        if likelihood is not None and not too_large
        else None
    )
    solve = _solver(system, ub0, members, values, lik)
    start = time.monotonic()
    guess, optimal = solve(time_limit)
    truth = cross.truth
    out: dict[str, Any] = {
        "objective": "l1" if lik is None else "posterior",
        "posterior_max_cells": posterior_max_cells,
        "time_limit": float(time_limit),
        "optimal": optimal,
        "figures": int(values.size),
        "base_rate": round(float((truth == 1).mean()) if truth.size else 0.0, 6),
    }
    if guess is None:
        out["found"] = False
    else:
        out["found"] = True
        out.update(score(guess, truth))
        x = guess[system.alive]
        near = [abs(int(x[v].sum()) - j) for v, j in zip(members, values, strict=True)]
        out["l1_to_published"] = int(sum(near))
    out["baseline"] = score(independence_guess(cross), truth)
    if ranked > 0 and guess is not None:
        budget = max(time_limit - (time.monotonic() - start), 0.01)
        out["ranked_precision"] = ranked_precision(solve, truth, runs=ranked, time_limit=budget)
    return out
