"""Answer tables from cached cubes: one scan per set of variables, not per table.

A census table builder is asked the same variables over and over with
different universes: area by age by sex for each age band, each tenure,
each ethnic group. :class:`CubeCache` wraps any engine. For each set of
microdata columns a table reads (its dimensions' and its universe's), it
asks the wrapped engine once for the *cube*: the exact aggregates of every
combination of those columns' codes, over all records, with no universe.
Every later table over the same columns (any universe, grouping, category
subset or margins) is derived from the cube in memory.

The derivation is exact, bit for bit: every aggregate of a cell is an
integer sum (counts, record-key sums modulo 2**32, fixed-point weight,
replicate and magnitude sums; :mod:`tablesafe.cells._fixed`,
:mod:`tablesafe.catalog._magnitudes`), and the cube's cells partition the
records, so adding the cube cells of a table cell gives the same integers
as adding its records. For magnitudes the cube also holds each row's
``K`` largest absolute contributions: the largest contributions of a union
of cells are the largest of the union of their lists (the values
themselves, never rounded), so a derived cell's list is its records' list.
The derived rows go through the engines' one assembly function
(:func:`~tablesafe.engines._base.assemble_grouped`), so derived and
directly computed aggregates are the same arrays. A cube built with ``K``
largest contributions serves tables asking for ``K`` or fewer (its first
rows); a table asking for more rebuilds it with more. Cubes larger than
the cache's limit and fixed-point sums beyond 2**53 (where the float round
trip would not be exact) go to the wrapped engine unchanged.

What the cache changes for an attacker: nothing in what is published (the
same request gives the same bytes, cached or not). Its timing shows
whether some table over the same variables was asked before, by anyone; it
says nothing about the microdata (docs/decisions.md).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from cachetools import LRUCache

from tablesafe._errors import ComputationError, ConfigError
from tablesafe.catalog._dataset import Dataset
from tablesafe.catalog._magnitudes import MAGNITUDE_SCALE
from tablesafe.cells._aggregates import KEY_MODULUS, CellAggregates
from tablesafe.cells._fixed import FIXED_SCALE
from tablesafe.cells._magnitude_sums import merge_top
from tablesafe.cells._plan import DimensionPlan, MagnitudePlan, TabulationPlan
from tablesafe.cells._quantiles import RecordValues
from tablesafe.cells._selection import SelectedSums
from tablesafe.engines._base import DatasetSummary, Engine, assemble_grouped, group_sums

__all__ = ["CubeCache"]

#: Fixed-point sums up to this size survive the float round trip exactly.
_EXACT_LIMIT = float(2**53)


@dataclass(frozen=True, eq=False)
class _Cube:
    """The nonzero cells of one cube, as rows.

    Attributes:
        columns: The cube's microdata columns, sorted.
        codes: Per column, its source variable's codes (position -> code).
        positions: Per column, each row's code position, shape ``(rows,)``.
        n: Per-row counts.
        key: Per-row record-key sums modulo 2**32 (uint64).
        weight: Per-row fixed-point weight sums, or ``None``.
        replicates: Per-row fixed-point replicate sums ``(R, rows)``, or ``None``.
        magnitudes: Per magnitude name, its per-row fixed-point sums (int64) and
            largest absolute contributions ``(top, rows)`` (float64, zero-padded).
        top: How many largest contributions per row ``magnitudes`` holds.
        catalog: The catalog it was built for, held so that its ``id`` (part of
            the cache key) is not reused while the cube is kept.
    """

    columns: tuple[str, ...]
    codes: dict[str, np.ndarray]
    positions: dict[str, np.ndarray]
    n: np.ndarray
    key: np.ndarray
    weight: np.ndarray | None
    replicates: np.ndarray | None
    magnitudes: dict[str, tuple[np.ndarray, np.ndarray]]
    top: int = 0
    catalog: object = None

    @property
    def rows(self) -> int:
        return int(self.n.size)

    @property
    def nbytes(self) -> int:
        arrays = [self.n, self.key, *self.positions.values()]
        arrays += [a for a in (self.weight, self.replicates) if a is not None]
        arrays += [a for pair in self.magnitudes.values() for a in pair]
        return sum(a.nbytes for a in arrays)


class CubeCache(Engine):
    """An engine that answers tables from cached cubes of a wrapped engine.

    Args:
        engine: The engine that reads the microdata (DuckDB, Spark, memory).
        max_cube_cells: The largest cube (the product of its columns' numbers
            of categories, totals included) that is built; a table needing a
            larger one goes to ``engine`` directly.
        max_cache_mib: How much memory the kept cubes may take in all (MiB);
            the least recently used cubes are dropped beyond it.

    Raises:
        ConfigError: for a limit below 1.
    """

    def __init__(
        self, engine: Engine, *, max_cube_cells: int = 2_000_000, max_cache_mib: float = 512
    ) -> None:
        if max_cube_cells < 1 or not max_cache_mib > 0:
            raise ConfigError(
                "cube cache limits must be positive (max_cube_cells at least 1, max_cache_mib "
                "above 0); turn the cache off instead"
            )
        self.engine = engine
        self.name: str = engine.name
        self.max_cube_cells = max_cube_cells
        self.max_cache_bytes = int(max_cache_mib * 2**20)
        # Least recently used first out, by the bytes each cube holds.
        self._cubes: LRUCache[tuple[object, ...], _Cube] = LRUCache(
            maxsize=self.max_cache_bytes, getsizeof=_cube_bytes
        )
        self._building: dict[tuple[object, ...], threading.Lock] = {}
        # Cubes that cannot serve (too slow to build, or sums beyond exact floats).
        self._failed: set[tuple[object, ...]] = set()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    # -- the engine protocol: everything but tabulate goes to the wrapped engine -------

    def validate(self, dataset: Dataset) -> DatasetSummary:
        """Check the microdata (the wrapped engine's check)."""
        summary: DatasetSummary = self.engine.validate(dataset)
        return summary

    def load(self, dataset: Dataset) -> None:
        """What the wrapped engine holds before the first table (its cubes come per table)."""
        self.engine.load(dataset)

    def ensure_valid(self, dataset: Dataset) -> DatasetSummary:
        """Validate once per file version (the wrapped engine's memory)."""
        summary: DatasetSummary = self.engine.ensure_valid(dataset)
        return summary

    def select(
        self,
        dataset: Dataset,
        plan: TabulationPlan,
        seed: npt.NDArray[np.int64],
        k: npt.NDArray[np.int64],
        counts: npt.NDArray[np.int64] | None = None,
    ) -> SelectedSums:
        """Record-level selection needs the records: the wrapped engine's."""
        return self.engine.select(dataset, plan, seed, k, counts)

    def record_values(
        self, dataset: Dataset, plan: TabulationPlan, magnitude: MagnitudePlan
    ) -> RecordValues:
        """Quantiles need the records (no cube of sums gives them): the wrapped engine's."""
        return self.engine.record_values(dataset, plan, magnitude)

    def close(self) -> None:
        """Drop the cubes and close the wrapped engine."""
        with self._lock:
            self._cubes.clear()
        self.engine.close()

    def tabulate(self, dataset: Dataset, plan: TabulationPlan) -> CellAggregates:
        """The aggregates of ``plan``, derived from its cube when one serves."""
        cube_plan = self._cube_plan(dataset, plan)
        if cube_plan is None:
            return self.engine.tabulate(dataset, plan)  # type: ignore[no-any-return]
        try:
            cube = self._cube(dataset, cube_plan)
        except ComputationError:
            # The cube's query (all records, more columns) took longer than the
            # engine allows; the table's own query may not: ask it directly.
            cube = None
        if cube is None:
            return self.engine.tabulate(dataset, plan)  # type: ignore[no-any-return]
        return _derive(cube, plan)

    # -- cubes ---------------------------------------------------------------------------

    def _cube_plan(self, dataset: Dataset, plan: TabulationPlan) -> TabulationPlan | None:
        columns = sorted({d.column for d in plan.dimensions} | {c for c, _ in plan.universe})
        by_column = {v.column: v for v in dataset.catalog.source_variables}
        if any(c not in by_column for c in columns):
            return None
        dims = tuple(DimensionPlan.from_variable(by_column[c]) for c in columns)
        cells = 1
        for d in dims:
            cells *= d.size + 1
        if cells > self.max_cube_cells:
            return None
        top = max((m.top for m in plan.magnitudes), default=0)
        return TabulationPlan(
            dimensions=dims,
            universe=(),
            grouping_sets=(tuple(range(len(dims))),),
            record_key=plan.record_key,
            weight=plan.weight,
            replicates=plan.replicates,
            # By name (a table's order of its magnitudes does not matter), each
            # with the most largest contributions any of them asks for.
            # (A sum asked for alone, a replicate's, stays alone: no lists to keep.)
            magnitudes=tuple(
                replace(m, top=top if m.top else 0) for m in sorted(plan.magnitudes, key=_name)
            ),
            # A cube of the records that hold a value (no universe: it is applied to rows).
            present=plan.present,
            # A cube of units (households): one row per unit, its columns the cube's.
            unit=None
            if plan.unit is None
            else (plan.unit[0], tuple(dict.fromkeys([*columns, *plan.unit[1]]))),
        )

    def _cube(self, dataset: Dataset, cube_plan: TabulationPlan) -> _Cube | None:
        """The cube of ``cube_plan``: cached, or built once (``None`` if it cannot serve)."""
        st = dataset.path.stat()
        key = (
            str(dataset.path.resolve()),
            st.st_size,
            st.st_mtime_ns,
            id(dataset.catalog),
            tuple(d.column for d in cube_plan.dimensions),
            cube_plan.record_key,
            cube_plan.weight,
            cube_plan.replicates,
            # Not the number of largest contributions: a cube with more serves fewer.
            tuple((m.name, m.column, m.weight) for m in cube_plan.magnitudes),
            cube_plan.present,
            cube_plan.unit,
        )
        top = max((m.top for m in cube_plan.magnitudes), default=0)
        with self._lock:
            if key in self._failed:
                return None
            cube = self._cubes.get(key)
            if cube is not None and cube.top >= top:
                self.hits += 1
                return cube
            building = self._building.setdefault(key, threading.Lock())
        # One build per cube: concurrent requests for it wait for the first.
        with building:
            with self._lock:
                if key in self._failed:
                    return None
                cube = self._cubes.get(key)
                if cube is not None and cube.top >= top:
                    self.hits += 1
                    return cube
                self.misses += 1
            try:
                agg = self.engine.tabulate(dataset, cube_plan)
            except ComputationError:
                with self._lock:
                    self._failed.add(key)
                    self._building.pop(key, None)
                raise
            cube = _rows_of(cube_plan, agg)
            if cube is not None:
                cube = replace(cube, catalog=dataset.catalog)
            with self._lock:
                self._building.pop(key, None)
                if cube is None or cube.nbytes > self.max_cache_bytes:
                    # It would not be kept: later tables query the engine directly.
                    self._failed.add(key)
                    return cube
                # A cube with fewer largest contributions, if any, is replaced.
                self._cubes.pop(key, None)
                self._cubes[key] = cube
            return cube


def _cube_bytes(cube: _Cube) -> int:
    return cube.nbytes


def _name(mag: MagnitudePlan) -> str:
    return mag.name


def _to_fixed(values: np.ndarray, scale: int = FIXED_SCALE) -> np.ndarray | None:
    """Fixed-point integers back from the engine's floats, or ``None`` if not exact.

    The engines divide exact integer sums by ``scale`` (a power of two) once;
    below 2**53 units that division and this multiplication are exact.
    """
    if values.size and not float(np.abs(values).max()) * scale < _EXACT_LIMIT:
        return None
    return np.rint(values * float(scale)).astype(np.int64)


def _rows_of(plan: TabulationPlan, agg: CellAggregates) -> _Cube | None:
    """The nonzero inner cells of a cube's aggregates, as rows."""
    inner = agg.inner
    n = agg.n[inner]
    nonzero = np.nonzero(n.reshape(-1))[0]
    shape = n.shape
    idx = np.unravel_index(nonzero, shape)
    weight = None
    if agg.weight_sum is not None:
        weight = _to_fixed(agg.weight_sum[inner].reshape(-1)[nonzero])
        if weight is None:
            return None
    reps = None
    if agg.replicate_sums is not None:
        r = agg.replicate_sums[(slice(None), *inner)].reshape(agg.replicate_sums.shape[0], -1)
        reps = _to_fixed(r[:, nonzero])
        if reps is None:
            return None
    mags = {}
    top = max((m.top for m in plan.magnitudes), default=0)
    for m in plan.magnitudes:
        sums = agg.magnitudes[m.name]
        fixed = _to_fixed(sums.total[inner].reshape(-1)[nonzero], MAGNITUDE_SCALE)
        tops = sums.top[(slice(None), *inner)].reshape(m.top, n.size)[:, nonzero]
        if fixed is None or not np.isfinite(tops).all():
            return None
        mags[m.name] = (fixed, np.ascontiguousarray(tops, dtype=np.float64))
    positions = {}
    codes = {}
    for i, d in enumerate(plan.dimensions):
        smallest = np.uint8 if d.size <= 255 else np.uint16 if d.size <= 65535 else np.int64
        positions[d.column] = idx[i].astype(smallest)
        codes[d.column] = np.asarray(d.codes)
    return _Cube(
        columns=tuple(d.column for d in plan.dimensions),
        codes=codes,
        positions=positions,
        n=n.reshape(-1)[nonzero].astype(np.int64),
        key=agg.cell_key[inner].reshape(-1)[nonzero].astype(np.uint64),
        weight=weight,
        replicates=reps,
        magnitudes=mags,
        top=top,
    )


def _group(flat: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(flat, return_inverse=True)`` for indices below ``size``.

    Without sorting (a dense index of ``size``, at most a cube's number of
    cells) unless ``flat`` is much smaller than ``size``.
    """
    if size > 8 * flat.size + 4096:
        groups, inverse = np.unique(flat, return_inverse=True)
        return groups, inverse.reshape(-1)
    present = np.zeros(size, dtype=bool)
    present[flat] = True
    groups = np.flatnonzero(present)
    rank = np.cumsum(present, dtype=np.int64) - 1
    return groups, rank[flat]


def _derive(cube: _Cube, plan: TabulationPlan) -> CellAggregates:
    """The aggregates of ``plan`` from ``cube``: the rows its engine query would group."""
    inner = _inner_cells(cube, plan)
    sums, tops, weighted, replicates = _cell_sums(cube, plan, inner)
    parts = _grouping_set_rows(plan, inner, sums)
    return _assemble_parts(cube, plan, inner, parts, tops, weighted, replicates)


@dataclass(frozen=True)
class _InnerCells:
    """The universe's rows of a cube grouped by the dimensions' columns (the query's inner cells).

    Attributes:
        rows: The cube rows in the universe.
        columns: The dimensions' distinct columns, in dimension order.
        sizes: Per column, its number of codes.
        cells: Per inner cell, its flat index over ``sizes``.
        inverse: Per row of ``rows``, its inner cell.
        positions: Per column, each inner cell's code position.
    """

    rows: np.ndarray
    columns: list[str]
    sizes: list[int]
    cells: np.ndarray
    inverse: np.ndarray
    positions: tuple[np.ndarray, ...]


def _inner_cells(cube: _Cube, plan: TabulationPlan) -> _InnerCells:
    """Step 1 of _derive: the universe's rows, grouped by the dimensions' columns."""
    keep = np.ones(cube.rows, dtype=bool)
    for column, allowed in plan.universe:
        inside = np.isin(cube.codes[column], np.asarray(allowed))
        keep &= inside[cube.positions[column]]
    rows = np.nonzero(keep)[0]
    dim_columns = list(dict.fromkeys(d.column for d in plan.dimensions))
    sizes: list[int] = []
    if dim_columns:
        sizes = [cube.codes[c].size for c in dim_columns]
        flat = np.ravel_multi_index(
            tuple(cube.positions[c][rows].astype(np.int64) for c in dim_columns), sizes
        )
        cells, inverse = _group(flat, int(np.prod(sizes)))
        cell_pos = np.unravel_index(cells, sizes)
    else:
        cells = np.zeros(1 if rows.size else 0, dtype=np.int64)
        inverse = np.zeros(rows.size, dtype=np.int64)
        cell_pos = ()
    return _InnerCells(rows, dim_columns, sizes, cells, inverse, cell_pos)


def _cell_sums(
    cube: _Cube, plan: TabulationPlan, inner: _InnerCells
) -> tuple[np.ndarray, list[np.ndarray], bool, int | None]:
    """Step 2 of _derive: the inner cells' integer sums and largest contributions.

    Returns:
        The per-cell sums as rows of one integer matrix ``(C, cells)``
        (count, key sum, then the weight sum and the replicate sums where the
        plan asks and the cube holds them, then per magnitude its sums), per
        magnitude its largest contributions ``(top, cells)``, whether a weight
        sum is there, and how many replicate sums (None without).
    """
    rows, m = inner.rows, inner.cells.size
    weighted = cube.weight is not None and plan.weight is not None
    replicates = cube.replicates is not None and bool(plan.replicates)
    blocks = [cube.n, cube.key.astype(np.int64)]
    blocks += [cube.weight] if weighted and cube.weight is not None else []
    blocks += [cube.replicates] if replicates and cube.replicates is not None else []
    blocks += [cube.magnitudes[mag.name][0] for mag in plan.magnitudes]
    matrix = np.vstack([np.asarray(b, dtype=np.int64).reshape(-1, cube.rows) for b in blocks])
    # Every sum of every inner cell in one pass (integers: the same in any order).
    sums = group_sums(matrix[:, rows], inner.inverse, m)
    sums[1] %= KEY_MODULUS
    tops = []
    for mag in plan.magnitudes:
        top = cube.magnitudes[mag.name][1]
        # The first rows of the cube's lists are the mag.top largest; a derived
        # cell's mag.top largest are the largest of its rows' (exact, no rounding).
        top = top[: mag.top, rows]
        if m != rows.size:
            top = merge_top(np.tile(inner.inverse, mag.top), top.reshape(-1), m, mag.top)
        else:
            # One cube row per derived cell: its list as it is, in cell order.
            placed = np.empty_like(top)
            placed[:, inner.inverse] = top
            top = placed
        tops.append(top)
    reps = None if not replicates or cube.replicates is None else cube.replicates.shape[0]
    return sums, tops, weighted, reps


#: One grouping set's query rows: its GROUPING() flag, per column each row's
#: code position, the per-row sums (rows of a matrix), and whether it is the inner set.
_Part = tuple[int, list[np.ndarray], np.ndarray, bool]


def _grouping_set_rows(plan: TabulationPlan, inner: _InnerCells, sums: np.ndarray) -> list[_Part]:
    """Step 3 of _derive: the query's rows, per grouping set.

    The cells added up by the set's columns and flagged as GROUPING() would
    flag them (integer sums: the same in any order).
    """
    k = len(plan.dimensions)
    dim_columns, sizes, cell_pos, m = inner.columns, inner.sizes, inner.positions, inner.cells.size
    column_of = [dim_columns.index(d.column) for d in plan.dimensions]
    parts: list[_Part] = []
    for gs in plan.grouping_sets:
        flag = sum(1 << (k - 1 - i) for i in range(k) if i not in gs)
        kept = sorted({column_of[i] for i in gs})
        if len(kept) == len(dim_columns):
            pos = list(cell_pos)
            parts.append((flag, pos, sums, len(gs) == k))
            continue
        if kept:
            group = np.ravel_multi_index(tuple(cell_pos[c] for c in kept), [sizes[c] for c in kept])
            groups, into = _group(group, int(np.prod([sizes[c] for c in kept])))
            pos = [np.zeros(groups.size, dtype=np.int64) for _ in dim_columns]
            for c, g in zip(kept, np.unravel_index(groups, [sizes[c] for c in kept]), strict=True):
                pos[c] = g
        else:
            into = np.zeros(m, dtype=np.int64)
            pos = [np.zeros(1 if m else 0, dtype=np.int64) for _ in dim_columns]
        parts.append((flag, pos, group_sums(sums, into, pos[0].size), False))
    return parts


def _assemble_parts(
    cube: _Cube,
    plan: TabulationPlan,
    inner: _InnerCells,
    parts: list[_Part],
    tops: list[np.ndarray],
    weighted: bool,
    replicates: int | None,
) -> CellAggregates:
    """Step 4 of _derive: the grouping sets' rows stacked and assembled as the engine's would be.

    Largest contributions are read from the inner rows only; margins get
    zeros (assembly derives theirs from the inner cells).
    """
    column_of = [inner.columns.index(d.column) for d in plan.dimensions]
    rows_of = [part[2].shape[1] for part in parts]
    grouping = np.concatenate(
        [np.full(r, flag, dtype=np.int64) for r, (flag, *_) in zip(rows_of, parts, strict=True)]
    )
    matrix = np.concatenate([part[2] for part in parts], axis=1)

    def stacked(j: int) -> np.ndarray:
        return np.asarray(matrix[j])

    codes = [
        np.concatenate([cube.codes[d.column][part[1][c]] for part in parts])
        for d, c in zip(plan.dimensions, column_of, strict=True)
    ]
    j = 2
    weight_sum = None
    if weighted:
        weight_sum, j = stacked(j), j + 1
    replicate_sums = None
    if replicates is not None:
        replicate_sums = matrix[j : j + replicates]
        j += replicates
    mags = []
    for i, (mag, top) in enumerate(zip(plan.magnitudes, tops, strict=True)):
        blocks = [
            top if inner_set else np.zeros((mag.top, r), dtype=np.float64)
            for r, (_, _, _, inner_set) in zip(rows_of, parts, strict=True)
        ]
        mags.append((stacked(j + i), np.concatenate(blocks, axis=1)))
    return assemble_grouped(
        plan,
        grouping=grouping,
        codes=codes,
        n=stacked(0),
        key_sum=stacked(1) % KEY_MODULUS,
        weight_sum=weight_sum,
        replicate_sums=replicate_sums,
        magnitudes=mags,
    )
