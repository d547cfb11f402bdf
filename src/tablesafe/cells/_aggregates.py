"""Per-cell aggregates: the engine's output, the only input of every later stage.

The cells of a k-way table and all its margins are held in arrays of the
*extended* shape ``(s_1 + 1, ..., s_k + 1)``, where ``s_i`` is the number of
categories of dimension i and the extra last slot of each axis is that
dimension's total. The inner cells are ``a[:-1, ..., :-1]``; the grand total
is ``a[-1, ..., -1]``; a one-way margin of the first dimension is
``a[:, -1, ..., -1]``, and so on. ``computed`` marks the cells of the
grouping sets that were asked for.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tablesafe._errors import InternalError
from tablesafe.cells._fixed import from_fixed
from tablesafe.cells._magnitude_sums import MagnitudeSums
from tablesafe.cells._plan import DimensionPlan

__all__ = ["KEY_MODULUS", "CellAggregates", "all_grouping_sets", "cell_mask", "computed_cells"]

KEY_MODULUS = 2**32


@dataclass(frozen=True, eq=False)
class CellAggregates:
    """Exact per-cell aggregates of one table, inner cells and margins.

    Attributes:
        dimensions: The table's dimensions (codes, labels, source codes).
        grouping_sets: The grouping sets computed (positions of kept dimensions).
        n: Sample counts (int64).
        cell_key: Cell keys, ``(sum of record keys) mod 2**32`` (uint32).
        weight_sum: Sums of weights (float64), or ``None`` if not computed.
        weight_sq_sum: Sums of squared weights, or ``None``.
        replicate_sums: Sums of each replicate weight, shape ``(R, *shape)``, or ``None``.
        computed: Which cells belong to a requested grouping set.
        magnitudes: Exact sums and largest contributions of each continuous
            variable of the plan, by name (empty when none was asked for).
    """

    dimensions: tuple[DimensionPlan, ...]
    grouping_sets: tuple[tuple[int, ...], ...]
    n: npt.NDArray[np.int64]
    cell_key: npt.NDArray[np.uint32]
    weight_sum: npt.NDArray[np.float64] | None
    weight_sq_sum: npt.NDArray[np.float64] | None
    replicate_sums: npt.NDArray[np.float64] | None
    computed: npt.NDArray[np.bool_]
    magnitudes: Mapping[str, MagnitudeSums] = field(default_factory=dict)

    def __post_init__(self) -> None:
        shape = tuple(d.size + 1 for d in self.dimensions)
        arrays: list[np.ndarray] = [self.n, self.cell_key, self.computed]
        arrays += [a for a in (self.weight_sum, self.weight_sq_sum) if a is not None]
        for a in arrays:
            if a.shape != shape:
                raise InternalError(f"aggregate array of shape {a.shape}, expected {shape}")
        for mag in self.magnitudes.values():
            if mag.total.shape != shape or mag.top.shape[1:] != shape:
                raise InternalError("magnitude sums do not match the table's shape")
        if self.replicate_sums is not None and self.replicate_sums.shape[1:] != shape:
            raise InternalError("replicate sums do not match the table's shape")
        if self.n.dtype != np.int64 or self.cell_key.dtype != np.uint32:
            raise InternalError("counts must be int64 and cell keys uint32")

    @property
    def shape(self) -> tuple[int, ...]:
        """The extended shape (one more slot per axis for its total)."""
        return self.n.shape

    @property
    def inner(self) -> tuple[slice, ...]:
        """Index selecting the inner cells of the extended arrays."""
        return tuple(slice(0, d.size) for d in self.dimensions)

    @property
    def universe_n(self) -> int:
        """Sample size of the universe (the grand total), computed or not."""
        return int(self.n[self.inner].sum())

    def is_inner(self) -> npt.NDArray[np.bool_]:
        """Boolean array marking the inner cells."""
        out = np.zeros(self.shape, dtype=bool)
        out[self.inner] = True
        return out

    @classmethod
    def from_inner(
        cls,
        dimensions: tuple[DimensionPlan, ...],
        grouping_sets: tuple[tuple[int, ...], ...],
        n: npt.NDArray[np.int64],
        key_sum: npt.NDArray[np.uint64],
        weight_sum: npt.NDArray[np.float64] | None = None,
        weight_sq_sum: npt.NDArray[np.float64] | None = None,
        replicate_sums: npt.NDArray[np.float64] | None = None,
    ) -> CellAggregates:
        """Build the aggregates from inner-cell sums by adding up the margins.

        Counts and key sums are exact integers, so margins derived by
        summation equal those an engine computes directly, bit for bit.

        Args:
            dimensions: The table's dimensions.
            grouping_sets: The grouping sets to fill (others stay zero).
            n: Inner-cell counts, shape ``(s_1, ..., s_k)``.
            key_sum: Inner-cell sums of record keys (any representation
                congruent mod 2**32, e.g. wrapped uint64).
            weight_sum: Inner-cell weight sums, or ``None``: integers are fixed-point
                sums (:mod:`tablesafe.cells._fixed`), added up exactly and converted at the end.
            weight_sq_sum: Inner-cell squared-weight sums, or ``None``.
            replicate_sums: Inner-cell replicate sums ``(R, s_1, ..., s_k)`` (integers
                in fixed point, as ``weight_sum``), or ``None``.
        """
        k = len(dimensions)
        shape = tuple(d.size + 1 for d in dimensions)
        computed = np.zeros(shape, dtype=bool)

        def extend(a: np.ndarray, lead: int = 0) -> np.ndarray:
            out = np.zeros(a.shape[:lead] + shape, dtype=a.dtype)
            for gs in grouping_sets:
                dropped = tuple(lead + i for i in range(k) if i not in gs)
                summed = a.sum(axis=dropped, keepdims=True) if dropped else a
                idx = (slice(None),) * lead + tuple(
                    slice(0, dimensions[i].size) if i in gs else slice(-1, None) for i in range(k)
                )
                out[idx] = summed
            return out

        for gs in grouping_sets:
            computed[
                tuple(
                    slice(0, dimensions[i].size) if i in gs else slice(-1, None) for i in range(k)
                )
            ] = True
        keys = extend(key_sum.astype(np.uint64))
        return cls(
            dimensions=dimensions,
            grouping_sets=grouping_sets,
            n=extend(n.astype(np.int64)),
            cell_key=(keys % np.uint64(KEY_MODULUS)).astype(np.uint32),
            weight_sum=None if weight_sum is None else _weights(extend(weight_sum)),
            weight_sq_sum=None if weight_sq_sum is None else extend(weight_sq_sum),
            replicate_sums=(
                None if replicate_sums is None else _weights(extend(replicate_sums, lead=1))
            ),
            computed=computed,
        )


def _weights(a: np.ndarray) -> npt.NDArray[np.float64]:
    if np.issubdtype(a.dtype, np.integer):
        return from_fixed(a)
    return np.asarray(a, dtype=np.float64)


def cell_mask(shape: tuple[int, ...], grouping_set: tuple[int, ...]) -> tuple[slice, ...]:
    """Index of the cells of one grouping set in an extended array of ``shape``."""
    return tuple(
        slice(0, s - 1) if i in grouping_set else slice(s - 1, s) for i, s in enumerate(shape)
    )


def computed_cells(
    shape: tuple[int, ...], grouping_sets: tuple[tuple[int, ...], ...]
) -> npt.NDArray[np.bool_]:
    """The cells a table computes: every cell of each of its grouping sets."""
    computed = np.zeros(shape, dtype=bool)
    for gs in grouping_sets:
        computed[cell_mask(shape, gs)] = True
    return computed


def all_grouping_sets(k: int) -> tuple[tuple[int, ...], ...]:
    """Every grouping set of a k-way table, inner cells first."""
    return tuple(s for r in range(k, -1, -1) for s in itertools.combinations(range(k), r))
