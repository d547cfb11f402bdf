"""Evaluating protections on a real dataset's tables: the data owner's parameter choice.

For each table and each mechanism configuration, the protected table is
built with the TableBuilder as the recommended site builds it (keyed seeds
with a secret, so empty cells are perturbed too and the mechanism's stated
figures are those of its ptable; margins aggregated) and
compared with the unprotected tabulation on the inner cells: percent
perturbed, RM, Hellinger distance and utility, mean absolute deviation,
relative absolute difference of the total, and the chi-square test of
independence before and after (two-way tables).

RM (seed 000) compares whole distributions and sits near 1 for every
mechanism on tables with large counts, so it cannot tell mechanisms apart.
Beside it stands an attack measure on the cells that matter for disclosure:
the **share of small cells (true count 1 to 4) whose true count an intruder
recovers** from the published table, with the best of these strategies
(each a fixed rule applied to every cell, chosen after the fact, as an
evaluator would report the strongest known attack):

* *published*: take the published count as the truth;
* *posterior*: the mode of ``P(true i | published j)`` proportional to
  ``prior(i) p(j | i)``, with the mechanism's public ptable and, as prior,
  the histogram of the table's published inner counts (what the intruder
  sees), smoothed by one;
* *weighted*: the estimators of :mod:`tablesafe.attacks._weighted`
  (integer residue, cell mean, margin mean) on the published weighted
  figures, which succeed where weighted figures leak the count.

With continuous variables (``magnitudes``), each table also publishes
their sums and means (the builder's default protection of magnitudes: the
cell-key method for magnitudes beside any count mechanism), and their
utility is the **relative absolute difference** per inner cell,
``100 |X' - X| / |X|`` averaged over the cells with a non-zero true value
that are published (:func:`magnitude_utility`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._builder import Protection, TableBuilder
from tablesafe._errors import ParameterError
from tablesafe._request import Item, TableRequest
from tablesafe._seeds import SeedScheme
from tablesafe.attacks._weighted import guess_counts, mechanism_support
from tablesafe.catalog._dataset import Dataset
from tablesafe.mechanisms import destatis, dp_geometric, drop_add_q, pram_shlomo_young
from tablesafe.metrics import (
    chi_square_independence,
    entropy_risk,
    hellinger_distance,
    hellinger_utility,
    mean_absolute_deviation,
    percent_perturbed,
)

__all__ = [
    "SMALL_CELL_MAX",
    "Evaluation",
    "evaluate",
    "magnitude_utility",
    "mechanism_grid",
    "small_cell_recovery",
]

#: Small cells are those with a true count from 1 to this value.
SMALL_CELL_MAX = 4


@dataclass(frozen=True)
class Evaluation:
    """One row of an evaluation: a table, a configuration and its measures."""

    table: str
    method: str
    measures: dict[str, float | None]

    def as_dict(self) -> dict[str, Any]:
        """A plain dictionary."""
        return {"table": self.table, "method": self.method, **self.measures}


def mechanism_grid(
    methods: Sequence[str],
    epsilons: Sequence[float] = (0.5, 1.0, 2.0),
    caps: Sequence[int] = (3, 5, 7),
) -> list[tuple[str, Any]]:
    """Named mechanism configurations: dp over epsilons x caps, q over caps, pram, ckm."""
    out: list[tuple[str, Any]] = []
    for m in methods:
        if m == "dp":
            out += [(f"dp eps={e} cap={c}", dp_geometric(e, cap=c)) for e in epsilons for c in caps]
        elif m == "q":
            out += [(f"q cap={c}", drop_add_q(0.01, c)) for c in caps]
        elif m == "pram":
            out.append(("pram", pram_shlomo_young()))
        elif m == "ckm":
            out.append(("ckm D=3 V=1", destatis(3, 1.0)))
        else:
            raise ParameterError(f"unknown method {m!r}; allowed: dp, pram, q, ckm")
    return out


#: The keyed seeds' secret of an evaluation (the owner's experiment, never published).
EVALUATION_SECRET = b"tablesafe-evaluation-secret"


def evaluate(
    dataset: Dataset,
    tables: Sequence[Sequence[str]],
    configurations: Sequence[tuple[str, Any]],
    *,
    engine: Any = None,
    magnitudes: Sequence[str] = (),
    secret: bytes = EVALUATION_SECRET,
) -> list[Evaluation]:
    """Measure every configuration on every table (inner cells, sample counts).

    Args:
        dataset: The dataset.
        tables: Each table's dimensions.
        configurations: Named mechanisms (:func:`mechanism_grid`).
        engine: The engine (default DuckDB).
        magnitudes: Continuous variables whose sums and means every table also
            publishes (over the survey weights); adds ``rad_sum_VAR_weighted``,
            ``rad_mean_VAR_weighted`` and, where the site's rules suppress
            sensitive sums, ``unpublished_sum_VAR_weighted`` (percent).
        secret: The secret of the keyed seeds (default: a fixed one, so an
            evaluation is reproducible; every secret gives draws of the same
            distribution).

    Raises:
        RequestError: for an unknown or categorical variable in ``magnitudes``.
    """
    out = []
    mag_stats = tuple(Item(s, (v,)) for v in magnitudes for s in ("sum", "mean"))
    for dims in tables:
        request = TableRequest(tuple(dims), statistic="both", magnitudes=mag_stats)
        base = TableBuilder(dataset, Protection(None), engine=engine)
        true_mags = base.build(request).magnitudes if mag_stats else None
        mean_weight = base.overall_mean_weights()[0]
        truth = base.tabulate(request).aggregates
        inner = truth.inner
        a = truth.n[inner].astype(float)
        wa = truth.weight_sum[inner] if truth.weight_sum is not None else None
        chi_a = chi_square_independence(a) if a.ndim == 2 else (None, None)
        for name, mech in configurations:
            prot = Protection(mech, seeds=SeedScheme.KEYED, secret=secret)
            table = TableBuilder(dataset, prot, engine=base.engine).build(request)
            assert table.counts is not None
            b = table.counts[inner].astype(float)
            measures: dict[str, float | None] = {
                "percent_perturbed": percent_perturbed(a, b),
                "rm": entropy_risk(a, b),
                "hellinger": hellinger_distance(a, b),
                "utility": hellinger_utility(a, b),
                "mad": mean_absolute_deviation(a, b),
                "rad_total": 100 * abs(b.sum() - a.sum()) / a.sum(),
                "epsilon": float(mech.privacy().epsilon),
                "delta": float(mech.privacy().delta),
            }
            if wa is not None and table.weighted is not None:
                measures["rm_weighted"] = entropy_risk(wa, table.weighted[inner])
            measures.update(small_cell_recovery(table, truth.n, mech, mean_weight))
            if true_mags is not None and table.magnitudes is not None:
                measures.update(magnitude_utility(true_mags, table.magnitudes, inner))
            if a.ndim == 2:
                measures["chi2_original"], measures["p_original"] = chi_a
                measures["chi2_protected"], measures["p_protected"] = chi_square_independence(b)
            out.append(Evaluation(" * ".join(dims), name, measures))
    return out


def magnitude_utility(
    truth: Mapping[str, npt.NDArray[np.float64]],
    published: Mapping[str, npt.NDArray[np.float64]],
    cells: Any,
) -> dict[str, float | None]:
    """Relative absolute differences of published sums and means, in percent.

    For each column (``sum_VAR``, ``mean_VAR_weighted``...): ``rad_<column>``, the mean of
    ``100 |X' - X| / |X|`` over the selected cells whose true value is not 0
    and which are published (``None`` when there is none); for sums with
    unpublished cells (NaN: suppressed by a sensitivity rule),
    ``unpublished_<column>``, their percentage of the cells.

    Args:
        truth: The unprotected columns (a table built without protection).
        published: The protected columns, same shapes.
        cells: An index of the cells to compare (e.g. the inner cells).
    """
    out: dict[str, float | None] = {}
    for column, true_values in truth.items():
        x = np.asarray(true_values, dtype=np.float64)[cells]
        y = np.asarray(published[column], dtype=np.float64)[cells]
        shown = ~np.isnan(y)
        use = shown & ~np.isnan(x) & (x != 0)
        rad = 100 * np.abs(y[use] - x[use]) / np.abs(x[use])
        out[f"rad_{column}"] = float(rad.mean()) if rad.size else None
        if column.startswith("sum_") and not shown.all():
            out[f"unpublished_{column}"] = float(100 * (~shown).mean())
    return out


def _posterior_mode(
    mech: Any, published: npt.NDArray[np.int64], support: int
) -> npt.NDArray[np.int64]:
    """Per cell, the most probable true count given the published one (see the module)."""
    c = np.asarray(published, dtype=np.int64).reshape(-1)
    limit = SMALL_CELL_MAX + support  # a published count above this hides no small cell
    size = limit + support + 2
    m = mech.transition_matrix(size)  # M[i, j] = P(published j | true i)
    prior = np.bincount(np.minimum(c, size - 1), minlength=size).astype(np.float64) + 1.0
    posterior = prior[:, None] * m  # P(true i, published j), up to a constant
    mode = np.argmax(posterior, axis=0)  # per published j
    guess = np.where(c <= limit, mode[np.minimum(c, size - 1)], c)
    return np.asarray(guess, dtype=np.int64)


def small_cell_recovery(
    table: Any, true_counts: npt.NDArray[np.int64], mech: Any, mean_weight: float
) -> dict[str, float | None]:
    """Share of small inner cells (true count 1..4) whose true count the attacks recover.

    Args:
        table: The published :class:`~tablesafe.ProtectedTable` (counts, weighted
            figures and all margins).
        true_counts: The true counts, extended shape (the owner's evaluation only).
        mech: The cell-wise mechanism (a PTable): its support and transition
            probabilities are public.
        mean_weight: The dataset's mean weight (public).

    Returns:
        ``small_cells`` (how many), and the percent recovered by each strategy
        (``small_published``, ``small_posterior``, ``small_weighted``) and by
        the best (``small_recovered``); the percents are ``None`` when the
        table has no small cell.
    """
    inner = table.inner
    counts = np.asarray(table.counts, dtype=np.int64)
    truth = np.asarray(true_counts, dtype=np.int64)[inner].reshape(-1)
    published = counts[inner].reshape(-1)
    small = (truth >= 1) & (truth <= SMALL_CELL_MAX)
    out: dict[str, float | None] = {"small_cells": float(small.sum())}
    if not small.any():
        return out | dict.fromkeys(
            ("small_published", "small_posterior", "small_weighted", "small_recovered")
        )
    support = mechanism_support(Protection(mech), int(counts.max()))

    def pct(guess: npt.NDArray[np.int64]) -> float:
        return round(100.0 * float(np.mean(guess[small] == truth[small])), 1)

    shares: dict[str, float | None] = {
        "small_published": pct(published),
        "small_posterior": pct(_posterior_mode(mech, published, support)),
    }
    if table.weighted is not None and table.computed.all():
        k = len(table.dimensions)
        weighted = np.asarray(table.weighted, dtype=np.float64)
        up = tuple(slice(None) if i < k - 1 else slice(-1, None) for i in range(k))
        with np.errstate(divide="ignore", invalid="ignore"):
            mm = np.where(counts[up] > 0, weighted[up] / np.maximum(counts[up], 1), 0.0)
        margin_mean = np.broadcast_to(mm, counts.shape)[inner]
        guesses = guess_counts(published, weighted[inner], support, mean_weight, margin_mean)
        shares["small_weighted"] = max(pct(g.reshape(-1)) for g in guesses.values())
    else:
        shares["small_weighted"] = None
    best = max(v for v in shares.values() if v is not None)
    return out | shares | {"small_recovered": best}
