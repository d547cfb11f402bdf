"""Continuous variables in the catalog and their validation in every engine (issue 17)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tablesafe import Catalog, CatalogError, DataError, RequestError
from tablesafe.catalog._dataset import Dataset
from tablesafe.catalog._magnitudes import magnitude_fixed, magnitude_fixed_sql
from tablesafe.engines import DuckDBEngine, MemoryEngine
from tsdata import RANDOM_CATALOG, random_frame

INCOME = {"name": "INC", "label": "Income", "unit": "EUR", "lower": 0, "upper": 1_000_000}
PROFIT = {"name": "PROFIT", "lower": -5000, "upper": 5000, "negative": True}


def catalog_with(*mags: dict[str, Any]) -> dict[str, Any]:
    raw = copy.deepcopy(RANDOM_CATALOG)
    raw["magnitudes"] = [dict(m) for m in mags]
    return raw


def frame_with(n: int = 400, seed: int = 3) -> pd.DataFrame:
    frame = random_frame(n, seed)
    rng = np.random.default_rng(seed)
    frame["INC"] = np.round(rng.lognormal(10, 1, n))
    frame["PROFIT"] = np.round(rng.normal(0, 800, n), 2)
    return frame


def test_parse_round_trip() -> None:
    cat = Catalog.from_dict(catalog_with(INCOME, PROFIT))
    inc, profit = cat.magnitude("INC"), cat.magnitude("PROFIT")
    assert (inc.unit, inc.lower, inc.upper, inc.negative) == ("EUR", 0.0, 1e6, False)
    assert profit.negative and profit.bound == 5000
    again = Catalog.from_dict(__import__("tomllib").loads(cat.to_toml()))
    assert again.magnitudes == cat.magnitudes


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "INC", "lower": 0}, "no upper bound"),
        ({"name": "INC", "upper": 10}, "no lower bound"),
        ({"name": "INC", "lower": 5, "upper": 5}, "must be below upper"),
        ({"name": "INC", "lower": -1, "upper": 5}, "negative = false"),
        ({"name": "INC", "lower": 0, "upper": 5, "negative": True}, "lower bound below 0"),
        ({"name": "INC", "lower": "0", "upper": 5}, "must be a number"),
        ({"name": "INC", "lower": 0, "upper": float("inf")}, "finite"),
        ({"name": "A", "lower": 0, "upper": 5}, "already used"),
        ({"name": "INC", "lower": 0, "upper": 5, "max": 3}, "unknown key"),
        ({"name": "INC", "column": "W", "lower": 0, "upper": 5}, "record key or a weight"),
    ],
)
def test_bad_entries(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        Catalog.from_dict(catalog_with(entry))


def test_lookup_errors() -> None:
    cat = Catalog.from_dict(catalog_with(INCOME))
    with pytest.raises(RequestError, match="categorical variable, not a continuous one"):
        cat.magnitude("A")
    with pytest.raises(RequestError, match="available for: INC"):
        cat.magnitude("NOPE")


def test_fixed_point_same_bits_in_duckdb() -> None:
    import duckdb

    rng = np.random.default_rng(5)
    x = np.concatenate(
        [rng.normal(0, 1e5, 2000), np.arange(-40, 40) / 32 + 1 / 32, [0.03125, -0.03125]]
    )
    con = duckdb.connect()
    con.register("t", pd.DataFrame({"x": x}))
    got = con.sql(f"SELECT CAST({magnitude_fixed_sql('x')} AS BIGINT) FROM t").fetchnumpy()
    assert np.array_equal(next(iter(got.values())), magnitude_fixed(x))


ENGINES: list[Callable[[], Any]] = [DuckDBEngine, MemoryEngine]


@pytest.mark.parametrize("engine", ENGINES, ids=["duckdb", "memory"])
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda f: f.assign(INC=f.INC.where(f.index != 3, np.nan)), "missing, NaN or infinite"),
        (lambda f: f.assign(INC=f.INC.where(f.index != 3, np.inf)), "missing, NaN or infinite"),
        (lambda f: f.assign(INC=f.INC.where(f.index != 3, 2e6)), "1 above its upper bound"),
        (lambda f: f.assign(INC=f.INC.where(f.index != 3, -1.0)), "1 values below"),
        (lambda f: f.drop(columns=["INC"]), "lacks column INC"),
        (lambda f: f.assign(INC="x"), "must be numeric"),
    ],
    ids=["nan", "inf", "above", "below", "missing", "text"],
)
def test_validation(
    engine: Callable[[], Any],
    change: Callable[[pd.DataFrame], pd.DataFrame],
    message: str,
    make_dataset: Callable[..., Dataset],
) -> None:
    ds = make_dataset(change(frame_with()), catalog_with(INCOME, PROFIT))
    with pytest.raises(DataError, match=message):
        engine().validate(ds)


@pytest.mark.parametrize("engine", ENGINES, ids=["duckdb", "memory"])
def test_valid_data_and_csv(
    engine: Callable[[], Any], make_dataset: Callable[..., Dataset]
) -> None:
    ds = make_dataset(frame_with(), catalog_with(INCOME, PROFIT), fmt="csv")
    assert engine().validate(ds).records == 400


def test_range_of_exact_sums(make_dataset: Callable[..., Dataset]) -> None:
    frame = frame_with()
    frame["INC"] = 9.0e11  # 400 records: the total exceeds 2**48
    ds = make_dataset(frame, catalog_with({**INCOME, "upper": 1e12}))
    for engine in (DuckDBEngine(), MemoryEngine()):
        with pytest.raises(DataError, match="2\\*\\*48"):
            engine.validate(ds)


def test_demo_has_income_and_hours(demo_dir: Any) -> None:
    ds = Dataset.open(demo_dir)
    assert set(ds.catalog.magnitudes) == {"INCOME", "HOURS"}
    DuckDBEngine().validate(ds)
    df = pd.read_parquet(ds.path, columns=["INCOME", "HOURS", "EMPSTAT"])
    income = df.INCOME.to_numpy()
    assert 0.15 < (income == 0).mean() < 0.5  # zeros
    assert income.max() > 20 * np.median(income[income > 0])  # a few very large values
    assert (df.HOURS[df.EMPSTAT != 1] == 0).all() and df.HOURS.max() <= 99
