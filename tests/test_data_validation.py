"""Microdata that does not match its catalog is refused with a clear error."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tablesafe._errors import CatalogError, DataError, FormatError
from tablesafe._request import TableRequest
from tablesafe.engines import DuckDBEngine, MemoryEngine
from tsdata import RANDOM_CATALOG, random_frame

ENGINES = [DuckDBEngine, MemoryEngine]


@pytest.fixture(scope="module")
def frame():
    return random_frame(200, seed=5)


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda f: f.drop(columns=["B"]), "lacks column"),
        (lambda f: f.assign(A=f["A"].where(f.index != 3, 9)), "code"),
        (lambda f: f.assign(W=f["W"].where(f.index != 7, -1.0)), "negative"),
        (lambda f: f.assign(W=f["W"].where(f.index != 7, np.nan)), "NaN"),
        (lambda f: f.assign(RKEY=f["RKEY"].astype(np.int64).where(f.index != 1, -5)), "2\\*\\*32"),
        (lambda f: f.assign(B=f["B"].where(f.index != 2, None)), "missing values"),
    ],
)
def test_bad_microdata_is_refused(make_dataset, frame, engine, mutate, message):
    ds = make_dataset(mutate(frame.copy()))
    with pytest.raises(DataError, match=message):
        engine().validate(ds)
    # Tabulating validates first, so no table comes out of bad data.
    with pytest.raises(DataError):
        engine().tabulate(ds, TableRequest(("D",)).bind(ds.catalog))


def test_wrong_code_type_is_refused(make_dataset, frame):
    ds = make_dataset(frame.assign(A=frame["A"].astype(str)))
    with pytest.raises(DataError, match="integer codes"):
        DuckDBEngine().validate(ds)


def test_records_in_a_structural_zero_are_refused(make_dataset, frame):
    raw = copy.deepcopy(RANDOM_CATALOG)
    raw["structural_zeros"] = [{"A": [1], "D": [2]}]
    ds = make_dataset(frame, catalog=raw)
    with pytest.raises(DataError, match="structural zero 1"):
        DuckDBEngine().validate(ds)
    ok = make_dataset(frame[~((frame["A"] == 1) & (frame["D"] == 2))], catalog=raw)
    assert DuckDBEngine().validate(ok).records == int(
        (~((frame["A"] == 1) & (frame["D"] == 2))).sum()
    )


def test_dataset_folder_without_catalog(tmp_path):
    from tablesafe.catalog._dataset import Dataset

    with pytest.raises(CatalogError, match="needs a catalog.toml"):
        Dataset.open(tmp_path)


def test_dataset_without_microdata_file(tmp_path):
    from tablesafe.catalog._catalog import Catalog
    from tablesafe.catalog._dataset import Dataset

    (tmp_path / "catalog.toml").write_text(Catalog.from_dict(RANDOM_CATALOG).to_toml())
    with pytest.raises(DataError, match="neither microdata.parquet nor microdata.csv"):
        Dataset.open(tmp_path)


def test_malformed_csv_microdata(make_dataset, frame, tmp_path):
    ds = make_dataset(frame, fmt="csv")
    ds.path.write_text("A,B\n1,x,extra,fields\n\x00\x01")
    with pytest.raises((DataError, FormatError)):
        DuckDBEngine().validate(ds)
