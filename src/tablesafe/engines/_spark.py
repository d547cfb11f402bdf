"""The Spark engine: the same tables from microdata that outgrow one machine.

PySpark is an optional extra (``pip install tablesafe[spark]``) and needs
Java 17 or newer. The scan and aggregation run on the cluster (or in local
mode); everything after :class:`~tablesafe.CellAggregates` runs on the
driver. The queries are those of the DuckDB engine in Spark SQL: one
``GROUP BY GROUPING SETS`` over the inner cells that a common table
expression aggregates from the records; category codes are bound as named
parameters. Record keys are summed as 64-bit integers and reduced modulo
2**32 (exact below 2**31 records per cell), so integer aggregates and cell
keys equal DuckDB's bit for bit; record selection for drop/add-up-to-q uses
the same integer mix (:mod:`tablesafe.cells._selection`) in a window function.
"""

from __future__ import annotations

import itertools
import shutil
import threading
from functools import partial
from typing import Any

import numpy as np

from tablesafe._errors import ConfigError, DataError
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
    MIX_MULTIPLIER,
    SelectedSums,
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
from tablesafe.engines._sql import Dialect, ranking_sql, tabulation_sql, values_sql

__all__ = ["SparkEngine"]

#: A ``pyspark.sql.SparkSession``: PySpark is optional, so its type is not imported.
SparkSession = Any

_M32 = 2**32

#: Spark SQL's integer types, as their simple strings.
_INT_TYPES = ("tinyint", "smallint", "int", "bigint")

#: The open engines on each session the builder gave (``getOrCreate`` gives a
#: process its one session): the last of them closed stops it, so that an
#: embedded worker closing its engine does not stop the server's session under
#: way (or a test's engine the session the suite shares).
_OPEN: dict[int, int] = {}
_OPEN_LOCK = threading.Lock()
#: Temporary views are the session's: each engine's get names no other engine uses.
_VIEW_NUMBERS = itertools.count()


def _ident(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise DataError(f"{name!r} is not a valid column name")
    return f"`{name}`"


_DIALECT = Dialect(
    ident=_ident,
    grouping="grouping_id",
    modulo=lambda expr, m: f"pmod({expr}, {m})",
    named=True,
    # Spark has no top-k aggregate: the k largest of the collected values.
    top_inner=lambda e, k: f"slice(sort_array(collect_list({e}), false), 1, {k})",
    top_item=lambda e, j: f"try_element_at({e}, {j})",
)


def mix32_spark(key: str, seed: str) -> str:
    """The keyed integer mix of :func:`tablesafe.cells._selection.mix32` in Spark SQL."""
    x0 = f"(CAST({key} AS BIGINT) ^ CAST({seed} AS BIGINT))"
    x1 = f"pmod((shiftright({x0}, 16) ^ {x0}) * {MIX_MULTIPLIER}, {_M32})"
    x2 = f"pmod((shiftright({x1}, 16) ^ {x1}) * {MIX_MULTIPLIER}, {_M32})"
    return f"(shiftright({x2}, 16) ^ {x2})"


class SparkEngine(Engine):
    """Tabulate with Apache Spark.

    Args:
        spark_session: An existing SparkSession (default: one is created).
        master: The master URL when creating one: ``local[*]``, ``spark://host:7077``,
            ``yarn``, ``k8s://...``.
        app_name: The application's name.
        config: Further Spark settings for the session created.

    Raises:
        ConfigError: if PySpark or Java is missing.
    """

    name = "spark"

    def __init__(
        self,
        spark_session: SparkSession | None = None,
        *,
        master: str = "local[*]",
        app_name: str = "tablesafe",
        config: dict[str, str] | None = None,
    ) -> None:
        try:
            from pyspark.sql import SparkSession
        except ImportError:
            raise ConfigError(
                "the Spark engine needs PySpark: pip install 'tablesafe[spark]'"
            ) from None
        if spark_session is None:
            if shutil.which("java") is None:
                raise ConfigError(
                    "the Spark engine needs Java 17 or newer on the PATH (e.g. Debian's "
                    "openjdk-17-jre-headless)"
                )
            builder = (
                SparkSession.builder.master(master)
                .appName(app_name)
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "4")
            )
            for k, v in (config or {}).items():
                builder = builder.config(k, v)
            with _OPEN_LOCK:
                spark_session = builder.getOrCreate()
                spark_session.sparkContext.setLogLevel("ERROR")
                _OPEN[id(spark_session)] = _OPEN.get(id(spark_session), 0) + 1
            self._shared = True
        else:
            self._shared = False
        self._closed = False
        self.spark = spark_session
        self._views: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        """Stop the SparkSession, or leave it to the engines still using it.

        A session given to the engine is stopped; the process's session (made
        by the builder) when no other engine of this process still uses it. A
        second close of the same engine does nothing.
        """
        with _OPEN_LOCK:
            if self._closed:
                return
            self._closed = True
            left = _OPEN.pop(id(self.spark), 1) - 1 if self._shared else 0
            if left > 0:
                _OPEN[id(self.spark)] = left
                return
        self.spark.stop()

    # -- sources --------------------------------------------------------------------

    def _view(self, dataset: Dataset) -> str:
        key = (str(dataset.path.resolve()), dataset.format)
        with self._lock:
            if key not in self._views:
                reader = self.spark.read
                if dataset.format == DataFormat.PARQUET:
                    frame = reader.parquet(str(dataset.path.resolve()))
                else:
                    # Every CSV column is read as text, then the catalog's columns are
                    # cast: text codes such as "01" stay text, as in the DuckDB engine.
                    frame = reader.csv(str(dataset.path.resolve()), header=True)
                    types = _csv_types(dataset.catalog)
                    frame = frame.selectExpr(
                        *[
                            f"CAST({_ident(c)} AS {types[c]}) AS {_ident(c)}"
                            if c in types
                            else _ident(c)
                            for c in frame.columns
                        ]
                    )
                view = f"ts_data_{next(_VIEW_NUMBERS)}"
                frame.createOrReplaceTempView(view)
                self._views[key] = view
            return self._views[key]

    def _run(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        try:
            return list(self.spark.sql(sql, args=params or None).collect())
        except Exception as exc:  # Spark raises its own exception classes
            name = type(exc).__name__
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else name
            raise DataError(f"Spark could not run the query ({name}): {first}") from None

    # -- validation --------------------------------------------------------------------

    def validate(self, dataset: Dataset) -> DatasetSummary:
        """Check the microdata against its catalog (as the DuckDB engine does).

        Raises:
            DataError: naming the first problem found.
        """
        cat = dataset.catalog
        view = self._view(dataset)
        schema = self._check_types(dataset, view)
        records = self._check_scan(cat, view, weight_columns(cat))
        if jackknife_needs_check(cat):
            row = self._run(f"SELECT {', '.join(jackknife_scale_sql(cat, _ident))} FROM {view}")
            check_jackknife_coefficient(cat, list(row[0]))
        self._check_codes(cat, view)
        self._check_structural_zeros(cat, view)
        if cat.magnitudes:
            self._check_magnitudes(cat, view, schema)
        for unit in cat.units.values():
            # A household's key, weight and variables: the same on each of its records.
            columns = [cat.variables[v].column for v in unit.variables]
            raise_unit_problem(
                unit, list(self._run(unit_check_sql(unit, columns, _ident, view))[0])
            )
        return DatasetSummary(records=int(records), columns=len(schema))

    def _check_types(self, dataset: Dataset, view: str) -> dict[str, str]:
        """Step 1 of validate: the catalog's columns are there, with types that fit its codes.

        Returns:
            Every column's Spark type (its simple string), by name.
        """
        cat = dataset.catalog
        schema = {f.name: f.dataType.simpleString() for f in self.spark.table(view).schema.fields}
        missing = [c for c in cat.columns if c not in schema]
        if missing:
            raise DataError(
                f"microdata file {dataset.path.name} lacks column(s) {', '.join(missing)} "
                f"named by the catalog{missing_key_hint(cat.record_key, missing)}; "
                f"it has: {', '.join(schema)}"
            )
        for var in cat.source_variables:
            t = schema[var.column]
            if var.code_type is int and t not in _INT_TYPES:
                raise DataError(
                    f"column {var.column} holds {t} values but the catalog gives {var.name} "
                    "integer codes"
                )
            if var.code_type is str and t != "string":
                raise DataError(
                    f"column {var.column} holds {t} values but the catalog gives {var.name} "
                    "text codes"
                )
        return schema

    def _check_scan(self, cat: Catalog, view: str, weights: list[str]) -> int:
        """Step 2 of validate: record keys, weights and missing categories, in one scan.

        Returns:
            The number of records.
        """
        k = _ident(cat.record_key)
        exprs = ["COUNT(*)", f"COUNT(*) - COUNT({k})", f"MIN({k})", f"MAX({k})"]
        for w in weights:
            q = _ident(w)
            exprs.append(
                f"SUM(CASE WHEN {q} IS NULL OR isnan(CAST({q} AS DOUBLE)) OR "
                f"abs(CAST({q} AS DOUBLE)) = double('infinity') THEN 1 ELSE 0 END)"
            )
            exprs.append(f"SUM(CASE WHEN {q} < 0 THEN 1 ELSE 0 END)")
            exprs.append(f"MAX(ABS(CAST({q} AS DOUBLE)))")
            exprs.append(f"SUM(ABS(CAST({q} AS DOUBLE)))")
        exprs += [f"COUNT(*) - COUNT({_ident(v.column)})" for v in cat.source_variables]
        row = self._run(f"SELECT {', '.join(exprs)} FROM {view}")[0]
        check_keys_and_weights(cat, weights, row)
        pos = 4 + 4 * len(weights)
        for var in cat.source_variables:
            if row[pos]:
                raise DataError(f"column {var.column} ({var.name}) has {row[pos]} missing values")
            pos += 1
        return int(row[0])

    def _check_codes(self, cat: Catalog, view: str) -> None:
        """Step 3 of validate: every variable's column holds only the catalog's codes.

        One pass for the distinct codes of every variable.
        """
        sets = self._run(
            "SELECT "
            + ", ".join(f"collect_set({_ident(v.column)})" for v in cat.source_variables)
            + f" FROM {view}"
        )[0]
        for var, found in zip(cat.source_variables, sets, strict=True):
            unknown = sorted(set(found) - set(var.codes), key=str)[:10]
            if unknown:
                shown = ", ".join(repr(u) for u in unknown)
                raise DataError(
                    f"column {var.column} holds code(s) {shown} that the catalog does not list "
                    f"for {var.name}"
                )

    def _check_structural_zeros(self, cat: Catalog, view: str) -> None:
        """Step 4 of validate: no record falls in a structural zero."""
        for i, zero in enumerate(cat.structural_zeros):
            conds: list[str] = []
            params: dict[str, Any] = {}
            for name, codes in zero.codes.items():
                var = cat.variable(name)
                source = [s for c in codes for s in var.source_codes(c)]
                names = [f"z{i}_{len(params) + j}" for j in range(len(source))]
                params.update(dict(zip(names, source, strict=True)))
                conds.append(f"{_ident(var.column)} IN ({', '.join(':' + n for n in names)})")
            n = self._run(f"SELECT COUNT(*) FROM {view} WHERE {' AND '.join(conds)}", params)[0][0]
            if n:
                raise DataError(
                    f"{n} records fall in structural zero {i + 1} ({', '.join(zero.codes)}), "
                    "which the catalog declares impossible"
                )

    def _check_magnitudes(self, cat: Catalog, view: str, schema: dict[str, str]) -> None:
        """Step 5 of validate: continuous variables numeric, finite, in bounds, summable."""
        mags = list(cat.magnitudes.values())
        require_numeric(mags, schema, numeric=(*_INT_TYPES, "double", "float", "decimal"))
        exprs = magnitude_check_sql(mags, _ident, cat.weight)
        check = self._run(f"SELECT {', '.join(exprs)} FROM {view}")[0]
        magnitude_check_result(mags, list(check), cat.weight is not None)

    # -- tabulation --------------------------------------------------------------------

    def build_query(self, dataset: Dataset, plan: TabulationPlan) -> tuple[str, dict[str, Any]]:
        """The Spark SQL text and named parameters of the tabulation of ``plan``."""
        sql, params = tabulation_sql(plan, self._view(dataset), _DIALECT)
        return sql, dict(params)

    def tabulate(self, dataset: Dataset, plan: TabulationPlan) -> CellAggregates:
        """Run the plan's ``GROUPING SETS`` query and assemble the cell arrays."""
        self.ensure_valid(dataset)
        sql, params = self.build_query(dataset, plan)
        rows = self._run(sql, params)
        k = len(plan.dimensions)
        width = (
            1
            + k
            + 2
            + (1 if plan.weight is not None else 0)
            + len(plan.replicates)
            + sum(1 + m.top for m in plan.magnitudes)
        )
        cols: list[tuple[Any, ...]] = (
            list(zip(*rows, strict=True)) if rows else [() for _ in range(width)]
        )
        g = np.array(cols[0], dtype=np.int64)
        codes = [np.array(cols[1 + i], dtype=object) for i in range(k)]
        pos = 1 + k
        n = np.array(cols[pos], dtype=np.int64)
        keys = np.array(cols[pos + 1], dtype=np.int64)
        pos += 2
        w = None
        if plan.weight is not None:
            w = np.array(cols[pos], dtype=np.int64)
            pos += 1
        reps = None
        if plan.replicates:
            reps = np.array([cols[pos + i] for i in range(len(plan.replicates))], dtype=np.int64)
        pos += len(plan.replicates)
        mags = []
        for m in plan.magnitudes:
            tops = [[0.0 if v is None else v for v in cols[pos + 1 + j]] for j in range(m.top)]
            mags.append((np.array(cols[pos], dtype=np.int64), np.array(tops, dtype=np.float64)))
            pos += 1 + m.top
        return assemble_grouped(plan, g, codes, n, keys, w, reps, mags)

    def record_values(
        self, dataset: Dataset, plan: TabulationPlan, magnitude: MagnitudePlan
    ) -> RecordValues:
        """The universe's records with their value of ``magnitude``, collected on the driver."""
        self.ensure_valid(dataset)
        sql, params = values_sql(plan, self._view(dataset), _DIALECT, magnitude)
        rows = self._run(sql, dict(params))
        k = len(plan.dimensions)
        first = k + 2 + (1 if magnitude.weight is not None else 0)
        width = first + len(magnitude.replicates)
        cols: list[tuple[Any, ...]] = (
            list(zip(*rows, strict=True)) if rows else [() for _ in range(width)]
        )
        return record_values(
            plan,
            [np.array(cols[i], dtype=object) for i in range(k)],
            np.array(cols[k + 1], dtype=np.float64),
            np.array(cols[k + 2], dtype=np.float64) if magnitude.weight is not None else None,
            np.array(cols[k], dtype=np.int64),
            np.array(cols[first:width], dtype=np.int64) if magnitude.replicates else None,
        )

    def select(
        self,
        dataset: Dataset,
        plan: TabulationPlan,
        seed: np.ndarray,
        k: np.ndarray,
        counts: np.ndarray | None = None,
    ) -> SelectedSums:
        """Sum the weights of the first ``k`` records of each inner cell in mix order.

        As the DuckDB engine: ties of mix and key broken by the fixed-point
        weights; with ``counts``, only the records under each cell's mix
        threshold are ranked (:func:`~tablesafe.cells._selection.mix_thresholds`)
        and short cells are ranked again in full, so the choice is the same.
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
        view = self._view(dataset)
        dims = plan.dimensions
        rows = selection_rows(plan, cells, seed, k, threshold)
        names = [*[f"c{i}" for i in range(len(dims))], "cell", "seed", "k", "thr"]
        columns = [np.asarray(rows[c]).tolist() for c in names]
        sel = self.spark.createDataFrame(list(zip(*columns, strict=True)), schema=names)
        sel_view = f"ts_sel_{threading.get_ident()}"
        sel.createOrReplaceTempView(sel_view)
        sql, params = ranking_sql(
            plan,
            view,
            sel_view,
            _DIALECT,
            lambda q: f"SELECT *, {mix32_spark('ts_key', 'ts_seed')} AS ts_mix FROM ({q}) AS m",
        )
        result = self._run(sql, params)
        columns = list(zip(*result, strict=True)) if result else [[]] * (3 + len(plan.replicates))
        width = len(plan.replicates) + (1 if plan.weight else 0)
        return ranked_sums(plan, columns[0], columns[1], list(columns[2 : 2 + width]))


def _csv_types(cat: Catalog) -> dict[str, str]:
    types = {v.column: "BIGINT" if v.code_type is int else "STRING" for v in cat.source_variables}
    types[cat.record_key] = "BIGINT"
    if cat.weight:
        types[cat.weight] = "DOUBLE"
    if cat.replicates:
        types.update(dict.fromkeys(cat.replicates.columns, "DOUBLE"))
    types.update({m.column: "DOUBLE" for m in cat.magnitudes.values()})
    return types
