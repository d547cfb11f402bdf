"""The weighted-figures attack: recover true counts from published weighted figures.

An intruder holds a published table (protected counts ``n'`` and weighted
figures ``W'``) and what is public about the protection: the mechanism's
support (a count moves by at most ``D``), the dataset's mean weight, the
rounding. For every cell the true count ``n`` lies in ``n' - D .. n' + D``;
the attack tries to single it out with three estimators:

* **residue** (integer weights, seed 000 eq. 4): ``W' = W + v * w_mean``
  with ``W`` an integer: ``W' - (n' - n) * w_mean`` is an integer for only
  one candidate ``n``;
* **cell mean** (integer weights, eq. 5): ``W' / n' = W / n`` with ``W`` an
  integer: ``n * W' / n'`` is an integer for only a few candidates, and the
  one nearest ``n'`` is taken;
* **continuous** (any weights): the true weighted count ``W`` is close to
  ``n * m`` where ``m``, the cell's mean weight, is estimated from the
  published weighted figure and count of the enclosing margin; a published
  figure that stays near ``W`` (rather than moving with the count) gives
  ``n = round(W' / m)`` away.

A guess counts as right when it equals the true count. The baseline is the
guess "published = true" (``n = n'``), right for every cell the mechanism
left unperturbed; an attack that does no better than the baseline learns
nothing from the weighted figures that the counts had not told.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import RequestError
from tablesafe.output._table import ProtectedTable

__all__ = [
    "WeightedAttackResult",
    "guess_counts",
    "mechanism_support",
    "seed000_figures",
    "weighted_attack",
]

#: How close to an integer a figure must be to count as one.
_TOL = 1e-6


@dataclass(frozen=True)
class WeightedAttackResult:
    """Share of cells whose true count each estimator recovers (percent).

    Attributes:
        cells: Inner cells attacked (those with a published count above 0).
        baseline: Percent right by guessing the published count.
        residue: Percent right by the integer-residue estimator (eq. 4 style).
        cell_mean: Percent right by the cell-mean estimator (eq. 5 style).
        continuous: Percent right by the margin-mean estimator.
        best: Percent right by the best of the three.
    """

    cells: int
    baseline: float
    residue: float
    cell_mean: float
    continuous: float
    best: float

    def as_dict(self) -> dict[str, Any]:
        """The result as a plain dictionary."""
        return dict(self.__dict__)


def guess_counts(
    counts: npt.NDArray[np.int64],
    weighted: npt.NDArray[np.float64],
    support: int,
    mean_weight: float,
    margin_mean: npt.NDArray[np.float64],
) -> dict[str, npt.NDArray[np.int64]]:
    """Each estimator's guess of the true count of every cell (flat arrays).

    Args:
        counts: Published counts ``n'``.
        weighted: Published weighted figures ``W'``.
        support: ``D``, the largest change the mechanism makes to a count.
        mean_weight: The dataset's mean weight (public).
        margin_mean: Per cell, the intruder's estimate of its mean weight.
    """
    c = np.asarray(counts, dtype=np.int64).reshape(-1)
    w = np.asarray(weighted, dtype=np.float64).reshape(-1)
    mm = np.asarray(margin_mean, dtype=np.float64).reshape(-1)
    shifts = np.arange(-support, support + 1)
    cand = c[:, None] - shifts[None, :]  # candidate true counts, n = n' - v
    valid = cand >= 0

    def nearest_integral(x: np.ndarray) -> np.ndarray:
        return np.asarray(np.abs(x - np.rint(x)) < _TOL * np.maximum(1.0, np.abs(x)))

    def pick(ok: np.ndarray) -> np.ndarray:
        # The candidate nearest the published count among those that pass.
        ok = ok & valid
        dist = np.where(ok, np.abs(cand - c[:, None]), np.iinfo(np.int64).max)
        best = np.argmin(dist, axis=1)
        chosen = cand[np.arange(len(c)), best]
        return np.where(ok.any(axis=1), chosen, c)

    residue = pick(nearest_integral(w[:, None] - shifts[None, :] * mean_weight))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(c > 0, w / np.maximum(c, 1), 0.0)
    cell_mean = pick(nearest_integral(cand * ratio[:, None]))
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.where(mm > 0, w / mm, c)
    continuous = np.clip(np.rint(est), c - support, c + support).astype(np.int64)
    continuous = np.maximum(continuous, 0)
    return {"residue": residue, "cell_mean": cell_mean, "continuous": continuous}


def weighted_attack(
    table: ProtectedTable,
    true_counts: npt.NDArray[np.int64],
    *,
    support: int,
    mean_weight: float,
) -> WeightedAttackResult:
    """Attack the inner cells of a published table whose true counts are known to the owner.

    Args:
        table: The published table (counts and weighted figures, all margins).
        true_counts: The true counts, extended shape (the owner's evaluation).
        support: ``D``, the largest change the mechanism makes to a count.
        mean_weight: The dataset's mean weight.

    Raises:
        RequestError: if the table lacks counts, weighted figures or margins.
    """
    if table.counts is None or table.weighted is None:
        raise RequestError("the weighted-figures attack needs a table with counts and weights")
    if not table.computed.all():
        raise RequestError("the weighted-figures attack needs a table with all margins")
    inner = table.inner
    k = len(table.dimensions)
    counts = table.counts.astype(np.int64)
    weighted = table.weighted.astype(np.float64)
    # The intruder's estimate of a cell's mean weight: the published weighted figure
    # over the published count of the margin without the last dimension (one level up).
    up = tuple(slice(None) if i < k - 1 else slice(-1, None) for i in range(k))
    with np.errstate(divide="ignore", invalid="ignore"):
        margin_mean = np.where(counts[up] > 0, weighted[up] / np.maximum(counts[up], 1), 0.0)
    margin_mean = np.broadcast_to(margin_mean, counts.shape)[inner]
    c, w, truth = counts[inner], weighted[inner], np.asarray(true_counts)[inner]
    keep = (c > 0).reshape(-1)
    guesses = guess_counts(c, w, support, mean_weight, margin_mean)
    t = truth.reshape(-1)[keep]
    cells = int(keep.sum())

    def pct(g: np.ndarray) -> float:
        return round(100.0 * float(np.mean(g[keep] == t)), 1) if cells else 0.0

    shares = {name: pct(g) for name, g in guesses.items()}
    return WeightedAttackResult(
        cells=cells,
        baseline=pct(c.reshape(-1)),
        residue=shares["residue"],
        cell_mean=shares["cell_mean"],
        continuous=shares["continuous"],
        best=max(shares.values()),
    )


def mechanism_support(protection: Any, largest_count: int) -> int:
    """``D``: the largest change the protection makes to a count (public knowledge).

    For a ptable, the largest ``|v|`` with positive probability; for
    record-level drop/add-up-to-q, ``q`` of the largest count the table can hold.
    """
    mech = protection.mechanism
    if mech is None:
        return 0
    if getattr(mech, "record_level", False):
        top = np.array([2 * max(int(largest_count), 1)])
        return int(mech.q(top)[0])
    rows = list(getattr(mech, "rows", ())) + list(getattr(mech, "residue_rows", ()))
    if not rows:
        raise RequestError("the attack needs a ptable (its support) or drop/add-up-to-q")
    return int(max(np.abs(np.asarray(v)[np.asarray(p) > 0]).max() for v, p in rows))


def seed000_figures(
    weight_sum: npt.NDArray[np.float64],
    n: npt.NDArray[np.int64],
    counts: npt.NDArray[np.int64],
    mean_weight: float,
    equation: int,
) -> npt.NDArray[np.float64]:
    """Seed 000's weighted counts at full precision, for comparison only (never published).

    Eq. 4 moves the true weighted count by ``v`` overall mean weights, eq. 5
    by ``v`` cell mean weights: ``W + v * w_mean`` or ``W * n' / n``; 0 where
    the protected count is 0. The attack recovers true counts from these;
    tablesafe publishes :mod:`tablesafe.mechanisms._weighted`'s figures instead.
    """
    if equation not in (4, 5):
        raise RequestError(f"seed 000 gives weighted counts by eq. 4 or eq. 5, not {equation}")
    v = counts - n
    if equation == 4:
        out = weight_sum + v * mean_weight
    else:
        mean = np.divide(weight_sum, n, out=np.full(n.shape, mean_weight), where=n > 0)
        out = weight_sum + v * mean
    return np.asarray(np.where(counts > 0, np.maximum(out, 0.0), 0.0), dtype=np.float64)
