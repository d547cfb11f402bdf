"""The table builder: request -> engine -> mechanism -> additivity -> ProtectedTable.

:class:`Protection` is the data owner's choice of protection (never the
user's): the cell-wise mechanism, the seed scheme and its secret, how
weighted counts follow perturbed counts, and the additivity option.
:class:`TableBuilder` applies it to every request:

1. The request is bound to the catalog (before any microdata is read).
2. The engine computes the exact aggregates of every cell and every margin
   (all margins, whatever was requested: dynamic seeds need the key sums of
   the margins a cell belongs to).
3. Each cell to perturb gets a uniform from its keys (:mod:`tablesafe._seeds`)
   and a perturbation ``v`` from the mechanism; structural zeros are never
   perturbed; counts never go below zero.
4. Weighted counts follow (seed 000, eqs. 4 and 5): ``W' = W + v * w_mean``
   with the overall mean weight of the dataset (public, keeps DP), or
   ``W' = W + v * W / n`` with the cell mean weight (the overall mean where
   ``n = 0``). A cell whose count becomes 0 gets weighted count 0.
   Replicate weighted counts are adjusted in the same way.
5. Additivity (:mod:`tablesafe._additivity`): aggregate, independent, or
   IPF with controlled rounding.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from tablesafe._additivity import (
    ADDITIVITY_OPTIONS,
    Additivity,
    aggregate_margins,
    controlled_rounding,
    fit_to_margins,
)
from tablesafe._aggregates import CellAggregates
from tablesafe._catalog import Catalog
from tablesafe._dataset import Dataset
from tablesafe._errors import InternalError, ParameterError
from tablesafe._request import MAX_DIMENSIONS, TableRequest, TabulationPlan
from tablesafe._seeds import SeedScheme, cell_key_uniforms, dynamic_uniforms
from tablesafe._table import ProtectedTable
from tablesafe._tabulation import Tabulation
from tablesafe.mechanisms._records import DropAddRecords

__all__ = [
    "CellwiseMechanism",
    "Protection",
    "TableBuilder",
    "Weighting",
    "structural_zero_mask",
]

#: How weighted counts follow perturbed counts: seed 000 eq. 4 or eq. 5.
Weighting = Literal["overall_mean", "cell_mean"]


@runtime_checkable
class CellwiseMechanism(Protocol):
    """A cell-wise mechanism: a perturbation for each cell from its count and uniform.

    :class:`tablesafe.PTable` is the implementation; anything with these two
    methods can be used.
    """

    def perturbation(
        self,
        counts: npt.NDArray[np.int64],
        u: npt.NDArray[np.float64],
        cell_key: npt.NDArray[np.uint32] | None = None,
    ) -> npt.NDArray[np.int64]:
        """Return the perturbation ``v`` of each cell (``counts + v >= 0``).

        ``u`` are the cells' uniforms; ``cell_key`` the cell keys when the
        cell-key scheme is used (sampled ptables index by the key itself).
        """
        ...

    def describe(self) -> Mapping[str, Any]:
        """The public description of the mechanism (name, parameters, privacy figures)."""
        ...


@dataclass(frozen=True)
class Protection:
    """The data owner's protection profile.

    Args:
        mechanism: The cell-wise mechanism (e.g. ``dp_geometric(2.0)``), the
            record-level :func:`~tablesafe.mechanisms.drop_add_records`, or
            ``None`` for no perturbation (the data owner's own use only).
        seeds: ``"cellkey"`` (ABS uniforms from cell keys) or ``"dynamic"``
            (Li & Krenzke keyed hashes; needs ``secret``).
        secret: The server secret for dynamic seeds (at least 16 bytes).
        weighting: ``"overall_mean"`` (eq. 4) or ``"cell_mean"`` (eq. 5).
        additivity: ``"aggregate"``, ``"independent"`` or ``"ipf"``.

    Raises:
        ParameterError: for an unknown option or a missing secret.
    """

    mechanism: CellwiseMechanism | DropAddRecords | None
    seeds: SeedScheme = "cellkey"
    secret: bytes | None = None
    weighting: Weighting = "overall_mean"
    additivity: Additivity = "aggregate"

    def __post_init__(self) -> None:
        if self.seeds not in ("cellkey", "dynamic"):
            raise ParameterError(f"unknown seeds {self.seeds!r}; allowed: cellkey, dynamic")
        if self.seeds == "dynamic" and not self.secret:
            raise ParameterError("dynamic seeds need the data owner's secret")
        if self.weighting not in ("overall_mean", "cell_mean"):
            raise ParameterError(
                f"unknown weighting {self.weighting!r}; allowed: overall_mean, cell_mean"
            )
        if self.additivity not in ADDITIVITY_OPTIONS:
            raise ParameterError(
                f"unknown additivity {self.additivity!r}; allowed: {', '.join(ADDITIVITY_OPTIONS)}"
            )
        if self.record_level:
            if self.seeds != "dynamic":
                raise ParameterError(
                    "record-level drop/add-up-to-q draws its two seeds from keyed hashes: use "
                    "seeds='dynamic' with a secret"
                )
        elif self.mechanism is not None and not isinstance(self.mechanism, CellwiseMechanism):
            raise ParameterError(
                "mechanism must be a cell-wise mechanism such as a PTable "
                "(with perturbation() and describe()) or drop_add_records()"
            )

    @property
    def record_level(self) -> bool:
        """Whether the mechanism works on records (drop/add-up-to-q) rather than cells."""
        return bool(getattr(self.mechanism, "record_level", False))

    def __repr__(self) -> str:
        # The secret never appears in a repr, a log line or an error message.
        return (
            f"Protection(mechanism={self.mechanism!r}, seeds={self.seeds!r}, "
            f"secret={'<hidden>' if self.secret else None}, weighting={self.weighting!r}, "
            f"additivity={self.additivity!r})"
        )

    def describe(self) -> dict[str, Any]:
        """The public description of the protection."""
        out = dict(self.mechanism.describe()) if self.mechanism is not None else {"name": "none"}
        out["seeds"] = self.seeds
        return out


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
    full = np.zeros(shape, dtype=np.int64)
    full[tuple(slice(0, s) for s in inner_shape)] = (~inner).astype(np.int64)
    sets = tuple(
        s for r in range(len(shape), -1, -1) for s in itertools.combinations(range(len(shape)), r)
    )
    return np.asarray(aggregate_margins(full, sets) == 0)


class TableBuilder:
    """Build protected tables from one dataset.

    Args:
        dataset: The dataset.
        protection: The data owner's protection profile.
        engine: An engine (a new DuckDB engine by default).
        max_dimensions: The largest number of dimensions allowed.
    """

    def __init__(
        self,
        dataset: Dataset,
        protection: Protection,
        *,
        engine: Any = None,
        max_dimensions: int = MAX_DIMENSIONS,
    ) -> None:
        if engine is None:
            from tablesafe.engines import DuckDBEngine

            engine = DuckDBEngine()
        self.dataset = dataset
        self.protection = protection
        self.engine = engine
        self.max_dimensions = max_dimensions
        self._overall: tuple[float, np.ndarray | None] | None = None

    # -- the data owner's views --------------------------------------------------

    def tabulate(self, request: TableRequest) -> Tabulation:
        """The unprotected tabulation (true values, for the data owner only)."""
        plan = request.bind(self.dataset.catalog, max_dimensions=self.max_dimensions)
        return Tabulation(request, self.engine.tabulate(self.dataset, plan), self.dataset.name)

    def overall_mean_weights(self) -> tuple[float, np.ndarray | None]:
        """The dataset's overall mean weight (and per replicate); public constants."""
        if self._overall is None:
            cat = self.dataset.catalog
            first = cat.source_variables[0].name
            plan = TableRequest(
                (first,),
                statistic="weighted" if cat.weight else "count",
                margins="total",
                replicates=cat.replicates is not None and cat.weight is not None,
            ).bind(cat)
            agg = self.engine.tabulate(self.dataset, plan)
            n = max(int(agg.n[-1]), 1)
            w = float(agg.weight_sum[-1]) / n if agg.weight_sum is not None else 1.0
            reps = agg.replicate_sums[:, -1] / n if agg.replicate_sums is not None else None
            self._overall = (w, reps)
        return self._overall

    # -- the path of one table ---------------------------------------------------------

    def build(self, request: TableRequest) -> ProtectedTable:
        """Build the protected table answering ``request``."""
        cat = self.dataset.catalog
        request = request.coerced(cat)
        plan = request.bind(cat, max_dimensions=self.max_dimensions)
        full_plan = replace(plan, grouping_sets=replace(request, margins="all").grouping_sets())
        agg = self.engine.tabulate(self.dataset, full_plan)
        return self.protect(request, plan, agg)

    def protect(
        self, request: TableRequest, plan: TabulationPlan, agg: CellAggregates
    ) -> ProtectedTable:
        """Protect aggregates computed for every grouping set of ``plan``'s dimensions."""
        prot = self.protection
        if prot.record_level:
            return self._protect_records(request, plan, agg)
        sets = plan.grouping_sets
        shape = agg.shape
        computed = np.zeros(shape, dtype=bool)
        for gs in sets:
            computed[_index(shape, gs)] = True
        is_inner = agg.is_inner()
        sz = structural_zero_mask(self.dataset.catalog, plan)

        # Which cells draw their own perturbation.
        target = is_inner & ~sz if prot.additivity == "aggregate" else computed & ~sz
        v = np.zeros(shape, dtype=np.int64)
        mech = prot.mechanism
        if mech is not None and not isinstance(mech, DropAddRecords) and target.any():
            if prot.seeds == "cellkey":
                u = cell_key_uniforms(agg.cell_key)
            else:
                assert prot.secret is not None
                u = dynamic_uniforms(agg.cell_key, prot.secret)
            drawn = mech.perturbation(
                agg.n[target], u[target], agg.cell_key[target] if prot.seeds == "cellkey" else None
            )
            v[target] = np.asarray(drawn, dtype=np.int64)
        counts = np.maximum(agg.n + v, 0)
        v = counts - agg.n
        perturbed = v != 0

        weighted = None
        reps = None
        meta: dict[str, Any] = {
            "dataset": self.dataset.name,
            "additivity": prot.additivity,
        }
        want_w = request.statistic != "count" and agg.weight_sum is not None
        if want_w:
            assert agg.weight_sum is not None
            w_mean, rep_mean = self.overall_mean_weights()
            weighted = _follow(agg.weight_sum, agg.n, v, counts, prot.weighting, w_mean)
            if agg.replicate_sums is not None:
                reps = np.stack(
                    [
                        _follow(
                            agg.replicate_sums[r],
                            agg.n,
                            v,
                            counts,
                            prot.weighting,
                            float(rep_mean[r]) if rep_mean is not None else w_mean,
                        )
                        for r in range(agg.replicate_sums.shape[0])
                    ]
                )
            meta["weighting"] = prot.weighting
            if prot.weighting == "overall_mean":
                meta["overall_mean_weight"] = round(w_mean, 6)

        adjusted = np.zeros(shape, dtype=bool)
        if prot.additivity == "aggregate":
            counts = aggregate_margins(counts, sets)
            if weighted is not None:
                weighted = aggregate_margins(weighted, sets)
            if reps is not None:
                reps = np.stack([aggregate_margins(r, sets) for r in reps])
            margins = computed & ~is_inner
            perturbed = np.where(margins, counts != agg.n, perturbed)
        elif prot.additivity == "ipf":
            fit = fit_to_margins(counts.astype(np.float64), sets, structural_zero=sz)
            rounded = controlled_rounding(fit.values, sets)
            adjusted = computed & (rounded != counts)
            meta["ipf_iterations"] = fit.iterations
            meta["ipf_reseeded_cells"] = fit.reseeded
            meta["ipf_method"] = fit.method
            if weighted is not None:
                wfit = fit_to_margins(np.maximum(weighted, 0.0), sets, structural_zero=sz).values
                ratio = np.divide(rounded, fit.values, out=np.zeros(shape), where=fit.values > 0)
                weighted = aggregate_margins(np.where(is_inner, wfit * ratio, 0.0), sets)
                if reps is not None:
                    scale = np.divide(
                        weighted,
                        wfit,
                        out=np.zeros(shape),
                        where=wfit > 0,
                    )
                    reps = np.stack([aggregate_margins(r * scale, sets) for r in reps])
            counts = rounded
        if np.any(counts[computed] < 0):
            raise InternalError("a protected count is negative")

        se = None
        design = self.dataset.catalog.replicates
        if reps is not None and weighted is not None and design is not None:
            from tablesafe._variance import replicate_se

            se = np.where(computed, replicate_se(weighted, reps, design), 0.0)
            meta["replicate_method"] = design.method
            meta["replicate_coefficient"] = design.coefficient
        out_counts = None if request.statistic == "weighted" else np.where(computed, counts, 0)
        return ProtectedTable(
            request=request,
            dimensions=plan.dimensions,
            computed=computed,
            counts=out_counts,
            weighted=None if weighted is None else np.where(computed, weighted, 0.0),
            perturbed=perturbed & computed,
            adjusted=adjusted,
            structural_zero=sz & computed,
            mechanism=prot.describe(),
            metadata=meta,
            replicate_weighted=reps,
            se=se,
        )

    def _protect_records(
        self, request: TableRequest, plan: TabulationPlan, agg: CellAggregates
    ) -> ProtectedTable:
        """Record-level drop/add-up-to-q (Li & Krenzke 2016); see :mod:`.mechanisms._records`."""
        prot = self.protection
        mech = prot.mechanism
        assert isinstance(mech, DropAddRecords) and prot.secret is not None
        sets = plan.grouping_sets
        shape = agg.shape
        inner = agg.inner
        computed = np.zeros(shape, dtype=bool)
        for gs in sets:
            computed[_index(shape, gs)] = True
        sz = structural_zero_mask(self.dataset.catalog, plan)

        n = agg.n[inner]
        q = mech.q(n)
        u_count = dynamic_uniforms(agg.cell_key, prot.secret, salt=b"count")[inner]
        u_order = dynamic_uniforms(agg.cell_key, prot.secret, salt=b"order")[inner]
        d = np.floor(u_count * (2 * q + 1)).astype(np.int64) - q
        d = np.where(sz[inner], 0, d)
        order_seed = np.floor(u_order * 2.0**32).astype(np.int64)
        want_w = request.statistic != "count" and agg.weight_sum is not None
        sel_plan = replace(
            plan,
            weight=plan.weight if want_w else None,
            replicates=plan.replicates if want_w else (),
        )
        chosen = self.engine.select(self.dataset, sel_plan, order_seed, np.abs(d))
        if np.any(chosen.n != np.abs(d)):
            raise InternalError("the engine chose a different number of records than asked")

        full_counts = np.zeros(shape, dtype=np.int64)
        full_counts[inner] = n + d
        counts = aggregate_margins(full_counts, sets)
        perturbed = np.zeros(shape, dtype=bool)
        perturbed[inner] = d != 0
        perturbed = np.where(computed & ~agg.is_inner(), counts != agg.n, perturbed)
        meta: dict[str, Any] = {
            "dataset": self.dataset.name,
            "additivity": "aggregate (record level)",
        }
        weighted = reps = se = None
        if want_w:
            assert agg.weight_sum is not None and chosen.weight_sum is not None
            total = tuple(s - 1 for s in shape)
            weighted = _drop_add_weights(
                agg.weight_sum, chosen.weight_sum, n, d, inner, sets, agg.weight_sum[total]
            )
            meta["calibrated_to"] = "universe weighted total"
            if agg.replicate_sums is not None and chosen.replicate_sums is not None:
                reps = np.stack(
                    [
                        _drop_add_weights(
                            agg.replicate_sums[r],
                            chosen.replicate_sums[r],
                            n,
                            d,
                            inner,
                            sets,
                            agg.replicate_sums[r][total],
                        )
                        for r in range(agg.replicate_sums.shape[0])
                    ]
                )
                design = self.dataset.catalog.replicates
                if design is not None:
                    from tablesafe._variance import replicate_se

                    se = np.where(computed, replicate_se(weighted, reps, design), 0.0)
                    meta["replicate_method"] = design.method
                    meta["replicate_coefficient"] = design.coefficient
        return ProtectedTable(
            request=request,
            dimensions=plan.dimensions,
            computed=computed,
            counts=None if request.statistic == "weighted" else np.where(computed, counts, 0),
            weighted=None if weighted is None else np.where(computed, weighted, 0.0),
            perturbed=perturbed & computed,
            adjusted=np.zeros(shape, dtype=bool),
            structural_zero=sz & computed,
            mechanism=prot.describe(),
            metadata=meta,
            replicate_weighted=reps,
            se=se,
        )


def _drop_add_weights(
    w: np.ndarray,
    chosen: np.ndarray,
    n: np.ndarray,
    d: np.ndarray,
    inner: tuple[slice, ...],
    sets: tuple[tuple[int, ...], ...],
    universe_total: float,
) -> np.ndarray:
    """Weighted counts after drop/add, the n/(n+d) adjustment and calibration."""
    cell = w[inner]
    kept = np.where(d < 0, cell - chosen, np.where(d > 0, cell + chosen, cell))
    factor = np.divide(n, n + d, out=np.zeros(n.shape), where=(n + d) > 0)
    adjusted = kept * factor
    s = adjusted.sum()
    if s > 0:
        adjusted = adjusted * (universe_total / s)
    full = np.zeros(w.shape)
    full[inner] = adjusted
    return np.asarray(aggregate_margins(full, sets), dtype=np.float64)


def _index(shape: tuple[int, ...], gs: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(0, s - 1) if i in gs else slice(s - 1, s) for i, s in enumerate(shape))


def _follow(
    w: np.ndarray,
    n: np.ndarray,
    v: np.ndarray,
    counts: np.ndarray,
    weighting: str,
    overall: float,
) -> np.ndarray:
    """Weighted counts following perturbed counts (seed 000, eqs. 4 and 5)."""
    if weighting == "overall_mean":
        mean = np.full(w.shape, overall)
    else:
        mean = np.divide(w, n, out=np.full(w.shape, overall), where=n > 0)
    out = w + v * mean
    out = np.where(counts == 0, 0.0, out)
    return np.asarray(np.maximum(out, 0.0), dtype=np.float64)
