"""Counting units (issue 29): tables of persons or of the households they live in.

A person file carries each household's id, record key and weight. A table
of households counts each household once, by its own variables: its counts
must be the distinct households of each cell (brute force), its weighted
figures the sums of their household weights, and its noise the household's
record key's: a household table is the person table of a file holding one
record per household with the household's key and weight, byte for byte.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

import tablesafe as ts
from tablesafe._errors import CatalogError, DataError, RequestError
from tablesafe.catalog._catalog import Catalog
from tablesafe.engines import CubeCache, DuckDBEngine, MemoryEngine
from tablesafe.mechanisms import destatis
from tsdata import RANDOM_CATALOG

SECRET = b"units-test-secret-0123456789abcdef"
HOUSEHOLD = {"unit": "household", "id": "HHID", "record_key": "HHKEY", "weight": "HHW"}


# The replicate weights of _persons are no jackknife's (W times 1, 1.1, 1.2, 1.3): their
# coefficient is declared, so that validation does not take them for a stratified one.
DECLARED = {
    **RANDOM_CATALOG,
    "dataset": {**RANDOM_CATALOG["dataset"], "replicate_coefficient": 0.75},
}


def _catalog(variables: list[str] | None = None) -> dict[str, object]:
    catalog = dict(DECLARED)
    catalog["units"] = [{**HOUSEHOLD, "variables": variables or ["A", "D"]}]
    return catalog


def _persons(households: int, seed: int) -> pd.DataFrame:
    """Persons in households: A and D are the household's, the rest each person's."""
    rng = np.random.default_rng(seed)
    size = rng.integers(1, 6, households)
    n = int(size.sum())
    frame = pd.DataFrame(
        {
            "A": np.repeat(rng.choice([1, 2, 3], households, p=[0.6, 0.3, 0.1]), size),
            "B": rng.choice(list("xyzw"), n),
            "C": rng.integers(0, 10, n),
            "D": np.repeat(rng.integers(1, 3, households), size),
            "E": rng.choice([10, 20, 30], n),
            "W": rng.uniform(5, 50, n),
            "RKEY": rng.integers(0, 2**32, n, dtype=np.uint32),
            "HHID": np.repeat(rng.permutation(households) + 1000, size),
            "HHKEY": np.repeat(rng.integers(0, 2**32, households, dtype=np.uint32), size),
            "HHW": np.repeat(rng.uniform(20, 200, households), size),
        }
    )
    for r in range(4):
        frame[f"R{r + 1}"] = frame["W"] * (1 + 0.1 * r)
    return frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)


def test_the_catalog_declares_units() -> None:
    cat = Catalog.from_dict(_catalog())
    unit = cat.units[ts.catalog.Unit.HOUSEHOLD]
    assert (unit.id, unit.record_key, unit.weight, unit.variables) == (
        "HHID",
        "HHKEY",
        "HHW",
        ("A", "D"),
    )
    assert cat.unit == "person" and {"HHID", "HHKEY", "HHW"} <= set(cat.columns)
    import tomllib

    again = Catalog.from_dict(tomllib.loads(cat.to_toml()))
    assert again.units == cat.units
    for bad, word in (
        ({**HOUSEHOLD, "variables": ["A", "NOPE"]}, "not variables"),
        ({**HOUSEHOLD, "unit": "person"}, "declared twice"),
        ({**HOUSEHOLD, "unit": "village"}, "unit"),
    ):
        with pytest.raises(CatalogError, match=word):
            Catalog.from_dict({**RANDOM_CATALOG, "units": [bad]})


@pytest.mark.parametrize("engine", [DuckDBEngine, MemoryEngine])
def test_validation_finds_households_whose_records_disagree(make_dataset, engine) -> None:
    frame = _persons(300, 1)
    engine().validate(make_dataset(frame, _catalog()))
    broken = frame.copy()
    first = broken.index[broken["HHID"].duplicated(keep=False)][0]
    broken.loc[first, "D"] = 3 - broken.loc[first, "D"]  # one person's household variable
    with pytest.raises(DataError, match="disagree"):
        engine().validate(make_dataset(broken, _catalog()))
    keys = frame.copy()
    keys["HHKEY"] = keys["HHKEY"].astype(np.int64)
    keys.loc[0, "HHKEY"] = -1
    with pytest.raises(DataError, match="record key"):
        engine().validate(make_dataset(keys, _catalog()))


def test_household_counts_are_distinct_households(make_dataset) -> None:
    frame = _persons(900, 2)
    ds = make_dataset(frame, _catalog())
    households = frame.drop_duplicates("HHID")
    request = ts.TableRequest(
        ("A", "D"), universe={"A": [1, 2]}, statistic="both", unit="household"
    )
    for engine in (DuckDBEngine(), MemoryEngine(), CubeCache(DuckDBEngine())):
        f = ts.TableBuilder(ds, ts.Protection(None), engine=engine).build(request).to_frame()
        for _, row in f.iterrows():
            sel = households["A"].isin([1, 2])
            for d in ("A", "D"):
                if row[d] != "_T":
                    sel &= households[d] == int(row[d])
            # Distinct households by brute force; their weights once each.
            assert row["n"] == frame[frame["HHID"].isin(households[sel]["HHID"])]["HHID"].nunique()
            assert abs(row["weighted"] - households[sel]["HHW"].sum()) <= 0.5 + 2 * (
                "_T" in row.values
            )
    persons = ts.TableBuilder(ds, ts.Protection(None)).build(
        ts.TableRequest(("A",), statistic="count")
    )
    assert persons.to_frame()["n"].iloc[-1] == len(frame)


@pytest.mark.parametrize("seeds", ["cellkey", "keyed"])
def test_the_household_record_key_drives_the_noise(make_dataset, seeds: str) -> None:
    """A household table is the person table of one record per household, with its key."""
    frame = _persons(1200, 3)
    ds = make_dataset(frame, _catalog())
    one = frame.drop_duplicates("HHID").copy()
    one["RKEY"], one["W"] = one["HHKEY"], one["HHW"]
    flat = make_dataset(one.drop(columns=["HHID", "HHKEY", "HHW"]), dict(DECLARED))
    protection = ts.Protection(
        destatis(3, 1.0), seeds=seeds, secret=SECRET if seeds == "keyed" else None
    )
    for dims, universe in ((("A", "D"), {}), (("D",), {"A": [2]}), (("A",), {"D": [1]})):
        a = ts.TableBuilder(ds, protection).build(
            ts.TableRequest(dims, universe=universe, statistic="both", unit="household")
        )
        b = ts.TableBuilder(flat, protection).build(
            ts.TableRequest(dims, universe=universe, statistic="both")
        )
        assert a.to_csv() == b.to_csv()
        assert (
            a.to_frame()["n"]
            != ts.TableBuilder(ds, ts.Protection(None))
            .build(ts.TableRequest(dims, universe=universe, statistic="count", unit="household"))
            .to_frame()["n"]
        ).any() or dims == ("D",)


def test_same_household_cells_same_noise_across_tables(make_dataset) -> None:
    ds = make_dataset(_persons(1500, 4), _catalog())
    builder = ts.TableBuilder(ds, ts.Protection(destatis(3, 1.0), seeds="keyed", secret=SECRET))
    two = builder.build(ts.TableRequest(("A", "D"), statistic="count", unit="household")).to_frame()
    for a, d in itertools.product((1, 2, 3), (1, 2)):
        one = builder.build(
            ts.TableRequest(("D",), universe={"A": [a]}, statistic="count", unit="household")
        ).to_frame()
        want = two[(two["A"].astype(str) == str(a)) & (two["D"].astype(str) == str(d))]["n"].item()
        assert one[one["D"].astype(str) == str(d)]["n"].item() == want


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"dimensions": ("B",)}, "not a variable of a household"),
        ({"dimensions": ("A",), "universe": {"C": [1]}}, "not a variable of a household"),
        ({"dimensions": ("A",), "replicates": True}, "standard errors"),
        ({"dimensions": ("A",), "statistic": "count,sum:X"}, "standard errors, sums"),
        ({"dimensions": ("A",), "unit": "dwelling"}, "counts no dwelling"),
    ],
)
def test_refusals_name_what_a_household_table_allows(make_dataset, kwargs, word) -> None:
    catalog = _catalog()
    catalog["magnitudes"] = [{"name": "X", "lower": 0, "upper": 10}]
    frame = _persons(200, 5)
    frame["X"] = 1.0
    ds = make_dataset(frame, catalog)
    request = ts.TableRequest(**{"unit": "household", **kwargs})
    with pytest.raises(RequestError, match=word):
        ts.TableBuilder(ds, ts.Protection(destatis(3, 1.0))).build(request)


def test_http_api_takes_the_unit(make_dataset, tmp_path) -> None:
    from tablesafe._settings import load_site_config
    from tablesafe.server import create_app

    ds = make_dataset(_persons(600, 6), _catalog())
    site = load_site_config(
        data={
            "base": str(tmp_path),
            "server": {"title": "Test", "audit_db": "audit.sqlite"},
            "datasets": [
                {"name": "hh", "path": str(ds.path.parent), "rules": {"min_universe_size": 10}}
            ],
        }
    )
    with TestClient(create_app(site)) as c:
        assert c.get("/api/datasets/hh").json()["units"] == ["person", "household"]
        body = {"dimensions": ["A"], "statistic": "count", "unit": "household"}
        r = c.post("/api/datasets/hh/tables", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["meta"]["unit"] == "household"
        persons = c.post("/api/datasets/hh/tables", json={**body, "unit": "person"}).json()
        assert persons["cells"][-1]["n"] > r.json()["cells"][-1]["n"]
        bad = c.post("/api/datasets/hh/tables", json={**body, "unit": "village"})
        assert bad.status_code == 422 and "household" in bad.text
