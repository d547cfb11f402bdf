"""Counts: the protected counts every statistic rests on, and the weighted figures behind them.

Each cell to perturb gets a uniform from its keys (:mod:`tablesafe._seeds`)
and a perturbation ``v`` from the mechanism; structural zeros are never
perturbed; counts never go below zero. Weighted figures are the protected
count times the cell's mean weight, plus noise from the cell's keys
(:mod:`tablesafe.mechanisms._weighted`); replicate estimates follow them, so
standard errors stay valid. Additivity (:mod:`tablesafe.mechanisms._additivity`):
aggregate, independent, or IPF with controlled rounding; all arrays of a
table are added up into their margins in one pass. Record-level protection
(drop/add-up-to-q, Li & Krenzke 2016) changes the records a cell holds instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import InternalError
from tablesafe._protection import CellwiseMechanism
from tablesafe._protection_limits import Additivity
from tablesafe._seeds import SeedScheme, dynamic_streams
from tablesafe.cells._aggregates import KEY_MODULUS, CellAggregates
from tablesafe.cells._plan import TabulationPlan
from tablesafe.mechanisms._additivity import aggregate_margins, controlled_rounding, fit_to_margins
from tablesafe.mechanisms._records import DropAddRecords
from tablesafe.mechanisms._weighted import enclosing_means, protected_weighted, replicate_figures
from tablesafe.statistics._source import Source
from tablesafe.statistics._statistic import Figures, PublishedStatistic, TableWork

__all__ = ["Counts", "protect_counts"]

Array = np.ndarray
Mask = npt.NDArray[np.bool_]


class Counts(PublishedStatistic):
    """The protected counts (``n``), with the cells the mechanism and additivity changed."""

    name = "counts"

    def publish(self, work: TableWork, figures: Figures) -> None:
        """The table's own counts (a base's are the bases' statistic's)."""
        if figures.variable is None:
            work.columns.counts = figures.counts


def protect_counts(
    work: TableWork,
    plan: TabulationPlan,
    agg: CellAggregates,
    meta: dict[str, Any],
    withheld: Mask | None = None,
) -> tuple[Figures, Mask, Mask]:
    """The protected counts of ``agg`` (the table's, or a base's), record-level or cell-wise.

    Args:
        work: The table under way.
        plan: The plan ``agg`` was tabulated for.
        agg: The exact aggregates of every grouping set.
        meta: The metadata the protection's facts go to.
        withheld: Inner cells the account withholds: in an additive table the
            margins add up the inner cells published.

    Returns:
        The protected figures (counts, weighted figures and replicates, not
        yet rounded), the perturbed and the adjusted cells (only where computed).
    """
    source, computed = work.source, work.computed
    if source.protection.record_level:
        counts, weighted, reps = _records(work, plan, agg, withheld)
        meta["additivity"] = "aggregate (record level)"
        perturbed = np.where(computed, counts != agg.n, False)
        adjusted = np.zeros(agg.shape, dtype=bool)
    else:
        counts, weighted, reps, adjusted = _cells(work, plan, agg, meta, withheld)
        perturbed = (counts != agg.n) & computed
        adjusted &= computed
    if np.any(counts[computed] < 0):
        raise InternalError("a protected count is negative")
    figures = Figures(None, plan, agg, counts, weighted, weighted, reps)
    return figures, perturbed, adjusted


def _cells(
    work: TableWork,
    plan: TabulationPlan,
    agg: CellAggregates,
    meta: dict[str, Any],
    withheld: Mask | None,
) -> tuple[Array, Array | None, Array | None, Array]:
    """Cell-wise mechanism and additivity: counts, weighted figures, replicates, adjusted."""
    source = work.source
    prot = source.protection
    sets = plan.grouping_sets
    shape = agg.shape
    sz, computed = work.structural_zero, work.computed
    target = agg.is_inner() & ~sz if prot.additivity == Additivity.AGGREGATE else computed & ~sz
    v = np.zeros(shape, dtype=np.int64)
    mech = prot.mechanism
    draw = mech is not None and not isinstance(mech, DropAddRecords) and bool(target.any())
    want_w = mech is not None and agg.weight_sum is not None
    # Margins of an additive table are sums of inner cells: no draws needed there.
    inner_only = prot.additivity == Additivity.AGGREGATE
    u, u_w = _draws(source, agg, plan, draw, want_w, inner_only=inner_only)
    if draw:
        assert isinstance(mech, CellwiseMechanism) and u is not None
        keys = None
        if prot.seeds == SeedScheme.CELLKEY:
            # Sampled ptables look cells up by key; an empty cell's stands in
            # from its definition's draw (all empty cells have key 0).
            from_u = np.floor(u[target] * float(KEY_MODULUS)).astype(np.uint32)
            by_definition = (agg.n[target] == 0) | prot.keyed_by_definition
            keys = np.where(by_definition, from_u, agg.cell_key[target])
        drawn = mech.perturbation(agg.n[target], u[target], keys)
        v[target] = np.asarray(drawn, dtype=np.int64)
        if not prot.perturbs_empty_cells:
            # Without a secret an empty cell has nothing to key a draw to: it
            # stays 0, and describe() states the figures of that mechanism.
            v[agg.n == 0] = 0
    counts = np.maximum(agg.n + v, 0)
    adjusted = np.zeros(shape, dtype=bool)
    if prot.additivity == Additivity.IPF:
        fit = fit_to_margins(counts.astype(np.float64), sets, structural_zero=sz)
        rounded = controlled_rounding(fit.values, sets)
        adjusted = rounded != counts
        meta["ipf_iterations"] = fit.iterations
        meta["ipf_reseeded_cells"] = fit.reseeded
        meta["ipf_method"] = fit.method
        counts = rounded
    weighted, reps = _weighted(source, plan, agg, counts, u_w)
    if prot.additivity == Additivity.INDEPENDENT:
        return counts, weighted, reps, adjusted
    # Aggregate and IPF tables are additive: every margin is the sum of its
    # inner cells, for all arrays of the table at once.
    if prot.additivity == Additivity.IPF:
        _, weighted, reps = _add_up(None, weighted, reps, sets, withheld)
        return counts, weighted, reps, adjusted
    counts_sum, weighted, reps = _add_up(counts, weighted, reps, sets, withheld)
    assert counts_sum is not None
    return counts_sum, weighted, reps, adjusted


def _weighted(
    source: Source,
    plan: TabulationPlan,
    agg: CellAggregates,
    counts: Array,
    u_w: Array | None,
) -> tuple[Array | None, Array | None]:
    """The weighted figures (and replicates) of protected counts, before additivity."""
    prot = source.protection
    if agg.weight_sum is None:
        return None, None
    if prot.mechanism is None:
        # No protection (the data owner's own use): the exact sums.
        return agg.weight_sum.copy(), agg.replicate_sums
    # A cell without records that the mechanism publishes as non-zero takes
    # the dataset's mean weight (a public constant), not its margins' (which
    # change with the table around it: averaging would tell it is empty). It
    # costs a query, so it is read only then.
    empty = agg.n == 0
    universe_empty = int(agg.n[(-1,) * agg.n.ndim]) == 0
    need = universe_empty or (prot.perturbs_empty_cells and bool(empty.any()))
    w_mean = source.overall_mean_weights(source.unit_of(plan))[0] if need else 1.0
    mean = enclosing_means(agg.weight_sum, agg.n, w_mean)
    if prot.perturbs_empty_cells:
        mean = np.where(empty, w_mean, mean)
    assert u_w is not None
    weighted = protected_weighted(counts, mean, u_w, prot.weight_noise)
    reps = None
    if agg.replicate_sums is not None:
        reps = replicate_figures(weighted, counts, agg.n, mean, agg.replicate_sums)
    return weighted, reps


def _draws(
    source: Source,
    agg: CellAggregates,
    plan: TabulationPlan,
    count: bool,
    weight: bool,
    *,
    inner_only: bool,
) -> tuple[Array | None, Array | None]:
    """The uniforms of the count and of the weight noise, each if asked, in one pass.

    Each is a function of the cell's record set (and of the secret, where
    the seeds are keyed), never of the table around it; an empty cell's
    comes from its definition where the protection has a secret.
    """
    salts = ((b"count",) if count else ()) + ((b"weight",) if weight else ())
    streams = _streams(source, agg, plan, salts, inner_only=inner_only)
    return (streams[0] if count else None), (streams[-1] if weight else None)


def _streams(
    source: Source,
    agg: CellAggregates,
    plan: TabulationPlan,
    salts: tuple[bytes, ...],
    *,
    inner_only: bool,
) -> list[Array]:
    """One array of uniforms per salt, under the protection's seed scheme."""
    prot = source.protection
    if not salts:
        return []
    inner = agg.is_inner() if inner_only else None
    if prot.seeds == SeedScheme.DYNAMIC:
        assert prot.secret is not None
        # Li & Krenzke's salts: b"" for a count (b"count" for drop/add-up-to-q).
        named = tuple(b"" if s == b"count" and not prot.record_level else s for s in salts)
        return dynamic_streams(agg.cell_key, prot.secret, named, inner_only=inner_only)
    return prot.uniforms(
        agg.n, agg.cell_key, salts, lambda mask: source.definitions(plan, mask), where=inner
    )


def _records(
    work: TableWork, plan: TabulationPlan, agg: CellAggregates, withheld: Mask | None
) -> tuple[Array, Array | None, Array | None]:
    """Record-level drop/add-up-to-q (Li & Krenzke 2016); see :mod:`.mechanisms._records`.

    The weighted figure of a cell is the sum of the weights of the records
    it holds after dropping or duplicating, plus the weight noise: the
    count and the weighted figure describe the same set of records.
    """
    source = work.source
    prot = source.protection
    mech = prot.mechanism
    assert isinstance(mech, DropAddRecords) and prot.secret is not None
    want_w = work.weighted
    shape, inner = agg.shape, agg.inner
    n = agg.n[inner]
    q = mech.q(n)
    # The order stream only where records are chosen (weighted figures, below).
    salts = (b"count", b"order") if want_w else (b"count",)
    streams = [s[inner] for s in _streams(source, agg, plan, salts, inner_only=True)]
    d = np.floor(streams[0] * (2 * q + 1)).astype(np.int64) - q
    d = np.where(work.structural_zero[inner], 0, d)
    counts = np.zeros(shape, dtype=np.int64)
    counts[inner] = n + d
    weighted = reps = None
    if want_w:
        # Which records are dropped or duplicated changes only weighted figures:
        # a count is n + d whichever records they are, so a table of counts
        # alone (and every table of unweighted data) asks the engine for no
        # record choice, which would cost two more scans of the records.
        order_seed = np.floor(streams[1] * float(KEY_MODULUS)).astype(np.int64)
        chosen = source.engine.select(source.dataset, plan, order_seed, np.abs(d), counts=n)
        if np.any(chosen.n != np.abs(d)):
            raise InternalError("the engine chose a different number of records than asked")
        assert agg.weight_sum is not None and chosen.weight_sum is not None
        sign = np.sign(d)
        kept = agg.weight_sum[inner] + sign * chosen.weight_sum
        n_kept = n + d
        mean = np.divide(kept, n_kept, out=np.zeros(n.shape), where=n_kept > 0)
        _, u_all = _draws(source, agg, plan, False, True, inner_only=True)
        assert u_all is not None
        weighted = np.zeros(shape)
        weighted[inner] = protected_weighted(n_kept, mean, u_all[inner], prot.weight_noise)
        if agg.replicate_sums is not None and chosen.replicate_sums is not None:
            kept_r = agg.replicate_sums[(slice(None), *inner)] + sign * chosen.replicate_sums
            reps = np.zeros((kept_r.shape[0], *shape))
            reps[(slice(None), *inner)] = weighted[inner] + (kept_r - kept)
    total, weighted, reps = _add_up(counts, weighted, reps, plan.grouping_sets, withheld)
    assert total is not None
    return total, weighted, reps


def _add_up(
    counts: Array | None,
    weighted: Array | None,
    reps: Array | None,
    sets: tuple[tuple[int, ...], ...],
    withheld: Mask | None = None,
) -> tuple[Array | None, Array | None, Array | None]:
    """Margins as sums of inner cells, for every array of a table in one pass.

    Inner cells ``withheld`` are left out of the sums: margins add up the
    inner cells a table publishes.
    """
    arrays = [a for a in (counts, weighted) if a is not None]
    stack = [a.astype(np.float64)[None] for a in arrays]
    if reps is not None:
        stack.append(reps)
    if withheld is not None and withheld.any():
        stack = [np.where(withheld, 0.0, a) for a in stack]
    if not stack:
        return None, None, None
    summed = aggregate_margins(np.concatenate(stack), sets, lead=1)
    pos = 0
    out_counts = out_w = out_r = None
    if counts is not None:
        out_counts = np.rint(summed[0]).astype(np.int64)
        pos += 1
    if weighted is not None:
        out_w = summed[pos]
        pos += 1
    if reps is not None:
        out_r = summed[pos:]
    return out_counts, out_w, out_r
