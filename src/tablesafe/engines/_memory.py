"""The in-memory engine: pandas and numpy, for tests and small data.

It reads the whole microdata file into memory and aggregates the inner cells
with numpy, then adds up the margins (:meth:`CellAggregates.from_inner`), a
computation independent of the SQL engines' ``GROUPING SETS``, which makes it
a useful cross-check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import pandas as pd
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from tablesafe._errors import DataError, FormatError
from tablesafe._keys import KEY_MODULUS
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._dataset import DataFormat, Dataset
from tablesafe.catalog._hints import missing_key_hint
from tablesafe.catalog._magnitudes import (
    check_magnitude_values,
    from_magnitude_fixed,
    magnitude_fixed,
    present_values,
    require_numeric,
)
from tablesafe.catalog._units import CountingUnit, raise_unit_problem
from tablesafe.cells._aggregates import CellAggregates
from tablesafe.cells._fixed import from_fixed, range_error, to_fixed
from tablesafe.cells._magnitude_sums import (
    MagnitudeSums,
    sums_from_records,
    top_from_records,
)
from tablesafe.cells._plan import MagnitudePlan, TabulationPlan
from tablesafe.cells._quantiles import RecordValues
from tablesafe.cells._selection import SelectedSums, mix32
from tablesafe.engines._base import (
    DatasetSummary,
    Engine,
    check_jackknife_coefficient,
    jackknife_needs_check,
)

__all__ = ["MemoryEngine"]


class MemoryEngine(Engine):
    """Tabulate microdata held in memory as a pandas DataFrame.

    Args:
        frames: Optional data already in memory, by microdata path; other
            datasets are read from their files (and cached).
    """

    name = "memory"

    def __init__(self, frames: Mapping[str, pd.DataFrame] | None = None) -> None:
        self._frames: dict[str, pd.DataFrame] = dict(frames or {})

    def load(self, dataset: Dataset) -> None:
        """Read ``dataset`` into its frame now (the first table would)."""
        self._frame(dataset)

    def _frame(self, dataset: Dataset) -> pd.DataFrame:
        key = str(dataset.path)
        if key not in self._frames:
            try:
                if dataset.format == DataFormat.PARQUET:
                    table = pq.read_table(dataset.path)
                else:
                    table = pacsv.read_csv(dataset.path)
            except OSError as exc:
                raise FormatError(f"cannot read {dataset.path}: {exc}") from None
            self._frames[key] = table.to_pandas()
        return self._frames[key]

    def validate(self, dataset: Dataset) -> DatasetSummary:
        """Check the microdata against its catalog.

        Raises:
            DataError: naming the first problem found.
        """
        df = self._frame(dataset)
        cat = dataset.catalog
        missing = [c for c in cat.columns if c not in df.columns]
        if missing:
            raise DataError(
                f"microdata file {dataset.path.name} lacks column(s) {', '.join(missing)} "
                f"named by the catalog{missing_key_hint(cat.record_key, missing)}"
            )
        keys = df[cat.record_key]
        if keys.isna().any() or not pd.api.types.is_integer_dtype(keys):
            raise DataError(f"record-key column {cat.record_key} must hold integers, no gaps")
        if len(keys) and (keys.min() < 0 or keys.max() >= KEY_MODULUS):
            raise DataError(f"record keys in {cat.record_key} must lie in 0 .. 2**32 - 1")
        if cat.weight:
            w = pd.to_numeric(df[cat.weight], errors="coerce").to_numpy(dtype=float)
            if not np.isfinite(w).all():
                raise DataError(f"weight column {cat.weight} has missing, NaN or infinite values")
            if (w < 0).any():
                raise DataError(f"weight column {cat.weight} has negative values")
        weights = [cat.weight] if cat.weight else []
        weights += list(cat.replicates.columns) if cat.replicates else []
        for wcol in weights:
            a = np.abs(pd.to_numeric(df[wcol], errors="coerce").to_numpy(dtype=float))
            if not np.isfinite(a).all():
                raise DataError(f"weight column {wcol} has missing, NaN or infinite values")
            too_large = range_error(wcol, float(a.max(initial=0.0)), float(a.sum()))
            if too_large:
                raise DataError(too_large)
        if jackknife_needs_check(cat):
            assert cat.replicates is not None and cat.weight is not None
            w = df[cat.weight].to_numpy(dtype=float)
            live = w > 0
            check_jackknife_coefficient(
                cat,
                [
                    float((df[c].to_numpy(dtype=float)[live] / w[live]).max(initial=0.0))
                    for c in cat.replicates.columns
                ],
            )
        for var in cat.source_variables:
            col = df[var.column]
            if col.isna().any():
                raise DataError(f"column {var.column} ({var.name}) has missing values")
            unknown = set(col.unique().tolist()) - set(var.codes)
            if unknown:
                shown = ", ".join(repr(u) for u in sorted(unknown, key=str)[:10])
                raise DataError(
                    f"column {var.column} holds code(s) {shown} that the catalog does not list "
                    f"for {var.name}"
                )
        for unit in cat.units.values():
            raise_unit_problem(unit, _unit_problems(df, unit, cat))
        if cat.magnitudes:
            mags = list(cat.magnitudes.values())
            require_numeric(
                mags,
                {str(c): str(t) for c, t in df.dtypes.items()},
                numeric=("int", "uint", "float"),
            )
            weight = df[cat.weight].to_numpy(dtype=np.float64) if cat.weight else None
            check_magnitude_values(mags, {m.column: df[m.column] for m in mags}, weight)
        return DatasetSummary(records=len(df), columns=len(df.columns))

    def select(
        self,
        dataset: Dataset,
        plan: TabulationPlan,
        seed: np.ndarray,
        k: np.ndarray,
        counts: np.ndarray | None = None,
    ) -> SelectedSums:
        """Sum the weights of the first ``k`` records of each inner cell in mix order.

        Ties of mix and key are broken by the fixed-point weight, then the
        replicate weights, as in every engine. ``counts`` (used by other
        engines to bound their work) is not needed here.
        """
        self.ensure_valid(dataset)
        sub, flat, shape = self._cells(dataset, plan)
        size = int(np.prod(shape))
        keys = sub[plan.record_key].to_numpy().astype(np.int64)
        seeds = np.asarray(seed, dtype=np.int64).reshape(-1)[flat]
        payload = [
            to_fixed(sub[c].to_numpy(dtype=np.float64))
            for c in ([plan.weight] if plan.weight else []) + list(plan.replicates)
        ]
        # np.lexsort sorts by the last key first: cell, mix, key, weight, replicates.
        order = np.lexsort((*payload[::-1], keys, mix32(keys, seeds), flat))
        # Rank of each record within its cell, in mix order.
        sorted_cells = flat[order]
        starts = np.searchsorted(sorted_cells, sorted_cells, side="left")
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order)) - starts
        chosen = rank < np.asarray(k, dtype=np.int64).reshape(-1)[flat]
        n = np.bincount(flat[chosen], minlength=size).astype(np.int64).reshape(shape)
        w = reps = None
        if plan.weight:
            wv = to_fixed(sub[plan.weight].to_numpy(dtype=np.float64)[chosen])
            w = from_fixed(_sum(flat[chosen], wv, size, np.int64)).reshape(shape)
        if plan.replicates:
            reps = np.stack(
                [
                    from_fixed(
                        _sum(
                            flat[chosen],
                            to_fixed(sub[r].to_numpy(dtype=np.float64)[chosen]),
                            size,
                            np.int64,
                        )
                    ).reshape(shape)
                    for r in plan.replicates
                ]
            )
        return SelectedSums(n=n, weight_sum=w, replicate_sums=reps)

    def _cells(
        self, dataset: Dataset, plan: TabulationPlan
    ) -> tuple[pd.DataFrame, np.ndarray, tuple[int, ...]]:
        df = self._frame(dataset)
        if plan.unit is not None:
            # One record per unit: its columns are the same on each (validated).
            df = df.drop_duplicates(subset=[plan.unit[0]])
        mask = np.ones(len(df), dtype=bool)
        for column, codes in plan.universe:
            mask &= df[column].isin(list(codes)).to_numpy()
        for column, missing in plan.present:
            mask &= present_values(df[column].to_numpy(dtype=np.float64), missing)
        sub = df.loc[mask]
        shape = tuple(d.size for d in plan.dimensions)
        index = []
        for d in plan.dimensions:
            lookup = {c: j for j, members in enumerate(d.members) for c in members}
            idx = sub[d.column].map(lookup)
            if idx.isna().any():
                raise DataError(f"column {d.column} holds codes the catalog does not list")
            index.append(idx.to_numpy(dtype=np.int64))
        flat = (
            np.ravel_multi_index(tuple(index), shape) if len(sub) else np.zeros(0, dtype=np.int64)
        )
        return sub, flat, shape

    def record_values(
        self, dataset: Dataset, plan: TabulationPlan, magnitude: MagnitudePlan
    ) -> RecordValues:
        """The universe's records with their value of ``magnitude``, from the frame."""
        self.ensure_valid(dataset)
        sub, flat, _ = self._cells(dataset, plan)
        weight = magnitude.weight
        return RecordValues(
            cell=flat.astype(np.int64),
            x=sub[magnitude.column].to_numpy(dtype=np.float64),
            weight=None if weight is None else sub[weight].to_numpy(dtype=np.float64),
            key=sub[plan.record_key].to_numpy().astype(np.int64),
            replicate_fixed=np.stack(
                [to_fixed(sub[c].to_numpy(dtype=np.float64)) for c in magnitude.replicates]
            )
            if magnitude.replicates
            else None,
        )

    def tabulate(self, dataset: Dataset, plan: TabulationPlan) -> CellAggregates:
        """Aggregate the inner cells with numpy and add up the margins."""
        self.ensure_valid(dataset)
        sub, flat, shape = self._cells(dataset, plan)
        size = int(np.prod(shape))

        n = np.bincount(flat, minlength=size).astype(np.int64).reshape(shape)
        keys = _sum(flat, sub[plan.record_key].to_numpy().astype(np.uint64), size, np.uint64)
        # Weights in fixed point (tablesafe.cells._fixed): exact sums in any row order.
        w = reps = None
        if plan.weight:
            wv = to_fixed(sub[plan.weight].to_numpy(dtype=np.float64))
            w = _sum(flat, wv, size, np.int64).reshape(shape)
        if plan.replicates:
            reps = np.stack(
                [
                    _sum(flat, to_fixed(sub[r].to_numpy(dtype=np.float64)), size, np.int64).reshape(
                        shape
                    )
                    for r in plan.replicates
                ]
            )
        agg = CellAggregates.from_inner(
            plan.dimensions,
            plan.grouping_sets,
            n=n,
            key_sum=keys.reshape(shape),
            weight_sum=w,
            replicate_sums=reps,
        )
        if not plan.magnitudes:
            return agg

        mags = {}
        for mag in plan.magnitudes:
            x = sub[mag.column].to_numpy(dtype=np.float64)
            if mag.weight is not None:
                x = x * sub[mag.weight].to_numpy(dtype=np.float64)
            total = sums_from_records(flat, magnitude_fixed(x), agg.shape, plan.grouping_sets)
            mags[mag.name] = MagnitudeSums(
                total=from_magnitude_fixed(total),
                top=top_from_records(flat, x, agg.shape, plan.grouping_sets, mag.top),
            )
        return replace(agg, magnitudes=mags)


def _unit_problems(df: pd.DataFrame, unit: CountingUnit, cat: Catalog) -> list[int]:
    """What :func:`~tablesafe.catalog._units.unit_check_sql` counts, with pandas."""
    own = [unit.record_key, *([unit.weight] if unit.weight else [])]
    columns = own + [cat.variables[v].column for v in unit.variables]
    varying = df.groupby(unit.id, dropna=True)[columns].nunique(dropna=False)
    key = pd.to_numeric(df[unit.record_key], errors="coerce")
    bad_keys = key.isna() | (key < 0) | (key >= KEY_MODULUS)
    bad_weights = 0
    if unit.weight:
        w = pd.to_numeric(df[unit.weight], errors="coerce").to_numpy(dtype=np.float64)
        bad_weights = int((~np.isfinite(w) | (w < 0)).sum())
    return [
        int(df[unit.id].isna().sum()),
        int((varying > 1).any(axis=1).sum()),
        int(bad_keys.sum()),
        bad_weights,
    ]


def _sum(flat: np.ndarray, values: np.ndarray, size: int, dtype: type) -> np.ndarray:
    out: np.ndarray = np.zeros(size, dtype=dtype)
    np.add.at(out, flat, values.astype(dtype))
    return out
