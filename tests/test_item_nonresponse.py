"""Item non-response in magnitudes (issue 29): figures over the records with a value, and their base.

A magnitude that declares ``missing = [...]`` in the catalog may hold NULL,
NaN or those codes; its sums, means and quantiles are over the records that
hold a value, and the count of those records (``n_VAR``, weighted
``weighted_VAR``) is published as their base, protected like any count.
Every figure is checked against a brute force over the microdata.
"""

from __future__ import annotations

import itertools
import tomllib

import numpy as np
import pandas as pd
import pytest

import tablesafe as ts
from tablesafe._errors import CatalogError, DataError, RequestError
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._magnitudes import magnitude_fixed
from tablesafe.engines import CubeCache, DuckDBEngine, MemoryEngine
from tablesafe.mechanisms import destatis
from tablesafe.mechanisms._magnitudes import MagnitudeMethod, MagnitudeProtection
from tsdata import RANDOM_CATALOG, random_frame

MISSING = -9.0


def _catalog(missing: list[float] | None = (MISSING,)) -> dict[str, object]:  # type: ignore[assignment]
    catalog = dict(RANDOM_CATALOG)
    entry: dict[str, object] = {"name": "X", "label": "Spending", "lower": 0, "upper": 1000}
    if missing is not None:
        entry["missing"] = list(missing)
    catalog["magnitudes"] = [entry]
    return catalog


def _frame(n: int, seed: int) -> pd.DataFrame:
    frame = random_frame(n, seed)
    rng = np.random.default_rng(seed + 100)
    x = np.round(rng.lognormal(4, 1, n).clip(0, 1000), 2)
    x[rng.random(n) < 0.08] = np.nan  # empty: NULL in the file
    x[rng.random(n) < 0.08] = MISSING  # a code of item non-response, below the bounds
    frame["X"] = x
    return frame


def _present(frame: pd.DataFrame) -> pd.Series:
    return frame["X"].notna() & (frame["X"] != MISSING)


def test_the_catalog_declares_missing_codes() -> None:
    cat = Catalog.from_dict(_catalog([-9, -8.5]))
    assert cat.magnitudes["X"].missing == (-9.0, -8.5)
    assert Catalog.from_dict(tomllib.loads(cat.to_toml())).magnitudes["X"].missing == (-9.0, -8.5)
    assert Catalog.from_dict(_catalog(None)).magnitudes["X"].missing is None
    assert Catalog.from_dict(_catalog([])).magnitudes["X"].missing == ()
    for bad in (["-9"], "-9", [float("nan")]):
        with pytest.raises(CatalogError, match="missing"):
            Catalog.from_dict(_catalog(bad))  # type: ignore[arg-type]


@pytest.mark.parametrize("engine", [DuckDBEngine, MemoryEngine])
def test_validation_takes_missing_values_only_where_declared(make_dataset, engine) -> None:
    frame = _frame(400, 1)
    ds = make_dataset(frame, _catalog())
    engine().validate(ds)  # NULL, NaN and -9 (below the lower bound) are item non-response
    undeclared = make_dataset(frame, _catalog(None))
    with pytest.raises(DataError, match=r"declare missing = \[codes\]"):
        engine().validate(undeclared)
    no_codes = make_dataset(frame, _catalog([]))  # -9 is then a value, below the bounds
    with pytest.raises(DataError, match="below its lower bound"):
        engine().validate(no_codes)


def _truth(frame: pd.DataFrame, dims: tuple[str, ...]) -> dict[tuple[str, ...], dict[str, float]]:
    """Per cell: the present records' count, weighted count, sums, means and median."""
    codes_of = {
        v["name"]: [c["code"] for c in v["categories"]] for v in RANDOM_CATALOG["variables"]
    }
    out = {}
    for codes in itertools.product(*[[*codes_of[d], "_T"] for d in dims]):
        sel = _present(frame).to_numpy().copy()
        for d, c in zip(dims, codes, strict=True):
            if c != "_T":
                sel &= (frame[d] == c).to_numpy()
        sub = frame[sel]
        x, w = sub["X"].to_numpy(), sub["W"].to_numpy()
        order = np.lexsort((sub["RKEY"].to_numpy(), x))
        median = float(x[order][(len(x) + 1) // 2 - 1]) if len(x) else None
        out[tuple(str(c) for c in codes)] = {
            "n": len(sub),
            "w": float(w.sum()),
            # Sums are exact in fixed point: each w x rounded to 1/16 (docs/magnitudes.md).
            "sum": float(magnitude_fixed(x * w).sum()) / 16,
            "mean": None if not len(x) else 0.0,
            "median": median,
        }
    return out


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_unprotected_figures_are_over_the_records_with_a_value(make_dataset, fmt: str) -> None:
    frame = _frame(1200, 7)
    ds = make_dataset(frame, _catalog(), fmt=fmt)
    exact = MagnitudeProtection(
        method=MagnitudeMethod.NONE, rounding="0.01", mean_rounding="0.01", quantile_rounding="0.01"
    )
    truth = _truth(frame, ("A", "B"))
    for engine in (DuckDBEngine(), MemoryEngine(), CubeCache(MemoryEngine())):
        builder = ts.TableBuilder(ds, ts.Protection(None), engine=engine, magnitudes=exact)
        weighted = builder.build(
            ts.TableRequest(("A", "B"), statistic="both,sum:X,mean:X")
        ).to_frame()
        counts = builder.build(ts.TableRequest(("A", "B"), statistic="count,median:X")).to_frame()
        for (_, row), (_, crow) in zip(weighted.iterrows(), counts.iterrows(), strict=True):
            t = truth[(str(row["A"]), str(row["B"]))]
            assert row["n_X"] == t["n"] == crow["n_X"]
            # Whole units, totals too: unprotected, every figure is the true one rounded once.
            assert abs(row["weighted_X"] - t["w"]) <= 0.5
            assert row["sum_X_weighted"] == pytest.approx(t["sum"], abs=0.01)
            if t["mean"] is None:
                assert row["mean_X_weighted"] is None
            else:
                # The exact sum over the exact weighted count of the records with a value,
                # rounded once (not over the rounded count).
                mean = t["sum"] / t["w"]
                assert row["mean_X_weighted"] == pytest.approx(mean, abs=0.005 + 1e-9)
            # Unweighted medians over the records with a value, exact values of two decimals.
            assert crow["median_X"] == (None if t["median"] is None else pytest.approx(t["median"]))


def test_a_base_is_protected_as_the_count_of_its_records(make_dataset) -> None:
    """The base of a cell is a count of its own record set: where the records with a value are
    exactly another cell's records, the two protected counts are one figure."""
    frame = random_frame(2500, 3)
    frame["X"] = np.where(frame["D"] == 1, 50.0, np.nan)  # a value exactly where D = 1
    ds = make_dataset(frame, _catalog())
    builder = ts.TableBuilder(
        ds, ts.Protection(destatis(3, 1.0), seeds="keyed", secret=b"0123456789abcdef0123456789")
    )
    base = builder.build(ts.TableRequest(("A", "B"), statistic="count,mean:X")).to_frame()
    cells = builder.build(
        ts.TableRequest(("A", "B"), universe={"D": [1]}, statistic="count")
    ).to_frame()
    assert base["n_X"].tolist() == cells["n"].tolist()
    assert (base["n_X"] != base["n"]).any()
    # Means over the records with a value: all are 50, so every mean is near 50.
    means = [m for m, n in zip(base["mean_X"], base["n_X"], strict=True) if n and n > 10]
    assert means and all(abs(m - 50) < 5 for m in means)


def test_small_bases_are_blank_under_the_small_cell_rule(make_dataset) -> None:
    from tablesafe._settings import RuleSettings

    frame = random_frame(900, 12)
    rng = np.random.default_rng(4)
    frame["X"] = np.where(rng.random(len(frame)) < 0.02, 10.0, np.nan)  # few records with a value
    ds = make_dataset(frame, _catalog())
    rules = RuleSettings(min_cell_size=3, min_universe_size=1)
    builder = ts.TableBuilder(ds, ts.Protection(destatis(3, 1.0)), rules=rules)
    table = builder.build(ts.TableRequest(("C",), statistic="both,sum:X"))
    f = table.to_frame()
    bases = [b for b in f["n_X"]]
    assert any(b is None for b in bases)
    assert all(b is None or b == 0 or b >= 3 for b in bases)
    # Issue 38: a withheld base is suppressed in SDMX (Q, confidential) and JSON-stat (Q),
    # not a plain missing value, while the cell's own count is shown.
    import csv
    import io
    import json

    rows = [r for r in csv.DictReader(io.StringIO(table.render("sdmx-csv"))) if r["C"]]
    for column in ("n_X", "weighted_X"):
        blank = [r for r in rows if r["STATISTIC"] == column and r["OBS_VALUE"] == ""]
        assert blank and all((r["OBS_STATUS"], r["CONF_STATUS"]) == ("Q", "C") for r in blank)
        counts = {r["C"]: r for r in rows if r["STATISTIC"] == "n"}
        assert any(counts[r["C"]]["OBS_STATUS"] == "E" for r in blank)  # the count is shown
    doc = json.loads(table.render("jsonstat"))
    names = doc["dimension"]["STATISTIC"]["category"]["index"]
    for i, value in enumerate(doc["value"]):
        if names[i % len(names)] == "n_X" and value is None:
            assert doc["status"][str(i)] == "Q"
    assert "Q" in doc["extension"]["status"]


def test_the_old_tabulation_refuses_item_nonresponse(make_dataset) -> None:
    from tablesafe.output._tabulation import tabulate

    ds = make_dataset(_frame(300, 2), _catalog())
    with pytest.raises(RequestError, match="item non-response"):
        tabulate(ds, ts.TableRequest(("A",), statistic="count,mean:X"))


def test_the_command_line_builds_it_unprotected(make_dataset) -> None:
    from click.testing import CliRunner

    from tablesafe._cli import get_app

    frame = _frame(300, 5)
    ds = make_dataset(frame, _catalog())
    args = ["table", str(ds.path.parent), "--rows", "A", "--statistic", "count,mean:X"]
    out = CliRunner().invoke(get_app(), [*args, "--method", "none", "--format", "csv"])
    assert out.exit_code == 0, out.output
    unprotected, header, first = out.output.splitlines()[:3]
    assert unprotected.startswith("# UNPROTECTED")
    assert header.startswith("A,n,n_X,mean_X")
    assert int(first.split(",")[2]) == int((_present(frame) & (frame["A"] == 1)).sum())
