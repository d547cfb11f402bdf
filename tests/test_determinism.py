"""Same request, same bytes: counts and weighted figures, for every method.

Published CSV and JSON are byte-identical across repeated runs, DuckDB with
one and two threads, a shuffled copy of the microdata, and the DuckDB and
memory engines (Spark: tests/test_spark_engine.py). Weights are summed in
fixed point (tablesafe.cells._fixed), so no float summation order reaches a
published figure.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tablesafe._builder import TableBuilder
from tablesafe._cli._methods import protection_from_options
from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import DuckDBEngine, MemoryEngine

METHODS = ["none", "ckm", "dp", "pram", "q", "q-records"]
REQUESTS = [
    TableRequest(("AGEGRP", "REGION", "SEX"), replicates=True),
    TableRequest(("EDUC", "TENURE"), universe={"REGION": [1, 2]}, statistic="weighted"),
]
SECRET = "determinism-secret-0123456789abcdef"


@pytest.fixture(scope="module")
def shuffled_demo(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("shuffled") / "demo"
    shutil.copytree(demo_dir, target)
    path = next(target.glob("*.parquet"))
    data = pq.read_table(path)
    import numpy as np

    order = np.random.default_rng(5).permutation(data.num_rows)
    # Small row groups as well: another scan order for DuckDB's threads.
    pq.write_table(data.take(order), path, row_group_size=997)
    return target


def published(dataset: Dataset, method: str, engine, request: TableRequest) -> tuple[str, str]:
    prot = protection_from_options(
        method, seeds="dynamic" if method == "q-records" else "cellkey", additivity="aggregate"
    )
    table = TableBuilder(dataset, prot, engine=engine).build(request)
    return table.to_csv(), table.to_json()


@pytest.mark.parametrize("method", METHODS)
def test_same_request_same_bytes(method, demo_dir, shuffled_demo, monkeypatch):
    monkeypatch.setenv("TABLESAFE_SECRET", SECRET)
    original = Dataset.open(demo_dir, name="demo")
    shuffled = Dataset.open(shuffled_demo, name="demo")
    for request in REQUESTS:
        reference = published(original, method, DuckDBEngine(), request)
        header = next(line for line in reference[0].splitlines() if not line.startswith("#"))
        assert "weighted" in header
        others = {
            "again": published(original, method, DuckDBEngine(), request),
            "1 thread": published(original, method, DuckDBEngine(threads=1), request),
            "2 threads": published(shuffled, method, DuckDBEngine(threads=2), request),
            "shuffled": published(shuffled, method, DuckDBEngine(), request),
            "memory": published(original, method, MemoryEngine(), request),
            "memory, shuffled": published(shuffled, method, MemoryEngine(), request),
        }
        for name, other in others.items():
            assert other[0] == reference[0], f"{method}: CSV differs ({name})"
            assert other[1] == reference[1], f"{method}: JSON differs ({name})"


def test_weighted_figures_are_whole_units_by_default(demo_dir, monkeypatch):
    monkeypatch.setenv("TABLESAFE_SECRET", SECRET)
    csv, _ = published(Dataset.open(demo_dir), "ckm", DuckDBEngine(), REQUESTS[0])
    header, *rows = csv.splitlines()
    cols = header.split(",")
    for row in rows:
        cells = dict(zip(cols, row.split(","), strict=True))
        for name in ("weighted", "se", "ci_low", "ci_high"):
            assert cells[name] == "" or cells[name].lstrip("-").isdigit(), (name, row)


def test_fixed_point_rounding_is_the_same_in_numpy_and_duckdb():
    """to_fixed and fixed_sql round w * 2**16 half away from zero, exactly, alike."""
    from fractions import Fraction

    import duckdb
    import numpy as np

    from tablesafe.cells._fixed import fixed_sql, to_fixed

    edges = [0.49999999999999994, 0.5, 1.5, 2.5, -0.5, -2.5, -0.49999999999999994]
    values = [v / 65536 for v in edges] + list(
        np.random.default_rng(5).lognormal(3.0, 2.0, 2000) * np.array([1, -1] * 1000)
    )

    def exact(w: float) -> int:
        x = Fraction(w) * 65536
        whole = int(x)  # truncates toward zero
        return whole + (
            1 if x - whole >= Fraction(1, 2) else -1 if whole - x >= Fraction(1, 2) else 0
        )

    expected = [exact(v) for v in values]
    assert to_fixed(values).tolist() == expected
    got = duckdb.sql(
        f"SELECT CAST({fixed_sql('w')} AS BIGINT) FROM (SELECT UNNEST(?) AS w, "
        "generate_subscripts(?, 1) AS i) ORDER BY i",
        params=[values, values],
    ).fetchall()
    assert [g[0] for g in got] == expected
