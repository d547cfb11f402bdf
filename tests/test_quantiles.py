"""Medians and quantiles (issue 29): exact per cell, protected, ruled, the same bytes everywhere.

Every check compares with a brute force written here from the definition
(docs/quantiles.md): the quantile ``p`` of a cell is the value of the first
record, in (value, record key) order, at which the cumulative weight reaches
``p`` of the cell's weight.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

import tablesafe as ts
from tablesafe._errors import ParameterError, RequestError
from tablesafe._seeds import SeedScheme
from tablesafe.cells._quantiles import RecordValues, quantile_ranks, sort_cells
from tablesafe.engines import CubeCache, DuckDBEngine, MemoryEngine
from tablesafe.mechanisms import destatis
from tablesafe.mechanisms._magnitudes import MagnitudeMethod, MagnitudeProtection
from tablesafe.mechanisms._quantiles import dp_quantile, window_quantiles
from tsdata import RANDOM_CATALOG, random_frame

SECRET = b"quantile-test-secret-0123456789abcdef"


def brute_quantile(x: np.ndarray, w: np.ndarray, key: np.ndarray, percent: int) -> float:
    """The definition, one record at a time, in exact rational arithmetic on fixed-point weights."""
    order = sorted(range(len(x)), key=lambda i: (x[i], key[i]))
    # Fixed point: w * 2**16 rounded half away from zero (weights are >= 0), exactly.
    units = [math.floor(Fraction(float(w[i])) * 2**16 + Fraction(1, 2)) for i in order]
    total = sum(units)
    running = 0
    for i, u in zip(order, units, strict=True):
        running += u
        if 100 * running >= percent * total:
            return float(x[i])
    raise AssertionError("no record reaches the quantile")


def _catalog_with_income() -> dict[str, object]:
    catalog = dict(RANDOM_CATALOG)
    catalog["magnitudes"] = [{"name": "X", "label": "x", "lower": 0, "upper": 1000}]
    return catalog


def _frame(n: int, seed: int) -> pd.DataFrame:
    frame = random_frame(n, seed)
    rng = np.random.default_rng(seed + 1)
    # Ties on purpose: values on a coarse grid, and some zero weights.
    frame["X"] = rng.integers(0, 60, n).astype(np.float64) * 7.5
    frame.loc[rng.random(n) < 0.05, "W"] = 0.0
    return frame


def test_sorted_cells_give_the_brute_force_quantile_of_every_cell() -> None:
    rng = np.random.default_rng(3)
    n = 2000
    shape = (4, 5, 3)  # inner 3 x 4 x 2, every grouping set
    inner = (rng.integers(0, 3, n), rng.integers(0, 4, n), rng.integers(0, 2, n))
    values = RecordValues(
        cell=np.ravel_multi_index(inner, (3, 4, 2)).astype(np.int64),
        x=rng.integers(0, 40, n).astype(np.float64),
        weight=np.where(rng.random(n) < 0.1, 0.0, rng.uniform(0.5, 30, n)),
        key=rng.integers(0, 2**32, n, dtype=np.int64),
    )
    sets = tuple(s for r in range(3, -1, -1) for s in itertools.combinations(range(3), r))
    cells = sort_cells(values, shape, sets)
    for percent in (1, 25, 50, 90, 99):
        ranks = quantile_ranks(cells, percent, 2)
        for idx in itertools.product(*(range(s) for s in shape)):
            sel = np.ones(n, dtype=bool)
            for axis, i in enumerate(idx):
                if i < shape[axis] - 1:
                    sel &= inner[axis] == i
            flat = np.ravel_multi_index(idx, shape)
            assert values.weight is not None
            if values.weight[sel].sum() == 0:
                assert ranks.position[flat] == -1
                continue
            want = brute_quantile(values.x[sel], values.weight[sel], values.key[sel], percent)
            assert cells.x[ranks.position[flat]] == want
            # The window fits exactly when 2 records lie on each side.
            pos = ranks.position[flat] - cells.start[flat]
            assert ranks.fits[flat] == (pos >= 2 and pos + 2 < sel.sum())


def _window_case(seed: int) -> tuple[RecordValues, tuple[int, ...]]:
    rng = np.random.default_rng(seed)
    cells, size = 60, rng.integers(15, 80, 60)
    cell = np.repeat(np.arange(cells), size)
    # Three kinds of cells: continuous values, heavy ties, values of 0 and above.
    kind = np.repeat(np.arange(cells) % 3, size)
    x = np.where(
        kind == 0,
        rng.lognormal(9, 1, cell.size),
        np.where(
            kind == 1,
            rng.integers(0, 4, cell.size) * 100.0,
            rng.integers(0, 3, cell.size) * rng.uniform(0, 50, cell.size),
        ),
    )
    values = RecordValues(
        cell=cell.astype(np.int64),
        x=x,
        weight=rng.uniform(1, 20, cell.size),
        key=rng.integers(0, 2**32, cell.size, dtype=np.int64),
    )
    return values, (cells + 1,)


@pytest.mark.parametrize("seeds", [SeedScheme.CELLKEY, SeedScheme.KEYED])
def test_window_noise_stays_in_its_spread_and_never_gives_a_lone_value(seeds: SeedScheme) -> None:
    """|q' - x_(r)| lies in [g_lo s, g_hi s]; q' = x_(r) only where h + 1 records hold x_(r)."""
    h, move, cap = 4, (0.1, 0.5), 0.08
    for seed in range(4):
        values, shape = _window_case(seed)
        cells = sort_cells(values, shape, ((0,),))
        for percent in (10, 50, 75):
            ranks = quantile_ranks(cells, percent, h)
            secret = SECRET if seeds == SeedScheme.KEYED else None
            out = window_quantiles(cells, ranks, move, cap, "X", seeds, secret)
            for c in range(shape[0] - 1):
                r = int(ranks.position[c])
                if not ranks.fits[c]:
                    assert np.isnan(out[c])
                    continue
                x, low, high = cells.x[r], cells.x[r - h], cells.x[r + h]
                s = min(high - x, x - low)
                if x != 0:
                    s = min(s, cap * abs(x))
                moved = abs(out[c] - x)
                assert move[0] * s * (1 - 1e-12) <= moved <= move[1] * s * (1 + 1e-12)
                if out[c] == x:
                    assert (
                        np.count_nonzero(
                            cells.x[cells.start[c] : cells.start[c] + cells.count[c]] == x
                        )
                        >= h + 1
                    )


def test_window_noise_is_a_function_of_the_window_alone() -> None:
    """Two cells whose 2h + 1 records around the quantile are the same records give one value."""
    rng = np.random.default_rng(8)
    h = 3
    middle = np.sort(rng.uniform(100, 200, 2 * h + 1))
    middle_keys = rng.integers(0, 2**32, 2 * h + 1)
    for seeds, secret in ((SeedScheme.CELLKEY, None), (SeedScheme.KEYED, SECRET)):
        xs, keys, cell = [], [], []
        for c in range(30):
            m = int(rng.integers(h + 1, 20))  # other records, as many below as above
            xs += [*rng.uniform(0, 99, m), *middle, *rng.uniform(201, 400, m)]
            keys += [*rng.integers(0, 2**32, m), *middle_keys, *rng.integers(0, 2**32, m)]
            cell += [c] * (2 * m + 2 * h + 1)
        values = RecordValues(
            cell=np.array(cell, dtype=np.int64),
            x=np.array(xs),
            weight=None,
            key=np.array(keys, dtype=np.int64),
        )
        cells = sort_cells(values, (31,), ((0,),))
        out = window_quantiles(
            cells, quantile_ranks(cells, 50, h), (0.1, 0.5), 1.0, "X", seeds, secret
        )
        assert np.all(out[:30] == out[0]) and out[0] != middle[h]


def test_dp_quantile_draws_intervals_as_the_exponential_mechanism_says() -> None:
    """Frequencies of the drawn intervals match |I_i| exp(-eps |i - pn| / 2), normalised."""
    values = np.array([10.0, 20.0, 20.0, 35.0, 60.0, 61.0, 90.0])
    eps, bounds, percent = 1.5, (0.0, 100.0), 50
    edges = np.concatenate([[0.0], values, [100.0]])
    weight = np.diff(edges) * np.exp(-eps * np.abs(np.arange(8) - 3.5) / 2)
    want = weight / weight.sum()
    rng = np.random.default_rng(5)
    draws = [dp_quantile(values, percent, eps, bounds, (a, b)) for a, b in rng.random((20000, 2))]
    idx = np.clip(np.searchsorted(edges, draws, side="right") - 1, 0, 7)
    freq = np.bincount(idx, minlength=8) / len(draws)
    assert np.all(np.abs(freq - want) < 0.015)
    assert all(0 <= d <= 100 for d in draws)


def test_quantile_parameters_are_checked() -> None:
    for bad in (
        {"quantile_window": 0},
        {"quantile_move": (0.6, 0.5)},
        {"quantile_cap": 0},
        {"quantile_min_count": 10},  # below 2 * 5 + 1
    ):
        with pytest.raises(ParameterError):
            MagnitudeProtection(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "item", ["quantile:INCOME:1", "quantile:INCOME:0.999", "quantile:INCOME:0", "quantile:INCOME"]
)
def test_bad_quantiles_are_refused(item: str) -> None:
    with pytest.raises(RequestError, match="fraction strictly between 0 and 1"):
        ts.TableRequest(("REGION",), statistic=f"weighted,{item}")


def test_quantile_items_are_parsed_once() -> None:
    req = ts.TableRequest(
        ("REGION",),
        statistic="weighted,median:INCOME,quantile:INCOME:0.5,quantile:INCOME:.9",
        magnitudes=("sum:INCOME", "quantile:HOURS:0.25"),
    )
    # The statistic's items first, then the magnitudes field's, each once.
    assert req.quantiles == ("median:INCOME", "quantile:INCOME:0.9", "quantile:HOURS:0.25")
    assert req.magnitudes == ("sum:INCOME",)


def _truth(frame: pd.DataFrame, dims: tuple[str, ...], column: str, weighted: bool, percent: int):
    """Per cell (codes, '_T' for totals): the records' count and brute-force quantile."""
    out = {}
    codes_of = {
        v["name"]: [c["code"] for c in v["categories"]] for v in RANDOM_CATALOG["variables"]
    }
    levels = [[*codes_of[d], "_T"] for d in dims]
    for codes in itertools.product(*levels):
        sel = np.ones(len(frame), dtype=bool)
        for d, c in zip(dims, codes, strict=True):
            if c != "_T":
                sel &= (frame[d] == c).to_numpy()
        sub = frame[sel]
        w = sub["W"].to_numpy() if weighted else np.ones(len(sub))
        value = None
        if len(sub) and w.sum() > 0:
            value = brute_quantile(sub[column].to_numpy(), w, sub["RKEY"].to_numpy(), percent)
        out[tuple(str(c) for c in codes)] = (len(sub), value)
    return out


@pytest.mark.parametrize("weighted", [True, False])
def test_unprotected_quantiles_equal_the_brute_force(make_dataset, weighted: bool) -> None:
    frame = _frame(1500, 21)
    ds = make_dataset(frame, _catalog_with_income())
    stat = ("weighted" if weighted else "count") + ",median:X,quantile:X:0.9"
    for engine in (DuckDBEngine(), MemoryEngine(), CubeCache(DuckDBEngine())):
        # Rounded to 0.1: the values (multiples of 7.5) are published as they are.
        exact = MagnitudeProtection(method=MagnitudeMethod.NONE, quantile_rounding="0.1")
        table = ts.TableBuilder(ds, ts.Protection(None), engine=engine, magnitudes=exact).build(
            ts.TableRequest(("A", "D"), statistic=stat)
        )
        f = table.to_frame()
        suffix = "_weighted" if weighted else ""
        for percent, column in ((50, f"median_X{suffix}"), (90, f"p90_X{suffix}")):
            truth = _truth(frame, ("A", "D"), "X", weighted, percent)
            for _, row in f.iterrows():
                _, want = truth[(str(row["A"]), str(row["D"]))]
                got = row[column]
                assert (got is None or np.isnan(got)) if want is None else got == want


def test_small_cells_are_blank_and_large_cells_published(make_dataset) -> None:
    """Blank exactly where the protected count is below the minimum or the window does not fit."""
    frame = _frame(3000, 4)
    frame["X"] = np.random.default_rng(9).lognormal(5, 1, len(frame)).clip(0, 1000)
    ds = make_dataset(frame, _catalog_with_income())
    prot = MagnitudeProtection(quantile_window=3, quantile_min_count=12)
    builder = ts.TableBuilder(ds, ts.Protection(destatis(3, 1.0)), magnitudes=prot)
    table = builder.build(ts.TableRequest(("A", "C", "D"), statistic="count,quantile:X:0.9"))
    f = table.to_frame()
    truth = _truth(frame, ("A", "C", "D"), "X", False, 90)
    blanks = published = 0
    for _, row in f.iterrows():
        n, _ = truth[(str(row["A"]), str(row["C"]), str(row["D"]))]
        # 90%: the rank is ceil(0.9 n); the window needs 3 records above it.
        fits = n > 0 and -(-9 * n // 10) + 3 <= n and -(-9 * n // 10) - 3 >= 1
        shown = row["p90_X"] is not None and not np.isnan(row["p90_X"])
        assert shown == (row["n"] >= 12 and fits)
        blanks += not shown
        published += shown
    assert blanks > 5 and published > 20


def test_demo_median_income_within_5_percent_in_cells_of_200(demo_dir: Path) -> None:
    """The issue's done-when: median:INCOME on the demo survey, weighted, cells of 200+ records."""
    ds = ts.Dataset.open(demo_dir)
    frame = pd.read_parquet(ds.path)
    builder = ts.TableBuilder(ds, ts.Protection(destatis(3, 1.0)))
    checked = blank_small = 0
    for dims in (("REGION", "SEX"), ("EDUC", "EMPSTAT"), ("TENURE", "REGION"), ("OCC",)):
        table = builder.build(ts.TableRequest(dims, statistic="weighted,median:INCOME"))
        for _, row in table.to_frame().iterrows():
            sel = np.ones(len(frame), dtype=bool)
            for d in dims:
                if row[d] != "_T":
                    sel &= (frame[d].astype(str) == str(row[d])).to_numpy()
            got = row["median_INCOME_weighted"]
            if sel.sum() < 20:
                assert got is None  # refused: below the minimum count (20 by default)
                blank_small += 1
            if sel.sum() < 200:
                continue
            sub = frame[sel]
            want = brute_quantile(
                sub["INCOME"].to_numpy(), sub["WEIGHT"].to_numpy(), sub["RKEY"].to_numpy(), 50
            )
            assert abs(got - want) <= 0.05 * abs(want) + 0.5, (dims, row.to_dict(), want)
            checked += 1
    assert checked > 80 and blank_small > 0


def test_same_bytes_in_every_engine_run_and_row_order(demo_dir: Path, tmp_path: Path) -> None:
    ds = ts.Dataset.open(demo_dir)
    shuffled = tmp_path / demo_dir.name  # the same name: the metadata names the dataset
    shuffled.mkdir()
    frame = pd.read_parquet(ds.path)
    frame.sample(frac=1.0, random_state=1).to_parquet(shuffled / "microdata.parquet", index=False)
    (shuffled / "catalog.toml").write_text((demo_dir / "catalog.toml").read_text())
    request = ts.TableRequest(
        ("REGION", "SEX"),
        universe={"EMPSTAT": [1]},
        statistic="weighted,median:INCOME,quantile:HOURS:0.25,quantile:INCOME:0.9",
        replicates=True,  # Woodruff's intervals: the records' replicate weights too
    )
    outputs = set()
    for folder in (demo_dir, shuffled):
        for engine in (DuckDBEngine(), MemoryEngine(), CubeCache(DuckDBEngine())):
            for _ in range(2):
                builder = ts.TableBuilder(
                    ts.Dataset.open(folder),
                    ts.Protection(destatis(3, 1.0), seeds="keyed", secret=SECRET),
                    engine=engine,
                )
                outputs.add(builder.build(request).to_json())
    assert len(outputs) == 1
    assert "p90_INCOME_weighted_ci_high" in outputs.pop()


def test_a_cell_has_the_same_median_in_every_table(demo_dir: Path) -> None:
    """Decision 2: the same records give the same quantile, whatever the table around them."""
    ds = ts.Dataset.open(demo_dir)
    builder = ts.TableBuilder(ds, ts.Protection(destatis(3, 1.0), seeds="keyed", secret=SECRET))
    a = builder.build(
        ts.TableRequest(("SEX",), universe={"REGION": [3]}, statistic="count,median:INCOME")
    )
    b = builder.build(ts.TableRequest(("REGION", "SEX"), statistic="count,median:INCOME"))
    fa, fb = a.to_frame(), b.to_frame()
    for sex in ("1", "2"):
        va = fa[fa["SEX"].astype(str) == sex]["median_INCOME"].item()
        vb = fb[(fb["REGION"].astype(str) == "3") & (fb["SEX"].astype(str) == sex)][
            "median_INCOME"
        ].item()
        assert va == vb


def test_dp_quantiles_refuse_weights_and_publish_inside_the_bounds(demo_dir: Path) -> None:
    ds = ts.Dataset.open(demo_dir)
    dp = MagnitudeProtection(method=MagnitudeMethod.DP, epsilon=1.0)
    builder = ts.TableBuilder(
        ds, ts.Protection(destatis(3, 1.0), seeds="keyed", secret=SECRET), magnitudes=dp
    )
    with pytest.raises(RequestError, match="unweighted quantiles only"):
        builder.build(ts.TableRequest(("REGION",), statistic="weighted,median:HOURS"))
    table = builder.build(ts.TableRequest(("REGION",), statistic="count,median:HOURS"))
    values = [v for v in table.to_frame()["median_HOURS"] if v is not None]
    assert values and all(0 <= v <= 99 for v in values)
    assert table.metadata["quantiles"]["method"] == "dp"
    again = builder.build(ts.TableRequest(("REGION",), statistic="count,median:HOURS"))
    assert again.to_json() == table.to_json()


def test_http_api_and_cli_give_the_same_medians(demo_dir: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tablesafe._cli import get_app
    from tablesafe._settings import load_site_config
    from tablesafe.server import create_app

    (tmp_path / "secret").write_text(SECRET.decode())
    config = tmp_path / "site.toml"
    config.write_text(
        f"""
[server]
title = "Test"
audit_db = "audit.sqlite"

[[datasets]]
name = "demo"
path = "{demo_dir}"

[datasets.protection]
method = "ckm"
seeds = "keyed"
secret_file = "secret"

[datasets.rules]
min_universe_size = 20
"""
    )
    body = {"dimensions": ["REGION"], "statistic": "weighted,median:INCOME,quantile:INCOME:0.9"}
    with TestClient(create_app(load_site_config(config))) as c:
        r = c.post("/api/datasets/demo/tables?format=csv", json=body)
        assert r.status_code == 200, r.text
        bad = c.post(
            "/api/datasets/demo/tables",
            json={"dimensions": ["REGION"], "statistic": "weighted,quantile:INCOME:2"},
        )
        assert bad.status_code in (400, 422)
    out = CliRunner().invoke(
        get_app(),
        [
            "table",
            str(demo_dir),
            "--rows",
            "REGION",
            "--statistic",
            body["statistic"],
            "--config",
            str(config),
            "--format",
            "csv",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "median_INCOME_weighted" in out.output
    cells = lambda text: [line for line in text.splitlines() if line and not line.startswith("#")]  # noqa: E731
    assert cells(out.output) == cells(r.text)


def test_footnotes_state_the_quantiles_protection_and_blanks(demo_dir: Path) -> None:
    ds = ts.Dataset.open(demo_dir)
    protected = ts.TableBuilder(ds, ts.Protection(destatis(3, 1.0))).build(
        ts.TableRequest(("REGION",), statistic="weighted,median:INCOME")
    )
    notes = " ".join(protected.footnotes()["statement"])
    statement = protected.metadata["quantiles"]["statement"]
    assert f"Medians and quantiles (over the survey weights): {statement}" in notes
    assert "blank where not published" in notes
    exact = ts.TableBuilder(ds, ts.Protection(None)).build(
        ts.TableRequest(("REGION",), statistic="count,median:INCOME")
    )
    assert "Medians and quantiles are exact (no protection), over the records" in " ".join(
        exact.footnotes()["statement"]
    )


@pytest.mark.system
def test_spark_lists_the_same_records(demo_dir: Path, spark: Any) -> None:
    """Spark's records give the same protected quantiles as DuckDB's, bit for bit."""
    ds = ts.Dataset.open(demo_dir)
    # With standard errors: Woodruff's intervals read each record's replicate weights too.
    request = ts.TableRequest(
        ("REGION", "SEX"),
        universe={"EDUC": [3, 4]},
        statistic="weighted,median:INCOME",
        replicates=True,
    )
    protection = ts.Protection(destatis(3, 1.0), seeds="keyed", secret=SECRET)
    a = ts.TableBuilder(ds, protection, engine=spark).build(request).to_json()
    assert a == ts.TableBuilder(ds, protection).build(request).to_json()
    assert "median_INCOME_weighted_se" in a


def test_the_dataset_description_states_the_precision_rule(demo_dir: Path, tmp_path: Path) -> None:
    from tablesafe._settings import load_site_config
    from tablesafe.server import create_app

    site = load_site_config(
        data={
            "base": str(tmp_path),
            "server": {"title": "Test", "audit_db": "audit.sqlite"},
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "rules": {
                        "max_rse": 25.0,
                        "min_effective_count": 30,
                        "unreliable_action": "flag",
                    },
                    "magnitudes": {"quantile_min_count": 40},
                }
            ],
        }
    )
    with TestClient(create_app(site)) as c:
        meta = c.get("/api/datasets/demo").json()
    rules = meta["rules"]
    assert rules["max_rse"] == 25.0 and rules["min_effective_count"] == 30
    assert rules["unreliable_action"] == "flag" and rules["quantile_min_count"] == 40
    assert {m["name"]: m["item_nonresponse"] for m in meta["magnitudes"]} == {
        "INCOME": False,
        "HOURS": False,
    }
