"""The Spark engine gives the DuckDB engine's tables bit for bit (Spark local mode)."""

from __future__ import annotations

import numpy as np
import pytest

from tablesafe._builder import Protection, TableBuilder
from tablesafe._errors import DataError
from tablesafe._request import TableRequest
from tablesafe.engines import DuckDBEngine
from tablesafe.mechanisms import drop_add_records
from test_builder import SECRET, Shift
from test_tabulate import REQUESTS
from tsdata import random_frame

pytestmark = pytest.mark.system


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: "x".join(r.dimensions))
def test_spark_equals_duckdb(spark, random_data, request_):
    dataset, _ = random_data
    req = TableRequest(
        request_.dimensions, universe=request_.universe, margins=request_.margins, replicates=True
    )
    plan = req.bind(dataset.catalog)
    a = spark.tabulate(dataset, plan)
    b = DuckDBEngine().tabulate(dataset, plan)
    np.testing.assert_array_equal(a.computed, b.computed)
    np.testing.assert_array_equal(a.n, b.n)
    np.testing.assert_array_equal(a.cell_key, b.cell_key)
    # Fixed-point weight sums: the same bits in both engines.
    np.testing.assert_array_equal(a.weight_sum, b.weight_sum)
    np.testing.assert_array_equal(a.replicate_sums, b.replicate_sums)


def test_cubes_from_spark_equal_duckdb(spark, random_data):
    """The cube cache over Spark: tables derived from Spark's cubes are DuckDB's tables."""
    from tablesafe.engines import CubeCache

    dataset, _ = random_data
    cached = CubeCache(spark)
    for request_ in REQUESTS:
        req = TableRequest(
            request_.dimensions,
            universe=request_.universe,
            margins=request_.margins,
            replicates=True,
        )
        plan = req.bind(dataset.catalog)
        a = cached.tabulate(dataset, plan)
        b = DuckDBEngine().tabulate(dataset, plan)
        np.testing.assert_array_equal(a.n, b.n)
        np.testing.assert_array_equal(a.cell_key, b.cell_key)
        assert a.weight_sum.tobytes() == b.weight_sum.tobytes()
        assert a.replicate_sums.tobytes() == b.replicate_sums.tobytes()
    assert cached.hits > 0


def test_spark_reads_csv(spark, random_data, make_dataset):
    dataset, frame = random_data
    csv = make_dataset(frame, fmt="csv")
    plan = TableRequest(("B", "CG"), universe={"A": [1, 3]}).bind(csv.catalog)
    a = spark.tabulate(csv, plan)
    b = DuckDBEngine().tabulate(dataset, plan)
    np.testing.assert_array_equal(a.n, b.n)
    np.testing.assert_array_equal(a.cell_key, b.cell_key)


def test_engines_on_one_session_keep_their_data_and_leave_it_open(spark, random_data, make_dataset):
    """Engines made in one process share its SparkSession: each reads its own datasets (their
    views do not replace each other's) and closing them leaves the session to the others."""
    from tablesafe.engines import SparkEngine

    dataset, _ = random_data
    other = make_dataset(random_frame(500, seed=3))
    plan = TableRequest(("A", "B")).bind(dataset.catalog)
    first, second = SparkEngine(master="local[2]"), SparkEngine(master="local[2]")
    assert first.spark is second.spark is spark.spark
    ours = first.tabulate(dataset, plan)
    theirs = second.tabulate(other, plan)
    again = first.tabulate(dataset, plan)
    first.close()
    first.close()  # a second close does nothing
    second.close()
    np.testing.assert_array_equal(ours.n, again.n)
    np.testing.assert_array_equal(ours.n, DuckDBEngine().tabulate(dataset, plan).n)
    np.testing.assert_array_equal(theirs.n, DuckDBEngine().tabulate(other, plan).n)
    assert int(ours.n.max()) != int(theirs.n.max())  # two datasets of other sizes
    # The suite's engine still reads: its session was not stopped.
    np.testing.assert_array_equal(spark.tabulate(dataset, plan).n, ours.n)


def test_spark_refuses_bad_microdata(spark, make_dataset):
    frame = random_frame(100, seed=2)
    bad = make_dataset(frame.assign(A=frame["A"].where(frame.index != 3, 9)))
    with pytest.raises(DataError, match="code"):
        spark.validate(bad)
    neg = make_dataset(frame.assign(W=frame["W"].where(frame.index != 4, -1.0)))
    with pytest.raises(DataError, match="negative"):
        spark.validate(neg)


def test_spark_chooses_the_same_records(spark, random_data):
    dataset, _ = random_data
    plan = TableRequest(("A", "CG"), universe={"D": [1]}, replicates=True).bind(dataset.catalog)
    rng = np.random.default_rng(2)
    seed = rng.integers(0, 2**32, (4, 3))
    k = rng.integers(0, 6, (4, 3))
    a = spark.select(dataset, plan, seed, k)
    b = DuckDBEngine().select(dataset, plan, seed, k)
    np.testing.assert_array_equal(a.n, b.n)
    # Fixed-point sums: the same bits in both engines.
    np.testing.assert_array_equal(a.weight_sum, b.weight_sum)
    np.testing.assert_array_equal(a.replicate_sums, b.replicate_sums)
    # With mix thresholds (counts inflated: nearly every cell short, ranked again in full).
    n = DuckDBEngine().tabulate(dataset, plan).n[:-1, :-1]
    c = spark.select(dataset, plan, seed, k, counts=n * 50)
    np.testing.assert_array_equal(c.n, b.n)
    np.testing.assert_array_equal(c.weight_sum, b.weight_sum)
    np.testing.assert_array_equal(c.replicate_sums, b.replicate_sums)


@pytest.mark.parametrize(
    "protection",
    [
        Protection(Shift(), additivity="independent"),
        Protection(Shift(), additivity="ipf", seeds="dynamic", secret=SECRET),
        Protection(drop_add_records(rate=0.05), seeds="dynamic", secret=SECRET),
    ],
    ids=["independent", "ipf-dynamic", "records"],
)
def test_same_protected_table_from_both_engines(spark, random_data, protection):
    dataset, _ = random_data
    req = TableRequest(("A", "B"), universe={"E": [10, 20]}, replicates=True)
    a = TableBuilder(dataset, protection, engine=spark).build(req)
    b = TableBuilder(dataset, protection, engine=DuckDBEngine()).build(req)
    np.testing.assert_array_equal(a.counts, b.counts)
    np.testing.assert_allclose(a.weighted, b.weighted, rtol=1e-9)
    np.testing.assert_allclose(a.se, b.se, rtol=1e-6)


def test_missing_java_is_a_clear_error(monkeypatch):
    from tablesafe._errors import ConfigError
    from tablesafe.engines import _spark

    monkeypatch.setattr(_spark.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="Java 17"):
        _spark.SparkEngine(master="local[1]")


def test_cli_engine_spark(spark, demo_dir):
    from click.testing import CliRunner

    from tablesafe._cli import get_app

    result = CliRunner().invoke(
        get_app(),
        [
            "table",
            str(demo_dir),
            "--rows",
            "SEX",
            "--method",
            "none",
            "--engine",
            "spark",
            "--spark-master",
            "local[1]",
            "--format",
            "csv",
            "--statistic",
            "count",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "_T" in result.output


@pytest.mark.parametrize("method", ["none", "ckm", "dp", "pram", "q", "q-records"])
def test_spark_publishes_the_same_bytes(spark, demo_dir, method, monkeypatch):
    """Counts and weighted figures, CSV and JSON: Spark's bytes are DuckDB's."""
    from tablesafe._cli._methods import protection_from_options
    from tablesafe.catalog._dataset import Dataset

    monkeypatch.setenv("TABLESAFE_SECRET", "determinism-secret-0123456789abcdef")
    dataset = Dataset.open(demo_dir, name="demo")
    request = TableRequest(("AGEGRP", "REGION", "SEX"), replicates=True)
    prot = protection_from_options(method, seeds="dynamic" if method == "q-records" else "cellkey")
    a = TableBuilder(dataset, prot, engine=spark).build(request)
    b = TableBuilder(dataset, prot, engine=DuckDBEngine()).build(request)
    assert a.to_csv() == b.to_csv()
    assert a.to_json() == b.to_json()
