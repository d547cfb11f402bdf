"""Tables derived from cached cubes equal the engine's own, bit for bit."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tablesafe as ts
from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.cells._aggregates import CellAggregates
from tablesafe.engines import CubeCache, DuckDBEngine, MemoryEngine


class Counting:
    """A real engine that counts the tabulations (``calls``) and record choices
    (``selects``) it is asked for."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.name = engine.name
        self.calls = 0
        self.selects = 0

    def validate(self, dataset):
        return self.engine.validate(dataset)

    def ensure_valid(self, dataset):
        return self.engine.ensure_valid(dataset)

    def select(self, *args, **kwargs):
        self.selects += 1
        return self.engine.select(*args, **kwargs)

    def tabulate(self, dataset, plan):
        self.calls += 1
        return self.engine.tabulate(dataset, plan)


AGEB = {
    "name": "AGEB",
    "variable": "AGE",
    "label": "Age in bands",
    "groups": [
        {"code": "young", "label": "0-29", "members": [str(a) for a in range(30)]},
        {"code": "middle", "label": "30-59", "members": [str(a) for a in range(30, 60)]},
    ],
    "other": "60 and over",
}

REQUESTS = [
    TableRequest(("REGION", "SEX")),
    TableRequest(("REGION", "SEX"), universe={"AGE": list(range(20, 31))}, statistic="both"),
    TableRequest(("ZONE", "AGEGRP", "SEX"), universe={"TENURE": ["OWN", "RENT"]}, replicates=True),
    TableRequest(("AGE5", "SEX"), universe={"AGE": list(range(0, 40)), "SEX": [2]}),
    TableRequest(("AGEB", "SEX"), groupings=[AGEB], statistic="weighted"),
    TableRequest(("REGION", "EDUC", "TENURE"), margins="all", statistic="both", replicates=True),
    TableRequest(("REGION", "EDUC"), margins=(("REGION",),), universe={"OCC": [1]}),
    # A universe no record is in.
    TableRequest(("SEX",), universe={"AGE": [90], "HHSIZE": [6], "OCC": [9], "EDUC": [1]}),
]


def assert_same(a: CellAggregates, b: CellAggregates) -> None:
    assert a.dimensions == b.dimensions
    assert a.grouping_sets == b.grouping_sets
    np.testing.assert_array_equal(a.computed, b.computed)
    np.testing.assert_array_equal(a.n, b.n)
    assert a.n.dtype == b.n.dtype and a.cell_key.dtype == b.cell_key.dtype
    np.testing.assert_array_equal(a.cell_key, b.cell_key)
    for x, y in ((a.weight_sum, b.weight_sum), (a.replicate_sums, b.replicate_sums)):
        assert (x is None) == (y is None)
        if x is not None:
            assert x.tobytes() == y.tobytes()


@pytest.fixture(scope="module")
def demo(demo_dir) -> Dataset:
    return Dataset.open(demo_dir)


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: "x".join(r.dimensions))
def test_derived_equals_direct(demo, request_):
    plan = request_.coerced(demo.catalog).bind(demo.catalog)
    direct = DuckDBEngine().tabulate(demo, plan)
    cube = CubeCache(DuckDBEngine())
    assert_same(cube.tabulate(demo, plan), direct)
    assert cube.misses == 1
    # Again, now from the cached cube.
    assert_same(cube.tabulate(demo, plan), direct)
    assert cube.hits == 1


def test_one_scan_per_column_set(demo):
    counting = Counting(MemoryEngine())
    cube = CubeCache(counting)
    cat = demo.catalog
    for lo in range(0, 80, 10):
        req = TableRequest(("REGION", "AGE", "SEX"), universe={"AGE": list(range(lo, lo + 11))})
        cube.tabulate(demo, req.bind(cat))
    # Groupings of the same columns, and margins, come from the same cube.
    cube.tabulate(demo, TableRequest(("ZONE", "AGEGRP", "SEX"), margins="all").bind(cat))
    assert counting.calls == 1
    cube.tabulate(demo, TableRequest(("REGION", "SEX"), universe={"TENURE": ["OWN"]}).bind(cat))
    assert counting.calls == 2
    # A weighted table needs weight sums: another cube of the same columns.
    cube.tabulate(demo, TableRequest(("REGION", "SEX"), statistic="weighted").bind(cat))
    assert counting.calls == 3


def test_concurrent_requests_build_a_cube_once(demo):
    counting = Counting(DuckDBEngine())
    cube = CubeCache(counting)
    cat = demo.catalog
    results: list[CellAggregates] = []
    lock = threading.Lock()

    def ask(lo: int) -> None:
        req = TableRequest(("REGION", "SEX"), universe={"AGE": list(range(lo, lo + 5))})
        agg = cube.tabulate(demo, req.bind(cat))
        with lock:
            results.append(agg)

    threads = [threading.Thread(target=ask, args=(lo,)) for lo in range(0, 80, 10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counting.calls == 1 and len(results) == 8


def test_least_recently_used_cubes_are_dropped(demo):
    counting = Counting(MemoryEngine())
    # Rows of 26 bytes (count, key, weight, two codes): REGION x SEX has 16, REGION x EDUC
    # 48; the cache keeps 1500 bytes.
    cube = CubeCache(counting, max_cache_mib=1500 / 2**20)
    cat = demo.catalog
    rs = TableRequest(("REGION", "SEX")).bind(cat)
    re = TableRequest(("REGION", "EDUC")).bind(cat)
    cube.tabulate(demo, rs)
    cube.tabulate(demo, re)  # 64 rows, 1664 bytes: REGION x SEX is dropped
    cube.tabulate(demo, re)
    assert counting.calls == 2
    cube.tabulate(demo, rs)
    assert counting.calls == 3


def test_what_the_cache_does_not_serve_goes_to_the_engine(demo):
    counting = Counting(DuckDBEngine())
    cat = demo.catalog
    # REGION x AGE x OCC x EDUC has 9 * 92 * 11 * 7 > 20,000 cells (totals included).
    cube = CubeCache(counting, max_cube_cells=20_000)
    plan = TableRequest(("REGION", "AGE", "OCC"), universe={"EDUC": [1]}).bind(cat)
    assert_same(cube.tabulate(demo, plan), DuckDBEngine().tabulate(demo, plan))
    cube.tabulate(demo, plan)
    assert counting.calls == 2 and cube.misses == 0


def test_protected_tables_are_the_same_bytes(demo):
    """The whole path of a table: the same CSV with and without the cache."""
    from tablesafe._settings import ProtectionSettings

    secret = b"cube-cache-test-secret-0123456789"
    for settings in (
        ProtectionSettings(method="ckm", seeds="dynamic", secret_env="UNUSED"),
        ProtectionSettings(method="q-records", seeds="dynamic", secret_env="UNUSED"),
    ):
        protection = ts.protection_from_settings(settings, secret=secret)
        direct = ts.TableBuilder(demo, protection, engine=DuckDBEngine())
        cached = ts.TableBuilder(demo, protection, engine=CubeCache(DuckDBEngine()))
        for req in REQUESTS:
            a = direct.build(req).render("csv")
            assert cached.build(req).render("csv") == a
            assert cached.build(req).render("csv") == a


def test_limits_below_one_are_refused():
    with pytest.raises(ts.ConfigError, match="must be positive"):
        CubeCache(MemoryEngine(), max_cube_cells=0)
    with pytest.raises(ts.ConfigError, match="must be positive"):
        CubeCache(MemoryEngine(), max_cache_mib=0)


class SlowCubes(Counting):
    """A real engine whose queries over all records (no universe) time out."""

    def tabulate(self, dataset, plan):
        self.calls += 1
        if not plan.universe:
            raise ts.ComputationError("the tabulation took longer than 1 s and was cancelled")
        return self.engine.tabulate(dataset, plan)


def test_a_cube_too_slow_to_build_leaves_tables_to_the_engine(demo):
    engine = SlowCubes(MemoryEngine())
    cube = CubeCache(engine)
    plan = TableRequest(("REGION", "SEX"), universe={"AGE": [30, 31]}).bind(demo.catalog)
    assert_same(cube.tabulate(demo, plan), MemoryEngine().tabulate(demo, plan))
    assert engine.calls == 2  # the cube, refused; then the table itself
    cube.tabulate(demo, plan)
    assert engine.calls == 3  # the cube is not tried again
    # A table over no universe fails as it would without the cache.
    with pytest.raises(ts.ComputationError):
        cube.tabulate(demo, TableRequest(("REGION",)).bind(demo.catalog))
