"""Key-bucket sketches: how many records of each cell fall in each bucket of the record key.

The sliver guard stores with every record set it publishes the counts of
its records in ``B`` buckets (``record key mod B``). For two record sets
``X`` and ``Y``, ``|X - Y| + |Y - X| >= sum_b | |X_b| - |Y_b| |``, so the L1
distance of two sketches is a lower bound on the number of records the sets
differ by: only pairs whose bound is below the guard's ``m`` need an exact
count. Record keys are uniform random integers, so unrelated sets of the
same size are far apart (two sets of 1,000 records: about 290 apart for
``B = 64``).

The sketch is one extra query, the table's own with the bucket added to
every grouping set: each engine answers it with
:meth:`~tablesafe.engines.Engine.bucket_counts` (DuckDB: a ``GROUP BY
GROUPING SETS`` over the records with a bucket column; memory: a
``bincount``; the cube cache asks the engine it wraps). Counts are
integers, so every engine gives the same sketch.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tablesafe._request import DimensionPlan, TabulationPlan
from tablesafe.catalog._dataset import Dataset

if TYPE_CHECKING:
    from tablesafe.engines._base import Engine

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
    agg = engine.bucket_counts(dataset, _bucket_plan(plan, buckets))
    if agg is None:
        return None
    # Drop the bucket's total slot and put the bucket first.
    n: npt.NDArray[np.int64] = np.moveaxis(agg.n[..., :buckets], -1, 0)
    return np.ascontiguousarray(n)
