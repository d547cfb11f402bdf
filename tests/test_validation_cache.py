"""Validation is remembered per file version, on disk, across engines and processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from tablesafe._errors import DataError
from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import DuckDBEngine, MemoryEngine
from tablesafe.engines._base import VALIDATION_FILE
from tsdata import random_frame


class CountingEngine(DuckDBEngine):
    """The DuckDB engine, counting how often it really validates."""

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.validations = 0

    def validate(self, dataset):  # type: ignore[no-untyped-def]
        self.validations += 1
        return super().validate(dataset)


def _tabulate(engine, dataset: Dataset) -> None:
    plan = TableRequest(dimensions=("A", "B")).bind(dataset.catalog)
    engine.tabulate(dataset, plan)


def test_second_engine_on_an_unchanged_file_does_not_validate(make_dataset):
    dataset = make_dataset(random_frame(500, seed=1))
    first, second = CountingEngine(), CountingEngine()
    _tabulate(first, dataset)
    _tabulate(first, dataset)
    assert first.validations == 1
    assert (dataset.path.parent / VALIDATION_FILE).exists()
    _tabulate(second, Dataset.open(dataset.path.parent))
    assert second.validations == 0


def test_a_changed_file_or_catalog_is_validated_again(make_dataset):
    dataset = make_dataset(random_frame(500, seed=2))
    _tabulate(CountingEngine(), dataset)
    # Same size and modification time, other content: the hash of the footer differs.
    st = dataset.path.stat()
    frame = random_frame(500, seed=3)
    frame.to_parquet(dataset.path, index=False)
    os.utime(dataset.path, ns=(st.st_atime_ns, st.st_mtime_ns))
    engine = CountingEngine()
    _tabulate(engine, dataset)
    assert engine.validations == 1
    # A different catalog for the same file.
    changed = replace(dataset, catalog=replace(dataset.catalog, title="another title"))
    engine = CountingEngine()
    _tabulate(engine, changed)
    assert engine.validations == 1


def test_a_file_made_invalid_is_refused_even_after_a_valid_version(make_dataset):
    frame = random_frame(500, seed=4)
    dataset = make_dataset(frame)
    _tabulate(CountingEngine(), dataset)
    frame.loc[0, "A"] = 99  # a code the catalog does not list
    frame.to_parquet(dataset.path, index=False)
    for engine in (CountingEngine(), MemoryEngine()):
        with pytest.raises(DataError, match="99"):
            _tabulate(engine, Dataset.open(dataset.path.parent))


def test_a_corrupt_store_is_ignored(make_dataset):
    dataset = make_dataset(random_frame(300, seed=5))
    (dataset.path.parent / VALIDATION_FILE).write_text("{not json")
    engine = CountingEngine()
    _tabulate(engine, dataset)
    assert engine.validations == 1
    assert isinstance(json.loads((dataset.path.parent / VALIDATION_FILE).read_text()), list)


def test_the_cli_validates_once_per_file_version(make_dataset):
    dataset = make_dataset(random_frame(300, seed=6))
    code = (
        "import sys\n"
        "from tablesafe.catalog._dataset import Dataset\n"
        "from tablesafe._request import TableRequest\n"
        "from tablesafe.engines import DuckDBEngine\n"
        "calls = []\n"
        "class E(DuckDBEngine):\n"
        "    def validate(self, d):\n"
        "        calls.append(1)\n"
        "        return super().validate(d)\n"
        "ds = Dataset.open(sys.argv[1])\n"
        "E().tabulate(ds, TableRequest(dimensions=('A',)).bind(ds.catalog))\n"
        "print(len(calls))\n"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", code, str(dataset.path.parent)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for _ in range(2)
    ]
    assert runs == ["1", "0"]
