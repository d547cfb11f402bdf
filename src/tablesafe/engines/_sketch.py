"""Key-bucket sketches: how many records of each cell fall in each bucket of the record key.

The sliver guard stores with every record set it publishes the counts of
its records in ``B`` buckets (``record key mod B``). For two record sets
``X`` and ``Y``, ``|X - Y| + |Y - X| >= sum_b | |X_b| - |Y_b| |``, so the L1
distance of two sketches is a lower bound on the number of records the sets
differ by: only pairs whose bound is below the guard's ``m`` need an exact
count. Record keys are uniform random integers, so unrelated sets of the
same size are far apart (two sets of 1,000 records: about 290 apart for
``B = 64``).

The sketch is one extra ``GROUP BY GROUPING SETS`` query, the table's own
with the bucket added to every grouping set, written with the engine's
tabulation query (:func:`~tablesafe.engines._sql.tabulation_sql`) over the
records with a bucket column. Counts are integers, so every engine gives
the same sketch.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tablesafe._request import DimensionPlan, TabulationPlan
from tablesafe.catalog._dataset import Dataset
from tablesafe.cells._aggregates import CellAggregates

if TYPE_CHECKING:
    from tablesafe.engines._base import Engine
    from tablesafe.engines._duckdb import DuckDBEngine
    from tablesafe.engines._memory import MemoryEngine

__all__ = ["BUCKET_COLUMN", "key_buckets"]

#: The bucket column's name inside the sketch query (the query selects only the
#: plan's columns beside it, so a microdata column of that name is no clash).
BUCKET_COLUMN = "ts_bucket"


def _bucket_plan(plan: TabulationPlan, buckets: int) -> TabulationPlan:
    """``plan`` with the bucket as a last dimension, in every grouping set; counts only."""
    codes = tuple(range(buckets))
    bucket = DimensionPlan(
        name=BUCKET_COLUMN,
        label=BUCKET_COLUMN,
        column=BUCKET_COLUMN,
        codes=codes,
        labels=tuple(str(b) for b in codes),
        members=tuple((b,) for b in codes),
    )
    k = len(plan.dimensions)
    return replace(
        plan,
        dimensions=(*plan.dimensions, bucket),
        grouping_sets=tuple((*gs, k) for gs in plan.grouping_sets),
        weight=None,
        replicates=(),
        magnitudes=(),
    )


def key_buckets(
    engine: Engine, dataset: Dataset, plan: TabulationPlan, buckets: int
) -> npt.NDArray[np.int64] | None:
    """Per bucket of the record key, the count of every cell of ``plan``'s grouping sets.

    Args:
        engine: The engine (a :class:`~tablesafe.engines.CubeCache` asks the engine it wraps).
        dataset: The dataset.
        plan: The tabulation plan (its dimensions, universe and grouping sets).
        buckets: The number of buckets ``B``.

    Returns:
        Counts of shape ``(B, *plan.shape)`` (the extended cell arrays, a
        dimension's last slot its total), or ``None`` for an engine that
        cannot compute them (Spark): the guard then counts every candidate.
    """
    from tablesafe.engines._cube import CubeCache
    from tablesafe.engines._duckdb import DuckDBEngine
    from tablesafe.engines._memory import MemoryEngine

    while isinstance(engine, CubeCache):
        engine = engine.engine
    ext = _bucket_plan(plan, buckets)
    if isinstance(engine, DuckDBEngine):
        agg = _duckdb(engine, dataset, ext, buckets)
    elif isinstance(engine, MemoryEngine):
        agg = _memory(engine, dataset, ext, buckets)
    else:
        return None
    # Drop the bucket's total slot and put the bucket first.
    n: npt.NDArray[np.int64] = np.moveaxis(agg.n[..., :buckets], -1, 0)
    return np.ascontiguousarray(n)


def _duckdb(
    engine: DuckDBEngine, dataset: Dataset, ext: TabulationPlan, buckets: int
) -> CellAggregates:
    from tablesafe.engines._base import assemble_grouped
    from tablesafe.engines._duckdb import _DIALECT, _ident, _values
    from tablesafe.engines._sql import tabulation_sql

    engine.ensure_valid(dataset)
    key = _ident(ext.record_key)
    used = dict.fromkeys(
        [*(d.column for d in ext.dimensions[:-1]), *(c for c, _ in ext.universe), ext.record_key]
    )
    columns = ", ".join(_ident(c) for c in used)
    source = (
        f"(SELECT {columns}, CAST({key} % {int(buckets)} AS BIGINT) AS {BUCKET_COLUMN} "
        f"FROM {engine._scan(dataset)})"
    )
    sql, params = tabulation_sql(ext, source, _DIALECT)
    res = engine._run(sql, params, timeout=engine._timeout, fetch="numpy")
    return assemble_grouped(
        ext,
        grouping=_values(res["ts_grouping"], int),
        codes=[_values(res[d.column]) for d in ext.dimensions],
        n=_values(res["ts_n"], int),
        key_sum=_values(res["ts_key"], int),
        weight_sum=None,
        replicate_sums=None,
    )


def _memory(
    engine: MemoryEngine, dataset: Dataset, ext: TabulationPlan, buckets: int
) -> CellAggregates:
    engine.ensure_valid(dataset)
    inner = replace(ext, dimensions=ext.dimensions[:-1])
    sub, flat, shape = engine._cells(dataset, inner)
    bucket = sub[ext.record_key].to_numpy().astype(np.int64) % buckets
    size = int(np.prod(shape)) * buckets
    n = np.bincount(flat * buckets + bucket, minlength=size).astype(np.int64)
    n = n.reshape((*shape, buckets))
    return CellAggregates.from_inner(
        ext.dimensions, ext.grouping_sets, n=n, key_sum=np.zeros(n.shape, dtype=np.uint64)
    )
