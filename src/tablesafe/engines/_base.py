"""The engine protocol: the one narrow interface between tablesafe and microdata.

Only an engine reads microdata. It answers two questions: does this
microdata match its catalog (:meth:`Engine.validate`), and what are the
exact per-cell aggregates of this plan (:meth:`Engine.tabulate`)? Everything
after it works on the small :class:`~tablesafe.CellAggregates`. Engines must
agree exactly, bit for bit: counts and cell keys are integers, and weights
are summed as fixed-point integers (:mod:`tablesafe._fixed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import pandas as pd

from tablesafe._aggregates import KEY_MODULUS, CellAggregates
from tablesafe._dataset import Dataset
from tablesafe._errors import DataError
from tablesafe._fixed import from_fixed
from tablesafe._request import TabulationPlan

__all__ = ["DatasetSummary", "Engine", "ValidationCache", "assemble_grouped"]


@dataclass(frozen=True)
class DatasetSummary:
    """What validation learned about a dataset (counts only, nothing disclosive).

    Attributes:
        records: Number of records.
        columns: Number of columns in the microdata file.
    """

    records: int
    columns: int


@runtime_checkable
class Engine(Protocol):
    """Where microdata is read and aggregated.

    Implementations: :class:`~tablesafe.engines.DuckDBEngine` (embedded, the
    default) and :class:`~tablesafe.engines.MemoryEngine` (pandas/numpy, for
    tests and small data).
    """

    name: str

    def validate(self, dataset: Dataset) -> DatasetSummary:
        """Check the microdata against its catalog.

        Raises:
            DataError: for a missing column, a code not in the catalog, a
                missing or negative weight, a bad record key, or records in
                a declared structural zero.
        """
        ...

    def tabulate(self, dataset: Dataset, plan: TabulationPlan) -> CellAggregates:
        """Compute the exact aggregates of every cell of ``plan``."""
        ...


class ValidationCache:
    """Mixin for engines: validate each dataset once per file version."""

    def validate(self, dataset: Dataset) -> DatasetSummary:
        """Check the microdata against its catalog (implemented by each engine)."""
        raise NotImplementedError

    def ensure_valid(self, dataset: Dataset) -> DatasetSummary:
        """Validate ``dataset`` once per file version (path, size, modification time)."""
        cache: dict[tuple[str, int, int], DatasetSummary] = self.__dict__.setdefault(
            "_validated", {}
        )
        st = dataset.path.stat()
        key = (str(dataset.path.resolve()), st.st_size, st.st_mtime_ns)
        if key not in cache:
            cache[key] = self.validate(dataset)
        return cache[key]


def assemble_grouped(
    plan: TabulationPlan,
    grouping: npt.NDArray[np.integer],
    codes: list[np.ndarray],
    n: npt.NDArray[np.integer],
    key_sum: npt.NDArray[np.integer],
    weight_sum: npt.NDArray[np.integer] | None,
    replicate_sums: npt.NDArray[np.integer] | None,
) -> CellAggregates:
    """Place grouped query rows into the extended cell arrays of ``plan``.

    Each row is one group of one grouping set, keyed by raw column codes.
    Rows of a grouping (e.g. single ages grouped into bands) are added into
    their output category, so engines may group by raw codes.

    Args:
        plan: The tabulation plan.
        grouping: Per row, the bitmask of aggregated dimensions (SQL
            ``GROUPING()``: the first dimension is the most significant bit).
        codes: Per dimension, the raw code of each row (ignored where aggregated).
        n: Per-row counts.
        key_sum: Per-row sums of record keys (any representation congruent mod 2**32).
        weight_sum: Per-row weight sums in fixed point (:mod:`tablesafe._fixed`), or ``None``.
        replicate_sums: Per-row fixed-point replicate sums, shape ``(R, rows)``, or ``None``.

    Rows are added up as integers (their order varies between runs and
    threads), and weights are turned into floats only at the end.
    """
    dims = plan.dimensions
    k = len(dims)
    shape = plan.shape
    rows = len(n)
    index = []
    for i, d in enumerate(dims):
        aggregated = (np.asarray(grouping) >> (k - 1 - i)) & 1 == 1
        lookup = pd.Index([c for members in d.members for c in members])
        target = np.array(
            [j for j, members in enumerate(d.members) for _ in members], dtype=np.int64
        )
        raw = pd.Index(np.asarray(codes[i], dtype=object)[~aggregated]) if rows else pd.Index([])
        pos = lookup.get_indexer(raw)
        if (pos < 0).any():
            bad = sorted({str(v) for v in raw[pos < 0]})[:10]
            raise DataError(
                f"column {d.column} holds code(s) {', '.join(bad)} that the catalog's "
                f"{d.name} does not list"
            )
        idx = np.full(rows, d.size, dtype=np.int64)
        idx[~aggregated] = target[pos]
        index.append(idx)
    flat = np.ravel_multi_index(tuple(index), shape) if rows else np.zeros(0, dtype=np.int64)
    size = int(np.prod(shape))

    def acc(values: np.ndarray, dtype: type) -> np.ndarray:
        out: np.ndarray = np.zeros(size, dtype=dtype)
        np.add.at(out, flat, values.astype(dtype))
        return out.reshape(shape)

    keys = np.asarray(key_sum)
    keys_u = (np.mod(keys.astype(object), KEY_MODULUS) if keys.dtype == object else keys).astype(
        np.uint64
    )
    cell_key = (acc(keys_u, np.uint64) % np.uint64(KEY_MODULUS)).astype(np.uint32)
    computed = np.zeros(shape, dtype=bool)
    for gs in plan.grouping_sets:
        computed[
            tuple(
                slice(0, d.size) if i in gs else slice(d.size, d.size + 1)
                for i, d in enumerate(dims)
            )
        ] = True
    reps = None
    if replicate_sums is not None:
        reps = np.stack([from_fixed(acc(r, np.int64)) for r in np.asarray(replicate_sums)])
    return CellAggregates(
        dimensions=dims,
        grouping_sets=plan.grouping_sets,
        n=acc(np.asarray(n), np.int64),
        cell_key=cell_key,
        weight_sum=None
        if weight_sum is None
        else from_fixed(acc(np.asarray(weight_sum), np.int64)),
        weight_sq_sum=None,
        replicate_sums=reps,
        computed=computed,
    )
