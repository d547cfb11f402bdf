"""Magnitude tables derived from cached cubes equal the engine's own, bit for bit (issue 17)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tablesafe as ts
from tablesafe._builder import TableBuilder
from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.catalog._magnitudes import MAGNITUDE_SCALE, from_magnitude_fixed, magnitude_fixed
from tablesafe.cells._aggregates import CellAggregates
from tablesafe.cells._magnitude_sums import MagnitudeSums
from tablesafe.cells._plan import with_top
from tablesafe.engines import CubeCache, DuckDBEngine, MemoryEngine
from tablesafe.engines._cube import _rows_of, _to_fixed
from tablesafe.mechanisms._magnitudes import MagnitudeProtection
from test_cube import AGEB, Counting

SUM_MEAN = ("sum:INCOME", "mean:INCOME")

REQUESTS = [
    TableRequest(("REGION", "SEX"), magnitudes=SUM_MEAN),
    # Weighted (contributions w x), with a universe on a column outside the table.
    TableRequest(
        ("REGION", "SEX"),
        universe={"AGE": list(range(20, 31))},
        statistic="both",
        magnitudes=("sum:INCOME", "mean:HOURS"),
    ),
    # Upper levels and groupings of the cube's columns; margins all / none / total.
    TableRequest(
        ("ZONE", "AGEGRP", "SEX"),
        universe={"TENURE": ["OWN", "RENT"]},
        margins="all",
        magnitudes=("mean:HOURS",),
    ),
    TableRequest(("AGEB", "SEX"), groupings=[AGEB], statistic="weighted", magnitudes=SUM_MEAN),
    # (A mean with margins "none" is refused by the protection: its denominator
    # reads the uncomputed grand total.)
    TableRequest(("REGION", "EDUC", "TENURE"), margins="none", magnitudes=("sum:INCOME",)),
    TableRequest(
        ("REGION", "EDUC"),
        margins="total",
        universe={"OCC": [1]},
        statistic="both",
        magnitudes=("sum:HOURS", "sum:INCOME"),
    ),
    TableRequest(
        ("AGE5", "SEX"), universe={"AGE": list(range(0, 40)), "SEX": [2]}, magnitudes=SUM_MEAN
    ),
    # Margins of chosen sets only (no grand total: sums only, as for "none").
    TableRequest(
        ("REGION", "EDUC", "SEX"),
        margins=(("REGION",), ("EDUC", "SEX")),
        magnitudes=("sum:INCOME", "sum:HOURS"),
    ),
    # A universe no record is in.
    TableRequest(
        ("SEX",), universe={"AGE": [90], "HHSIZE": [6], "OCC": [9]}, magnitudes=("sum:INCOME",)
    ),
]


def assert_same(a: CellAggregates, b: CellAggregates) -> None:
    """Every array of ``a`` and ``b`` the same bytes (counts, keys, weights, magnitudes)."""
    assert a.dimensions == b.dimensions
    assert a.grouping_sets == b.grouping_sets
    np.testing.assert_array_equal(a.computed, b.computed)
    for x, y in (
        (a.n, b.n),
        (a.cell_key, b.cell_key),
        (a.weight_sum, b.weight_sum),
        (a.replicate_sums, b.replicate_sums),
    ):
        assert (x is None) == (y is None)
        if x is not None and y is not None:
            assert x.dtype == y.dtype and x.shape == y.shape
            assert x.tobytes() == y.tobytes()
    assert list(a.magnitudes) == list(b.magnitudes)
    for name, ma in a.magnitudes.items():
        mb = b.magnitudes[name]
        for x, y in ((ma.total, mb.total), (ma.top, mb.top)):
            assert x.dtype == y.dtype and x.shape == y.shape
            assert x.tobytes() == y.tobytes()


@pytest.fixture(scope="module")
def demo(demo_dir: Path) -> Dataset:
    return Dataset.open(demo_dir)


@pytest.fixture(scope="module")
def duckdb() -> DuckDBEngine:
    return DuckDBEngine()


def _id(r: TableRequest) -> str:
    return "x".join(r.dimensions) + "-" + "-".join(m.replace(":", "_") for m in r.magnitudes)


@pytest.mark.parametrize("request_", REQUESTS, ids=_id)
def test_derived_equals_direct(demo: Dataset, duckdb: DuckDBEngine, request_: TableRequest) -> None:
    plan = request_.coerced(demo.catalog).bind(demo.catalog)
    assert plan.magnitudes
    direct = duckdb.tabulate(demo, plan)
    cube = CubeCache(duckdb)
    assert_same(cube.tabulate(demo, plan), direct)
    assert (cube.misses, cube.hits) == (1, 0)
    # Again, from the cached cube; and with fewer largest contributions, from the same cube.
    assert_same(cube.tabulate(demo, plan), direct)
    for top in (1, 2):
        fewer = replace(plan, magnitudes=with_top(plan.magnitudes, top))
        assert_same(cube.tabulate(demo, fewer), duckdb.tabulate(demo, fewer))
    assert (cube.misses, cube.hits) == (1, 3)


def test_brute_force(demo: Dataset) -> None:
    """Sums and largest contributions of every cell, recomputed from the records in numpy."""
    request = TableRequest(
        ("REGION", "AGEGRP"),
        statistic="both",
        universe={"SEX": [2], "TENURE": ["OWN"]},
        magnitudes=("sum:INCOME",),
    )
    plan = request.bind(demo.catalog)
    cube = CubeCache(DuckDBEngine())
    cube.tabulate(demo, plan)
    # Derived from the cube of REGION, AGE, SEX, TENURE (AGEGRP is a grouping of AGE).
    agg = cube.tabulate(demo, plan)
    assert (cube.misses, cube.hits) == (1, 1)
    df = pd.read_parquet(demo.path)
    df = df[(df.SEX == 2) & (df.TENURE == "OWN")]
    band = {
        a: g
        for g, ms in zip(plan.dimensions[1].codes, plan.dimensions[1].members, strict=True)
        for a in ms
    }
    contrib = (df.INCOME * df.WEIGHT).to_numpy()
    fixed = magnitude_fixed(contrib)
    regions = df.REGION.to_numpy()
    bands = df.AGE.map(band).to_numpy()
    mag = agg.magnitudes["INCOME"]
    for i, r in enumerate([*plan.dimensions[0].codes, None]):
        for j, b in enumerate([*plan.dimensions[1].codes, None]):
            inside = np.ones(len(df), dtype=bool)
            if r is not None:
                inside &= regions == r
            if b is not None:
                inside &= bands == b
            assert agg.n[i, j] == inside.sum()
            assert mag.total[i, j] == from_magnitude_fixed(fixed[inside].sum())
            best = np.zeros(3)
            largest = np.sort(np.abs(contrib[inside]))[::-1][:3]
            best[: largest.size] = largest
            assert mag.top[:, i, j].tolist() == best.tolist()


def test_top_k(demo: Dataset) -> None:
    """A cube with K largest contributions serves K or fewer; more rebuilds it once."""
    counting = Counting(DuckDBEngine())
    cube = CubeCache(counting)
    plan = TableRequest(("REGION", "SEX"), magnitudes=SUM_MEAN).bind(demo.catalog)
    plans = {k: replace(plan, magnitudes=with_top(plan.magnitudes, k)) for k in (1, 2, 3)}
    cube.tabulate(demo, plans[1])
    assert counting.calls == 1
    cube.tabulate(demo, plans[2])  # needs more than the cube has: rebuilt with two
    assert counting.calls == 2
    cube.tabulate(demo, plans[1])
    cube.tabulate(demo, plans[2])
    assert counting.calls == 2
    assert_same(cube.tabulate(demo, plans[3]), DuckDBEngine().tabulate(demo, plans[3]))
    assert counting.calls == 3
    assert_same(cube.tabulate(demo, plans[1]), DuckDBEngine().tabulate(demo, plans[1]))
    assert counting.calls == 3 and len(cube._cubes) == 1
    # Another set of magnitudes, or none, is another cube.
    cube.tabulate(
        demo, TableRequest(("REGION", "SEX"), magnitudes=("sum:HOURS",)).bind(demo.catalog)
    )
    cube.tabulate(demo, TableRequest(("REGION", "SEX")).bind(demo.catalog))
    assert counting.calls == 5
    # The order of a table's magnitudes does not matter.
    both = TableRequest(("REGION", "SEX"), magnitudes=("sum:HOURS", "sum:INCOME"))
    cube.tabulate(demo, both.bind(demo.catalog))
    assert counting.calls == 6
    rev = TableRequest(("REGION", "SEX"), magnitudes=("sum:INCOME", "sum:HOURS")).bind(demo.catalog)
    assert_same(cube.tabulate(demo, rev), DuckDBEngine().tabulate(demo, rev))
    assert counting.calls == 6


def test_memory_accounting(demo: Dataset) -> None:
    """A cube's size counts its magnitude arrays; the cache's limit applies to them."""
    counting = Counting(MemoryEngine())
    cube = CubeCache(counting)
    plan = TableRequest(("REGION", "SEX"), magnitudes=SUM_MEAN).bind(demo.catalog)
    cube.tabulate(demo, plan)
    (built,) = cube._cubes.values()
    rows = built.rows
    # Count, key and weight (8 each: the memory engine sums weights in any case), two
    # codes (1 + 1), and per magnitude its sum (8) and three largest contributions (24).
    assert built.nbytes == rows * (8 + 8 + 8 + 1 + 1 + 8 + 3 * 8)
    plain = TableRequest(("REGION", "SEX")).bind(demo.catalog)
    limit = rows * (8 + 8 + 8 + 2) + 1  # holds the plain cube, not the magnitude one
    small = CubeCache(counting, max_cache_mib=limit / 2**20)
    calls = counting.calls
    small.tabulate(demo, plain)
    small.tabulate(demo, plain)
    assert counting.calls == calls + 1
    assert_same(small.tabulate(demo, plan), MemoryEngine().tabulate(demo, plan))
    small.tabulate(demo, plan)
    assert counting.calls == calls + 3  # not kept: every magnitude table asks the engine
    # The cube cell limit holds as for counts.
    capped = CubeCache(counting, max_cube_cells=9 * 3 - 1)
    capped.tabulate(demo, plan)
    assert capped.misses == 0 and counting.calls == calls + 4


def test_sums_beyond_exact_floats_bypass_the_cube(demo: Dataset) -> None:
    assert _to_fixed(np.array([2.0**48 - 1]), MAGNITUDE_SCALE) is not None
    assert _to_fixed(np.array([-(2.0**49)]), MAGNITUDE_SCALE) is None
    plan = TableRequest(("REGION", "SEX"), magnitudes=SUM_MEAN).bind(demo.catalog)
    cube_plan = CubeCache(MemoryEngine())._cube_plan(demo, plan)
    assert cube_plan is not None
    agg = MemoryEngine().tabulate(demo, cube_plan)
    assert _rows_of(cube_plan, agg) is not None
    huge = agg.magnitudes["INCOME"].total.copy()
    huge[0, 0] = 2.0**50
    bad = replace(
        agg, magnitudes={"INCOME": MagnitudeSums(total=huge, top=agg.magnitudes["INCOME"].top)}
    )
    assert _rows_of(cube_plan, bad) is None


def test_protected_magnitude_tables_are_the_same_bytes(demo: Dataset) -> None:
    """The whole path: cell-key method for magnitudes with the p% and dominance rules."""
    from tablesafe._settings import ProtectionSettings

    secret = b"cube-cache-magnitude-secret-0123456789"
    protection = ts.protection_from_settings(
        ProtectionSettings(method="ckm", seeds="dynamic", secret_env="UNUSED"), secret=secret
    )
    for mags in (
        MagnitudeProtection(method="ckm", dominance=(1, 85.0), p_percent=10.0),
        MagnitudeProtection(method="ckm", top_k=3, dominance=(2, 80.0), p_percent=15.0),
        MagnitudeProtection(method="ckm", top_k=1, dominance=(1, 90.0), p_percent=None),
    ):
        direct = TableBuilder(demo, protection, engine=DuckDBEngine(), magnitudes=mags)
        cached = TableBuilder(demo, protection, engine=CubeCache(DuckDBEngine()), magnitudes=mags)
        for req in REQUESTS:
            a = direct.build(req).render("csv")
            assert cached.build(req).render("csv") == a
            assert cached.build(req).render("csv") == a
        assert isinstance(cached.engine, CubeCache)
        assert cached.engine.hits >= len(REQUESTS) and cached.engine.misses >= 1


@pytest.mark.parametrize("size", [1, 50, 10_000, 1_000_000])
def test_group_is_unique(size: int) -> None:
    """The cells' grouping equals np.unique's, dense or sorted."""
    from tablesafe.engines._cube import _group

    rng = np.random.default_rng(size)
    for count in (0, 1, 100, 5000):
        flat = rng.integers(0, size, count)
        groups, inverse = _group(flat, size)
        want, want_inverse = np.unique(flat, return_inverse=True)
        assert groups.tolist() == want.tolist()
        assert inverse.tolist() == want_inverse.reshape(-1).tolist()
