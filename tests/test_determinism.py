"""Same request, same bytes: counts and weighted figures, for every method.

Published CSV and JSON are byte-identical across repeated runs, DuckDB with
one and two threads, a shuffled copy of the microdata, and the DuckDB and
memory engines (Spark: tests/test_spark_engine.py). Weights are summed in
fixed point (tablesafe._fixed), so no float summation order reaches a
published figure.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tablesafe._builder import TableBuilder
from tablesafe._cli._methods import protection_from_options
from tablesafe._dataset import Dataset
from tablesafe._request import TableRequest
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
        assert "weighted" in reference[0].splitlines()[0]
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
