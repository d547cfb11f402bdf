"""The engine interface: the one narrow interface between tablesafe and microdata.

Only an engine reads microdata. It answers two questions: does this
microdata match its catalog (:meth:`Engine.validate`), and what are the
exact per-cell aggregates of this plan (:meth:`Engine.tabulate`)? Everything
after it works on the small :class:`~tablesafe.CellAggregates`. Engines must
agree exactly, bit for bit: counts and cell keys are integers, and weights
are summed as fixed-point integers (:mod:`tablesafe.cells._fixed`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ComputationError, DataError
from tablesafe.catalog._catalog import Catalog, ReplicateMethod
from tablesafe.catalog._dataset import Dataset
from tablesafe.catalog._magnitudes import from_magnitude_fixed
from tablesafe.cells._aggregates import KEY_MODULUS, CellAggregates
from tablesafe.cells._fixed import from_fixed, range_error
from tablesafe.cells._magnitude_sums import MagnitudeSums, merge_top, top_of_margins
from tablesafe.cells._plan import MagnitudePlan, TabulationPlan
from tablesafe.cells._quantiles import RecordValues
from tablesafe.cells._selection import SelectedSums

__all__ = [
    "VALIDATION_FILE",
    "DatasetSummary",
    "Engine",
    "assemble_grouped",
    "check_keys_and_weights",
    "file_fingerprint",
    "group_sums",
    "record_values",
    "weight_columns",
]


@dataclass(frozen=True)
class DatasetSummary:
    """What validation learned about a dataset (counts only, nothing disclosive).

    Attributes:
        records: Number of records.
        columns: Number of columns in the microdata file.
    """

    records: int
    columns: int


#: Bumped whenever validation checks more than before, so older records are not trusted.
VALIDATION_VERSION = 2
#: Where a dataset's validations are remembered: beside its microdata file.
VALIDATION_FILE = ".tablesafe-validated.json"
_FINGERPRINT_BYTES = 1 << 16


def file_fingerprint(dataset: Dataset) -> dict[str, object]:
    """What identifies one version of a dataset: file and catalog.

    The file's resolved path, size and modification time, a SHA-256 of its
    first and last 64 KiB (a Parquet file's footer, with the row-group
    statistics of every column, is in its last bytes), the catalog's
    SHA-256, and the version of the checks.
    """
    path = dataset.path.resolve()
    st = path.stat()
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        digest.update(fh.read(_FINGERPRINT_BYTES))
        if st.st_size > _FINGERPRINT_BYTES:
            fh.seek(max(st.st_size - _FINGERPRINT_BYTES, _FINGERPRINT_BYTES))
            digest.update(fh.read())
    return {
        "path": str(path),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "content": digest.hexdigest(),
        "catalog": hashlib.sha256(dataset.catalog.to_toml().encode()).hexdigest(),
        "checks": VALIDATION_VERSION,
    }


class Engine(ABC):
    """Where microdata is read and aggregated: the one narrow interface to microdata.

    Implementations: :class:`~tablesafe.engines.DuckDBEngine` (embedded, the
    default), :class:`~tablesafe.engines.SparkEngine` (for scale),
    :class:`~tablesafe.engines.MemoryEngine` (pandas/numpy, for tests and
    small data), and the wrapper :class:`~tablesafe.engines.CubeCache`.
    An engine validates microdata against its catalog, tabulates the exact
    per-cell aggregates of a plan, and chooses records for record-level
    drop/add-up-to-q; :meth:`ensure_valid` validates each dataset once per
    file version, in memory and on disk beside the microdata file
    (:data:`VALIDATION_FILE`: a second command on an unchanged file pays
    nothing; a file whose size, modification time, first or last 64 KiB, or
    catalog changed is validated again; where the folder is not writable,
    validations are remembered in memory only). :meth:`close` releases what
    the engine holds; an engine is also a context manager.
    """

    name: str

    @abstractmethod
    def validate(self, dataset: Dataset) -> DatasetSummary:
        """Check the microdata against its catalog.

        Raises:
            DataError: for a missing column, a code not in the catalog, a
                missing or negative weight, a bad record key, or records in
                a declared structural zero.
        """

    @abstractmethod
    def tabulate(self, dataset: Dataset, plan: TabulationPlan) -> CellAggregates:
        """Compute the exact aggregates of every cell of ``plan``."""

    @abstractmethod
    def select(
        self,
        dataset: Dataset,
        plan: TabulationPlan,
        seed: npt.NDArray[np.int64],
        k: npt.NDArray[np.int64],
        counts: npt.NDArray[np.int64] | None = None,
    ) -> SelectedSums:
        """Sum the weights of the first ``k`` records of each inner cell in mix order.

        Records of each inner cell are ordered by the integer mix of their key
        with the cell's ``seed`` (:mod:`tablesafe.cells._selection`; ties by key,
        then weights), the same in every engine.

        Args:
            dataset: The dataset.
            plan: The tabulation plan (dimensions, universe, weight, replicates).
            seed: Per inner cell, the selection seed (0 .. 2**32 - 1).
            k: Per inner cell, how many records to choose (0 for none).
            counts: Per inner cell, its number of records in the universe.
        """

    def record_values(
        self, dataset: Dataset, plan: TabulationPlan, magnitude: MagnitudePlan
    ) -> RecordValues:
        """The records of ``plan``'s universe with their value of one continuous variable.

        Quantiles are not sums (no aggregate of a cell's parts gives them):
        they are computed from these values (:mod:`tablesafe.cells._quantiles`).

        Args:
            dataset: The dataset.
            plan: The tabulation plan (dimensions and universe).
            magnitude: The variable, with its weight where the table is weighted.

        Raises:
            ComputationError: for an engine that cannot list records (the default).
        """
        raise ComputationError(
            f"the {self.name} engine cannot compute quantiles; use the duckdb, memory or "
            "spark engine"
        )

    def close(self) -> None:  # noqa: B027 (a no-op default: most engines hold nothing)
        """Release what the engine holds (connections, sessions); a no-op by default."""

    def load(self, dataset: Dataset) -> None:  # noqa: B027 (a no-op default: most read files)
        """Hold ``dataset`` as the engine keeps it for its tables, before the first table.

        A server calls it at start-up, so that its first table costs what a later
        one does (DuckDB with ``materialize`` reads the file into memory here, the
        in-memory engine into a frame). A no-op for engines that read the file for
        every table.
        """

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ensure_valid(self, dataset: Dataset) -> DatasetSummary:
        """Validate ``dataset`` once per file version (see the class docstring)."""
        # In memory: keyed by the catalog object (held, so its id is not reused).
        cache: dict[tuple[str, int, int, int], tuple[object, DatasetSummary]] = (
            self.__dict__.setdefault("_validated", {})
        )
        st = dataset.path.stat()
        quick = (str(dataset.path.resolve()), st.st_size, st.st_mtime_ns, id(dataset.catalog))
        if quick in cache:
            return cache[quick][1]
        fingerprint = file_fingerprint(dataset)
        summary = _remembered(dataset, fingerprint)
        if summary is None:
            summary = self.validate(dataset)
            _remember(dataset, fingerprint, summary)
        cache[quick] = (dataset.catalog, summary)
        return summary


def _store(dataset: Dataset) -> Path:
    return dataset.path.resolve().parent / VALIDATION_FILE


def _remembered(dataset: Dataset, fingerprint: dict[str, object]) -> DatasetSummary | None:
    try:
        entries = json.loads(_store(dataset).read_text())
    except (OSError, ValueError):
        return None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("fingerprint") == fingerprint:
            try:
                return DatasetSummary(records=int(entry["records"]), columns=int(entry["columns"]))
            except (KeyError, TypeError, ValueError):
                return None
    return None


def _remember(dataset: Dataset, fingerprint: dict[str, object], summary: DatasetSummary) -> None:
    store = _store(dataset)
    try:
        old = json.loads(store.read_text()) if store.exists() else []
    except (OSError, ValueError):
        old = []
    entries = [
        e
        for e in (old if isinstance(old, list) else [])
        if isinstance(e, dict)
        and isinstance(e.get("fingerprint"), dict)
        and e["fingerprint"].get("path") != fingerprint["path"]
    ][-15:]
    entries.append(
        {"fingerprint": fingerprint, "records": summary.records, "columns": summary.columns}
    )
    tmp = store.with_name(f"{store.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(entries, indent=1))
        os.replace(tmp, store)
    except OSError:
        # A read-only dataset folder: remembered in memory only.
        tmp.unlink(missing_ok=True)


def weight_columns(catalog: Catalog) -> list[str]:
    """The columns a dataset's weights are read from: its weight, then its replicate weights."""
    weights = [catalog.weight] if catalog.weight else []
    weights += list(catalog.replicates.columns) if catalog.replicates else []
    return weights


def jackknife_needs_check(catalog: Catalog) -> bool:
    """Whether a JK1 design takes its default coefficient ``(R - 1) / R`` (not declared)."""
    design = catalog.replicates
    return (
        design is not None
        and catalog.weight is not None
        and design.method == ReplicateMethod.JK1
        and not design.declared
    )


def jackknife_scale_sql(catalog: Catalog, ident: Callable[[str], str]) -> list[str]:
    """Per replicate, the largest ratio of its weight to the weight (an engine's SQL aggregates).

    A delete-one-PSU replicate scales the other PSUs of the dropped one's
    stratum by ``n_h / (n_h - 1)``: the largest ratio tells ``n_h``.
    """
    assert catalog.replicates is not None and catalog.weight is not None
    w = ident(catalog.weight)
    return [
        f"MAX(CASE WHEN {w} > 0 THEN CAST({ident(c)} AS DOUBLE) / CAST({w} AS DOUBLE) END)"
        for c in catalog.replicates.columns
    ]


def check_jackknife_coefficient(catalog: Catalog, largest: Sequence[float | None]) -> None:
    """A JK1 design without a declared coefficient whose replicate weights are stratified.

    The default ``(R - 1) / R`` is right for a jackknife over all ``R`` PSUs,
    which scales the others by ``R / (R - 1)``. A replicate that scales by
    ``n_h / (n_h - 1)`` drops a PSU of a stratum of ``n_h`` (JKn), whose
    coefficient is ``(n_h - 1) / n_h``: NHANES II's 31 strata of 2 PSUs
    declared as JK1 gave standard errors 1.40 times too large.

    Args:
        catalog: The dataset's catalog.
        largest: Per replicate, the largest ratio of its weight to the weight.

    Raises:
        DataError: saying which coefficient to declare (or how to make weights
            that one coefficient fits).
    """
    design = catalog.replicates
    assert design is not None
    scales = np.array([float(m) for m in largest if m is not None and float(m) > 1.0])
    if scales.size == 0:
        return
    implied = 1.0 / scales  # (n_h - 1) / n_h of each replicate's stratum
    typical = float(np.median(implied))
    if abs(typical - design.coefficient) <= 0.1 * design.coefficient:
        return
    r = len(design.columns)
    words = (
        f"dataset.replicate_method is JK1 and no replicate_coefficient is declared, so the "
        f"default (R - 1) / R = {design.coefficient:.4g} applies to its {r} replicates; but "
        f"they scale the rest of a dropped PSU's stratum by {1 / typical:.4g}, not "
        f"{r / (r - 1):.4g}: a stratified jackknife (JKn), whose standard errors the default "
        f"would make {math.sqrt(design.coefficient / typical):.2f} times too large. "
    )
    if float(np.ptp(implied)) <= 1e-6 * typical:
        psus = round(1.0 / (1.0 - typical))
        words += (
            f"Every stratum has {psus} PSUs: declare replicate_coefficient = {typical:.6g} "
            "under [dataset]."
        )
    else:
        words += (
            "Its strata have different numbers of PSUs, so no one coefficient fits: make the "
            "replicate weights with `tablesafe replicates add --strata COLUMN --psu COLUMN "
            "--method JK1` (which rescales each replicate to coefficient 1), or declare the "
            "replicate_coefficient that fits the weights you have."
        )
    raise DataError(words)


def check_keys_and_weights(catalog: Catalog, weights: Sequence[str], row: Sequence[Any]) -> None:
    """A step of an SQL engine's validation: the record keys' and weights' figures of its scan.

    Args:
        catalog: The dataset's catalog.
        weights: Its weight columns (:func:`weight_columns`).
        row: The scan's figures: the records, the missing record keys, the
            smallest and the largest record key, then per weight column its
            missing, NaN or infinite values, its negative values, its largest
            absolute value and the sum of its absolute values (a figure of an
            empty scan may be None).

    Raises:
        DataError: naming the first problem found.
    """
    records, key_nulls, key_min, key_max = row[0], row[1], row[2], row[3]
    if key_nulls:
        raise DataError(f"record-key column {catalog.record_key} has {key_nulls} missing values")
    if records and (key_min < 0 or key_max >= KEY_MODULUS):
        raise DataError(
            f"record keys in {catalog.record_key} must lie in 0 .. 2**32 - 1; use "
            "`tablesafe keys add` to assign them"
        )
    pos = 4
    for w in weights:
        bad, neg = row[pos] or 0, row[pos + 1] or 0
        largest, total = row[pos + 2] or 0.0, row[pos + 3] or 0.0
        pos += 4
        if bad:
            raise DataError(f"weight column {w} has {bad} missing, NaN or infinite values")
        too_large = range_error(w, float(largest), float(total))
        if too_large:
            raise DataError(too_large)
        if neg and w == catalog.weight:
            raise DataError(f"weight column {w} has {neg} negative values; weights must be >= 0")


def assemble_grouped(
    plan: TabulationPlan,
    grouping: npt.NDArray[np.integer],
    codes: list[np.ndarray],
    n: npt.NDArray[np.integer],
    key_sum: npt.NDArray[np.integer],
    weight_sum: npt.NDArray[np.integer] | None,
    replicate_sums: npt.NDArray[np.integer] | None,
    magnitudes: Sequence[tuple[np.ndarray, np.ndarray]] = (),
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
        weight_sum: Per-row weight sums in fixed point (:mod:`tablesafe.cells._fixed`), or ``None``.
        replicate_sums: Per-row fixed-point replicate sums, shape ``(R, rows)``, or ``None``.
        magnitudes: Per magnitude of ``plan.magnitudes``, the per-row fixed-point
            sums and the largest absolute contributions, shape ``(top, rows)``
            (0 or NaN past a cell's records), used in the inner rows only.

    Rows are added up as integers (their order varies between runs and
    threads), and weights are turned into floats only at the end.
    """
    dims = plan.dimensions
    shape = plan.shape
    rows = len(n)
    index = _row_cells(plan, grouping, codes, rows)
    flat = np.ravel_multi_index(tuple(index), shape) if rows else np.zeros(0, dtype=np.int64)
    cells = _Cells(flat, shape)
    keys = np.asarray(key_sum)
    keys_u = (np.mod(keys.astype(object), KEY_MODULUS) if keys.dtype == object else keys).astype(
        np.uint64
    )
    cell_key = (cells.add(keys_u, np.uint64) % np.uint64(KEY_MODULUS)).astype(np.uint32)
    computed = _computed_cells(plan)
    reps = None
    if replicate_sums is not None:
        reps = from_fixed(cells.add_rows(np.asarray(replicate_sums)))
    mags = _magnitude_sums(plan, index, rows, magnitudes, cells)
    return CellAggregates(
        dimensions=dims,
        grouping_sets=plan.grouping_sets,
        magnitudes=mags,
        n=cells.add(np.asarray(n), np.int64),
        cell_key=cell_key,
        weight_sum=None
        if weight_sum is None
        else from_fixed(cells.add(np.asarray(weight_sum), np.int64)),
        weight_sq_sum=None,
        replicate_sums=reps,
        computed=computed,
    )


def record_values(
    plan: TabulationPlan,
    codes: list[np.ndarray],
    x: npt.NDArray[np.float64],
    weight: npt.NDArray[np.float64] | None,
    key: npt.NDArray[np.int64],
    replicate_fixed: npt.NDArray[np.int64] | None = None,
) -> RecordValues:
    """:class:`RecordValues` of records given by their raw codes (an SQL engine's rows).

    Args:
        plan: The tabulation plan.
        codes: Per dimension, each record's raw code.
        x: Each record's value.
        weight: Each record's weight, or ``None``.
        key: Each record's record key.
        replicate_fixed: Each record's replicate weights ``(R, records)`` in fixed
            point (:func:`~tablesafe.cells._fixed.fixed_sql` in the query), or ``None``.

    Raises:
        DataError: for a raw code the catalog does not list.
    """
    rows = len(x)
    index = _row_cells(plan, np.zeros(rows, dtype=np.int64), codes, rows)
    inner_shape = tuple(d.size for d in plan.dimensions)
    cell = np.ravel_multi_index(tuple(index), inner_shape) if rows else np.zeros(0, dtype=np.int64)
    return RecordValues(
        cell=np.asarray(cell, dtype=np.int64),
        x=np.asarray(x, dtype=np.float64),
        weight=None if weight is None else np.asarray(weight, dtype=np.float64),
        key=np.asarray(key, dtype=np.int64),
        replicate_fixed=None
        if replicate_fixed is None
        else np.asarray(replicate_fixed, dtype=np.int64).reshape(-1, rows),
    )


def _row_cells(
    plan: TabulationPlan, grouping: npt.NDArray[np.integer], codes: list[np.ndarray], rows: int
) -> list[np.ndarray]:
    """Step 1 of assemble_grouped: per dimension, each row's output category (size: its margin).

    Raises:
        DataError: for a raw code the catalog does not list.
    """
    k = len(plan.dimensions)
    index = []
    for i, d in enumerate(plan.dimensions):
        aggregated = (np.asarray(grouping) >> (k - 1 - i)) & 1 == 1
        # Raw code -> output category (a grouped category has several raw codes).
        lookup = {c: j for j, members in enumerate(d.members) for c in members}
        raw = np.asarray(codes[i])[~aggregated] if rows else np.zeros(0, dtype=np.int64)
        if raw.size:
            distinct, inverse = np.unique(raw, return_inverse=True)
            pos = np.array([lookup.get(c, -1) for c in distinct.tolist()], dtype=np.int64)[
                inverse.reshape(-1)
            ]
        else:
            pos = np.zeros(0, dtype=np.int64)
        if (pos < 0).any():
            bad = sorted({str(v) for v in raw[pos < 0].tolist()})[:10]
            raise DataError(
                f"column {d.column} holds code(s) {', '.join(bad)} that the catalog's "
                f"{d.name} does not list"
            )
        idx = np.full(rows, d.size, dtype=np.int64)
        idx[~aggregated] = pos
        index.append(idx)
    return index


def group_sums(
    values: npt.NDArray[np.integer], groups: npt.NDArray[np.integer], size: int
) -> np.ndarray:
    """Integer sums of the rows of ``values`` (``(C, rows)``) per group: ``(C, size)``.

    Integer sums, so the same in any row order. One ``np.add.at`` per row
    (measured faster for these shapes than a sort with ``np.add.reduceat``
    or a sparse product: 1,600 rows x 163 sums into 128 groups, 1.8 ms
    against 9.5 and 9.7).
    """
    out: np.ndarray = np.zeros((values.shape[0], size), dtype=values.dtype)
    for row, sums in zip(values, out, strict=True):
        np.add.at(sums, groups, row)
    return out


@dataclass(frozen=True)
class _Cells:
    """Step 2 of assemble_grouped: per-row values added up into the cells the rows fall in.

    Attributes:
        flat: Per row, its cell's flat index in the extended cell array.
        shape: The extended cell array's shape.
    """

    flat: np.ndarray
    shape: tuple[int, ...]

    def add(self, values: np.ndarray, dtype: type) -> np.ndarray:
        """Sum ``values`` per cell, as ``dtype`` (integers: the same sum in any row order)."""
        out: np.ndarray = np.zeros(int(np.prod(self.shape)), dtype=dtype)
        np.add.at(out, self.flat, values.astype(dtype))
        return out.reshape(self.shape)

    def add_rows(self, values: np.ndarray) -> np.ndarray:
        """Sum each row of integer ``values`` (``(C, rows)``) per cell: ``(C, *shape)``."""
        size = int(np.prod(self.shape))
        sums = group_sums(np.asarray(values, dtype=np.int64), self.flat, size)
        return sums.reshape((values.shape[0], *self.shape))


def _computed_cells(plan: TabulationPlan) -> npt.NDArray[np.bool_]:
    """Step 3 of assemble_grouped: the cells of the plan's grouping sets."""
    dims = plan.dimensions
    computed = np.zeros(plan.shape, dtype=bool)
    for gs in plan.grouping_sets:
        computed[
            tuple(
                slice(0, d.size) if i in gs else slice(d.size, d.size + 1)
                for i, d in enumerate(dims)
            )
        ] = True
    return computed


def _magnitude_sums(
    plan: TabulationPlan,
    index: list[np.ndarray],
    rows: int,
    magnitudes: Sequence[tuple[np.ndarray, np.ndarray]],
    cells: _Cells,
) -> dict[str, MagnitudeSums]:
    """Step 4 of assemble_grouped: per magnitude, its cell totals and largest contributions."""
    dims = plan.dimensions
    mags = {}
    if plan.magnitudes:
        # Largest contributions: from the inner rows only (several rows of raw
        # codes may fall in one inner cell); margins derive from the inner cells.
        inner_shape = tuple(d.size for d in dims)
        inner_rows = np.all([idx < d.size for idx, d in zip(index, dims, strict=True)], axis=0)
        inner_rows = np.broadcast_to(inner_rows, (rows,))
        inner_flat = (
            np.ravel_multi_index(tuple(idx[inner_rows] for idx in index), inner_shape)
            if rows and len(dims)
            else np.zeros(int(inner_rows.sum()), dtype=np.int64)
        )
        inner_size = int(np.prod(inner_shape))
        # Every variable's (and replicate's) sums in one pass; one grouping of raw codes.
        totals = from_magnitude_fixed(cells.add_rows(np.array([m[0] for m in magnitudes])))
        one_row_each = (
            inner_flat.size == 0 or np.bincount(inner_flat, minlength=inner_size).max() <= 1
        )
    for i, (mag, (_, tops)) in enumerate(zip(plan.magnitudes, magnitudes, strict=True)):
        inner_top = np.zeros((mag.top, inner_size), dtype=np.float64)
        if mag.top:
            t = np.nan_to_num(np.asarray(tops, dtype=np.float64).reshape(mag.top, rows))
            t = t[:, inner_rows]
            if one_row_each:
                # One row per inner cell (no grouping of raw codes): its list as it is.
                inner_top[:, inner_flat] = t
            else:
                inner_top = merge_top(
                    np.tile(inner_flat, mag.top), t.reshape(-1), inner_size, mag.top
                )
        mags[mag.name] = MagnitudeSums(
            total=totals[i],
            top=top_of_margins(
                inner_top.reshape((mag.top, *inner_shape)), cells.shape, plan.grouping_sets
            ),
        )
    return mags
