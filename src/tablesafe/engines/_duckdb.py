"""The DuckDB engine: embedded, in-process, the default.

A tabulation is one ``GROUP BY GROUPING SETS`` query. Identifiers (column
names) come only from the validated catalog and are double-quoted; category
codes travel only as bound parameters, never as SQL text. Cell keys are
summed as integers (DuckDB sums integers into 128-bit HUGEINT, so the sum is
exact) and reduced modulo 2**32 in the query.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt

from tablesafe._errors import ComputationError, DataError, FormatError
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._dataset import DataFormat, Dataset
from tablesafe.catalog._hints import missing_key_hint
from tablesafe.catalog._magnitudes import (
    magnitude_check_result,
    magnitude_check_sql,
    require_numeric,
)
from tablesafe.catalog._units import raise_unit_problem, unit_check_sql
from tablesafe.cells._aggregates import CellAggregates
from tablesafe.cells._plan import MagnitudePlan, TabulationPlan
from tablesafe.cells._quantiles import RecordValues
from tablesafe.cells._selection import (
    SelectedSums,
    mix32_staged_sql,
    ranked_sums,
    select_records,
    selection_rows,
)
from tablesafe.engines._base import (
    DatasetSummary,
    Engine,
    assemble_grouped,
    check_jackknife_coefficient,
    check_keys_and_weights,
    jackknife_needs_check,
    jackknife_scale_sql,
    record_values,
    weight_columns,
)
from tablesafe.engines._sql import (
    Dialect,
    ranking_sql,
    tabulation_sql,
    values_sql,
)

__all__ = ["DuckDBEngine"]

#: What a statement gives back, as ``fetch`` asks: every row (a list of tuples),
#: one row (a tuple or None) or the columns (name -> numpy array); DuckDB's
#: own untyped values.
Fetched = Any


def _ident(name: str) -> str:
    # Catalog names match [A-Za-z][A-Za-z0-9_]*, so quoting cannot be escaped;
    # the assertion guards against a future caller bypassing the catalog.
    if not name.replace("_", "").isalnum() or '"' in name:
        raise DataError(f"{name!r} is not a valid column name")
    return f'"{name}"'


def _literal(path: Path) -> str:
    # File paths come from the data owner's catalog or configuration, never
    # from a user; table functions take them as literals.
    return "'" + str(path).replace("'", "''") + "'"


class DuckDBEngine(Engine):
    """Tabulate with an embedded DuckDB database.

    Args:
        threads: Worker threads for DuckDB (default: all cores).
        memory_limit: DuckDB memory limit, e.g. ``"4GB"`` (default: DuckDB's).
        materialize: Load each dataset into DuckDB's in-memory columnar
            storage on first use instead of scanning its file for every
            query (faster repeated queries; costs memory).
        timeout: Seconds after which a tabulation is cancelled
            (:class:`~tablesafe.ComputationError`); ``None`` for no limit.
    """

    name = "duckdb"

    def __init__(
        self,
        *,
        threads: int | None = None,
        memory_limit: str | None = None,
        materialize: bool = False,
        timeout: float | None = None,
    ) -> None:
        config: dict[str, Any] = {}
        if threads is not None:
            config["threads"] = int(threads)
        if memory_limit is not None:
            config["memory_limit"] = memory_limit
        self._con = duckdb.connect(":memory:", config=config)
        self._materialize = materialize
        self._timeout = timeout
        self._tables: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the database connection."""
        self._con.close()

    def __enter__(self) -> DuckDBEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sources ---------------------------------------------------------------

    def load(self, dataset: Dataset) -> None:
        """Read ``dataset`` into memory now when the engine materializes (else nothing)."""
        if self._materialize:
            self._scan(dataset)

    def _scan(self, dataset: Dataset) -> str:
        path = dataset.path.resolve()
        if dataset.format == DataFormat.PARQUET:
            scan = f"read_parquet({_literal(path)})"
        else:
            scan = (
                f"read_csv({_literal(path)}, header = true, types = {_csv_types(dataset.catalog)})"
            )
        if not self._materialize:
            return scan
        key = (str(path), dataset.format)
        with self._lock:
            if key not in self._tables:
                table = f"ts_data_{len(self._tables)}"
                self._run(f"CREATE TABLE {table} AS SELECT * FROM {scan}", [])
                self._tables[key] = table
            return self._tables[key]

    def _run(
        self,
        sql: str,
        params: Sequence[Any],
        *,
        timeout: float | None = None,
        fetch: str = "all",
    ) -> Fetched:
        """Run one statement on a fresh cursor and fetch its result ("all", "one", "numpy").

        Each call has its own cursor (so threads never share one) and closes
        it, leaving no DuckDB object alive after the call.
        """
        cur = self._con.cursor()
        timer = None
        started = time.monotonic()
        if timeout is not None:
            # DuckDB has no statement timeout; interrupting the cursor from a
            # timer thread cancels the running query.
            timer = threading.Timer(timeout, _interrupt, args=(weakref.ref(cur),))
            timer.daemon = True
            timer.start()
        try:
            cur.execute(sql, list(params))
            if fetch == "numpy":
                out: Fetched = cur.fetchnumpy()
            elif fetch == "one":
                out = cur.fetchone()
            else:
                out = cur.fetchall()
            # An interrupt that came while the result was fetched may leave it
            # short without an exception: past the limit, no result is used.
            if timeout is not None and time.monotonic() - started > timeout:
                raise duckdb.InterruptException("past the time limit")
            return out
        except duckdb.InterruptException:
            raise ComputationError(
                f"the tabulation took longer than {timeout} s and was cancelled; ask for a "
                "smaller table or a narrower universe"
            ) from None
        except duckdb.IOException as exc:
            raise DataError(f"cannot read the microdata: {_first_line(exc)}") from None
        except duckdb.ConversionException as exc:
            raise DataError(
                f"a microdata column has values of the wrong type: {_first_line(exc)}"
            ) from None
        except duckdb.InvalidInputException as exc:
            raise FormatError(f"malformed microdata file: {_first_line(exc)}") from None
        except duckdb.BinderException as exc:
            raise DataError(
                f"the microdata does not match the catalog: {_first_line(exc)}"
            ) from None
        finally:
            if timer is not None:
                timer.cancel()

    # -- validation --------------------------------------------------------------

    def validate(self, dataset: Dataset) -> DatasetSummary:
        """Check the microdata against its catalog in a few scans.

        Raises:
            DataError: naming the first problem found.
        """
        cat = dataset.catalog
        src = self._scan(dataset)
        weights = weight_columns(cat)
        types = self._check_types(dataset, src, weights)
        records = self._check_scan(cat, src, weights)
        if jackknife_needs_check(cat):
            row = self._run(
                f"SELECT {', '.join(jackknife_scale_sql(cat, _ident))} FROM {src}", [], fetch="one"
            )
            assert row is not None
            check_jackknife_coefficient(cat, list(row))
        self._check_codes(cat, src)
        if cat.magnitudes:
            self._check_magnitudes(cat, src, types)
        self._check_structural_zeros(cat, src)
        for unit in cat.units.values():
            # A household's key, weight and variables: the same on each of its records.
            columns = [cat.variables[v].column for v in unit.variables]
            raise_unit_problem(
                unit, self._run(unit_check_sql(unit, columns, _ident, src), [], fetch="one")
            )
        return DatasetSummary(records=int(records), columns=len(types))

    def _check_types(self, dataset: Dataset, src: str, weights: list[str]) -> dict[str, str]:
        """Step 1 of validate: the catalog's columns are there, with types that fit its codes.

        Returns:
            Every column's DuckDB type, by name.
        """
        cat = dataset.catalog
        described = self._run(f"DESCRIBE SELECT * FROM {src}", [])
        types = {row[0]: str(row[1]).upper() for row in described}
        missing = [c for c in cat.columns if c not in types]
        if missing:
            raise DataError(
                f"microdata file {dataset.path.name} lacks column(s) {', '.join(missing)} "
                f"named by the catalog{missing_key_hint(cat.record_key, missing)}; "
                f"it has: {', '.join(types)}"
            )
        for var in cat.source_variables:
            t = types[var.column]
            is_int = any(t.startswith(p) for p in _INT_TYPES)
            if var.code_type is int and not is_int:
                raise DataError(
                    f"column {var.column} holds {t} values but the catalog gives {var.name} "
                    "integer codes"
                )
            if var.code_type is str and t != "VARCHAR":
                raise DataError(
                    f"column {var.column} holds {t} values but the catalog gives {var.name} "
                    "text codes"
                )
        key_type = types[cat.record_key]
        if not any(key_type.startswith(p) for p in _INT_TYPES):
            raise DataError(
                f"record-key column {cat.record_key} must hold integers, not {key_type}"
            )
        for w in weights:
            if not any(types[w].startswith(p) for p in (*_INT_TYPES, "DOUBLE", "FLOAT", "DECIMAL")):
                raise DataError(f"weight column {w} must be numeric, not {types[w]}")
        return types

    def _check_scan(self, cat: Catalog, src: str, weights: list[str]) -> int:
        """Step 2 of validate: record keys, weights and missing categories, in one scan.

        Returns:
            The number of records.
        """
        k = _ident(cat.record_key)
        exprs = [
            "COUNT(*)",
            f"COUNT(*) - COUNT({k})",
            f"MIN({k})",
            f"MAX({k})",
        ]
        for w in weights:
            q = _ident(w)
            exprs.append(
                f"COUNT(*) FILTER (WHERE {q} IS NULL OR isnan({q}::DOUBLE) OR isinf({q}::DOUBLE))"
            )
            exprs.append(f"COUNT(*) FILTER (WHERE {q} < 0)")
            exprs.append(f"MAX(ABS({q}::DOUBLE))")
            exprs.append(f"SUM(ABS({q}::DOUBLE))")
        for var in cat.source_variables:
            exprs.append(f"COUNT(*) - COUNT({_ident(var.column)})")
        row = self._run(f"SELECT {', '.join(exprs)} FROM {src}", [], fetch="one")
        assert row is not None
        check_keys_and_weights(cat, weights, row)
        pos = 4 + 4 * len(weights)
        for var in cat.source_variables:
            if row[pos]:
                raise DataError(
                    f"column {var.column} ({var.name}) has {row[pos]} missing values; every "
                    "record needs a category (add a category such as 'not stated')"
                )
            pos += 1
        return int(row[0])

    def _check_codes(self, cat: Catalog, src: str) -> None:
        """Step 3 of validate: every variable's column holds only the catalog's codes."""
        for var in cat.source_variables:
            col = _ident(var.column)
            known = list(var.codes)
            unknown = self._run(
                f"SELECT DISTINCT {col} FROM {src} WHERE {col} NOT IN "
                f"(SELECT UNNEST(?::{_sql_type(var.code_type)}[])) LIMIT 10",
                [known],
            )
            if unknown:
                shown = ", ".join(repr(u[0]) for u in unknown)
                raise DataError(
                    f"column {var.column} holds code(s) {shown} that the catalog does not list "
                    f"for {var.name}"
                )

    def _check_magnitudes(self, cat: Catalog, src: str, types: dict[str, str]) -> None:
        """Continuous variables: numeric, finite, inside the bounds, summable exactly."""
        mags = list(cat.magnitudes.values())
        require_numeric(mags, types, numeric=(*_INT_TYPES, "DOUBLE", "FLOAT", "DECIMAL"))
        exprs = magnitude_check_sql(mags, _ident, cat.weight)
        row = self._run(f"SELECT {', '.join(exprs)} FROM {src}", [], fetch="one")
        assert row is not None
        magnitude_check_result(mags, row, cat.weight is not None)

    def _check_structural_zeros(self, cat: Catalog, src: str) -> None:
        for i, zero in enumerate(cat.structural_zeros):
            conds, params = [], []
            for name, codes in zero.codes.items():
                var = cat.variable(name)
                source = [s for c in codes for s in var.source_codes(c)]
                conds.append(f"{_ident(var.column)} IN ({', '.join('?' * len(source))})")
                params.extend(source)
            row = self._run(
                f"SELECT COUNT(*) FROM {src} WHERE {' AND '.join(conds)}", params, fetch="one"
            )
            if row and row[0]:
                names = ", ".join(zero.codes)
                raise DataError(
                    f"{row[0]} records fall in structural zero {i + 1} ({names}), which the "
                    "catalog declares impossible"
                )

    # -- tabulation --------------------------------------------------------------

    def build_query(self, dataset: Dataset, plan: TabulationPlan) -> tuple[str, list[Any]]:
        """Return the SQL text and bound parameters of the tabulation of ``plan``.

        The query is one ``GROUP BY GROUPING SETS`` over the inner cells,
        which a common table expression first aggregates from the records.
        Every aggregate is a sum (counts, key sums, weight sums), so the
        margins of the pre-aggregated cells equal those of the records,
        exactly for the integers; the records are scanned and grouped once
        instead of once per grouping set.
        """
        return tabulation_sql(plan, self._scan(dataset), _DIALECT)

    def select(
        self,
        dataset: Dataset,
        plan: TabulationPlan,
        seed: np.ndarray,
        k: np.ndarray,
        counts: np.ndarray | None = None,
    ) -> SelectedSums:
        """Sum the weights of the first ``k`` records of each inner cell in mix order.

        Records of each inner cell are ordered by :func:`mix32` of their key
        with the cell's ``seed`` (ties by key, then weights), inside the
        database; only per-cell sums come back. With ``counts``, only the
        records under each cell's mix threshold are ranked
        (:func:`~tablesafe.cells._selection.mix_thresholds`), so memory does not
        grow with the number of records; the choice is the same.

        Args:
            dataset: The dataset.
            plan: The tabulation plan (dimensions, universe, weight, replicates).
            seed: Per inner cell, the selection seed (0 .. 2**32 - 1).
            k: Per inner cell, how many records to choose (0 for none).
            counts: Per inner cell, its number of records in the universe.
        """
        self.ensure_valid(dataset)
        return select_records(plan, seed, k, counts, partial(self._select_sums, dataset, plan))

    def _select_sums(
        self,
        dataset: Dataset,
        plan: TabulationPlan,
        cells: np.ndarray,
        seed: np.ndarray,
        k: np.ndarray,
        threshold: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Cells, chosen counts and fixed-point sums (weight first) of one ranking query."""
        import pandas as pd

        sel = pd.DataFrame(selection_rows(plan, cells, seed, k, threshold))
        sql, params = ranking_sql(
            plan,
            self._scan(dataset),
            "ts_sel",
            _DIALECT,
            lambda q: mix32_staged_sql(f"({q})", "ts_key", "ts_seed"),
        )
        cur = self._con.cursor()
        try:
            # Copied into a temporary table (private to this cursor) rather than
            # joined as a pandas scan: DuckDB then knows the table's size and code
            # ranges and joins in a fraction of the time (10M records, 24 cells:
            # the join 170 ms to 30 ms of CPU).
            cur.register("ts_sel_frame", sel)
            cur.execute("CREATE TEMP TABLE ts_sel AS SELECT * FROM ts_sel_frame")
            cur.unregister("ts_sel_frame")
            cur.execute(sql, params)
            res = cur.fetchnumpy()
        finally:
            cur.close()
        values = [_values(res[c], int) for c in res if c.startswith("ts_v")]
        return ranked_sums(plan, _values(res["cell"], int), _values(res["ts_n"], int), values)

    def record_values(
        self, dataset: Dataset, plan: TabulationPlan, magnitude: MagnitudePlan
    ) -> RecordValues:
        """The universe's records with their value of ``magnitude`` (one query, no sorting)."""
        self.ensure_valid(dataset)
        sql, params = values_sql(plan, self._scan(dataset), _DIALECT, magnitude)
        res = self._run(sql, params, timeout=self._timeout, fetch="numpy")
        return record_values(
            plan,
            [_values(res[f"ts_d{i}"]) for i in range(len(plan.dimensions))],
            _values(res["ts_x"], float),
            _values(res["ts_w"], float) if magnitude.weight is not None else None,
            _values(res["ts_key"], int),
            np.stack([_values(res[f"ts_rw{i}"], int) for i in range(len(magnitude.replicates))])
            if magnitude.replicates
            else None,
        )

    def tabulate(self, dataset: Dataset, plan: TabulationPlan) -> CellAggregates:
        """Run the plan's ``GROUPING SETS`` query and assemble the cell arrays."""
        self.ensure_valid(dataset)
        sql, params = self.build_query(dataset, plan)
        res = self._run(sql, params, timeout=self._timeout, fetch="numpy")
        k = len(plan.dimensions)
        codes = [_values(res[d.column]) for d in plan.dimensions]
        reps = None
        if plan.replicates:
            reps = np.stack([_values(res[f"ts_r{i}"], int) for i in range(len(plan.replicates))])
        return assemble_grouped(
            plan,
            grouping=_values(res["ts_grouping"], int) if k else np.zeros(0, dtype=np.int64),
            codes=codes,
            n=_values(res["ts_n"], int),
            key_sum=_values(res["ts_key"], int),
            weight_sum=_values(res["ts_w"], int) if plan.weight else None,
            replicate_sums=reps,
            magnitudes=[
                (
                    _values(res[f"ts_m{i}"], int),
                    np.array(
                        [np.ma.filled(res[f"ts_t{i}_{j}"], 0.0) for j in range(1, m.top + 1)],
                        dtype=np.float64,
                    ),
                )
                for i, m in enumerate(plan.magnitudes)
            ],
        )


_INT_TYPES = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
)


_DIALECT = Dialect(
    ident=_ident,
    grouping="GROUPING",
    modulo=lambda expr, m: f"CAST({expr} % {m} AS BIGINT)",
)


def _interrupt(ref: weakref.ref[Any]) -> None:
    # A weak reference: the timer must not keep the cursor (and DuckDB's
    # memory) alive after the query has returned.
    cur = ref()
    if cur is not None:
        cur.interrupt()


def _sql_type(code_type: type) -> str:
    return "BIGINT" if code_type is int else "VARCHAR"


def _csv_types(cat: Catalog) -> str:
    # Explicit types keep text codes such as "01" from being read as numbers.
    items = [f"'{v.column}': '{_sql_type(v.code_type)}'" for v in cat.source_variables]
    items.append(f"'{cat.record_key}': 'BIGINT'")
    if cat.weight:
        items.append(f"'{cat.weight}': 'DOUBLE'")
    if cat.replicates:
        items += [f"'{r}': 'DOUBLE'" for r in cat.replicates.columns]
    items += [f"'{m.column}': 'DOUBLE'" for m in cat.magnitudes.values()]
    return "{" + ", ".join(items) + "}"


def _values(a: npt.ArrayLike, kind: type | None = None) -> np.ndarray:
    # fetchnumpy returns masked arrays where a column has NULLs (the
    # aggregated dimensions of a grouping set); their values are unused.
    # Copy: arrays fetched from DuckDB may share its memory, which must not
    # outlive the query.
    arr = np.array(np.ma.getdata(a), copy=True)
    if kind is int:
        return arr.astype(np.int64)
    if kind is float:
        return arr.astype(np.float64)
    return arr


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
