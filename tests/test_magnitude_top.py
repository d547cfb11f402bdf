"""Engines compute only as many largest contributions as the protection uses (issue 17, speed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tablesafe._builder import TableBuilder
from tablesafe._cli._methods import protection_from_options
from tablesafe._errors import InternalError
from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.cells._plan import TOP_K, with_top
from tablesafe.engines import DuckDBEngine, MemoryEngine
from tablesafe.mechanisms._magnitudes import MagnitudeProtection


@pytest.fixture(scope="module")
def demo(demo_dir: Path) -> Dataset:
    return Dataset.open(demo_dir)


@pytest.mark.parametrize(
    ("kwargs", "needed"),
    [
        ({}, 2),  # top_k 2, dominance (1, 85), p% 10
        ({"top_k": 1, "p_percent": None}, 1),
        ({"top_k": 1, "p_percent": None, "dominance": None}, 1),
        ({"top_k": 1, "p_percent": None, "dominance": (3, 90.0)}, 3),
        ({"top_k": 3}, 3),
        ({"top_k": 1}, 2),  # the p% rule needs the second largest
        ({"method": "dp", "p_percent": None}, 1),  # DP's noise uses no contribution
        ({"method": "none", "dominance": (2, 80.0), "p_percent": None}, 2),
    ],
)
def test_top_needed(kwargs: dict[str, object], needed: int) -> None:
    assert MagnitudeProtection(**kwargs).top_needed() == needed  # type: ignore[arg-type]


def test_with_top_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError, match="1..3"):
        with_top((), 0)
    with pytest.raises(ValueError, match="1..3"):
        with_top((), TOP_K + 1)


@pytest.mark.parametrize("top", [1, 2, 3])
@pytest.mark.parametrize("statistic", ["count", "both"])
def test_every_top_equals_brute_force_in_every_engine(
    demo: Dataset, top: int, statistic: str
) -> None:
    plan = TableRequest(
        ("REGION", "SEX"),
        statistic=statistic,  # type: ignore[arg-type]
        magnitudes=("sum:INCOME", "sum:HOURS"),
    ).bind(demo.catalog)
    plan = dataclasses.replace(plan, magnitudes=with_top(plan.magnitudes, top))
    df = pd.read_parquet(demo.path)
    aggs = [DuckDBEngine(threads=2).tabulate(demo, plan), MemoryEngine().tabulate(demo, plan)]
    regions, sexes = (d.codes for d in plan.dimensions)
    for name in ("INCOME", "HOURS"):
        c = np.abs(df[name].to_numpy() * (df.WEIGHT.to_numpy() if statistic == "both" else 1.0))
        for agg in aggs:
            got = agg.magnitudes[name].top
            assert got.shape == (top, len(regions) + 1, len(sexes) + 1)
            for i, r in enumerate([*regions, None]):
                for j, s in enumerate([*sexes, None]):
                    mask = np.ones(len(df), dtype=bool)
                    if r is not None:
                        mask &= (r == df.REGION).to_numpy()
                    if s is not None:
                        mask &= (s == df.SEX).to_numpy()
                    best = np.sort(c[mask])[::-1][:top]
                    assert np.array_equal(got[: best.size, i, j], best), (name, r, s)
        assert np.array_equal(aggs[0].magnitudes[name].top, aggs[1].magnitudes[name].top)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"top_k": 1, "p_percent": None},
        {"top_k": 3, "dominance": (3, 90.0)},
        {"method": "dp", "p_percent": None, "dominance": None},
    ],
)
def test_the_table_is_the_same_as_with_every_contribution(
    demo: Dataset, kwargs: dict[str, object]
) -> None:
    """Computing fewer largest contributions changes no published byte."""
    mags = MagnitudeProtection(**kwargs)  # type: ignore[arg-type]
    builder = TableBuilder(demo, protection_from_options("ckm"), magnitudes=mags)
    request = TableRequest(
        ("REGION", "AGEGRP"),
        statistic="count",
        magnitudes=("sum:INCOME", "mean:INCOME", "sum:HOURS"),
    )
    fast = builder.build(request)
    plan = request.bind(demo.catalog)
    full = dataclasses.replace(plan, grouping_sets=request.grouping_sets())
    assert all(m.top == TOP_K for m in full.magnitudes)
    slow = builder.protect(request, plan, builder.engine.tabulate(demo, full))
    assert (fast.to_csv(), fast.to_json()) == (slow.to_csv(), slow.to_json())


def test_too_few_contributions_is_an_internal_error(demo: Dataset) -> None:
    builder = TableBuilder(
        demo, protection_from_options("ckm"), magnitudes=MagnitudeProtection(top_k=3)
    )
    request = TableRequest(("SEX",), magnitudes=("sum:INCOME",))
    plan = request.bind(demo.catalog)
    short = dataclasses.replace(plan, magnitudes=with_top(plan.magnitudes, 2))
    with pytest.raises(InternalError, match="needs 3"):
        builder.protect(request, plan, builder.engine.tabulate(demo, short))


@pytest.mark.system
def test_spark_gives_the_same_bits_for_one_and_two(demo_dir: Path, spark: Any) -> None:
    ds = Dataset.open(demo_dir)
    plan = TableRequest(("REGION", "AGEGRP"), magnitudes=("sum:INCOME",)).bind(ds.catalog)
    for top in (1, 2):
        p = dataclasses.replace(plan, magnitudes=with_top(plan.magnitudes, top))
        cells = spark.tabulate(ds, p).magnitudes["INCOME"]
        duck = DuckDBEngine().tabulate(ds, p).magnitudes["INCOME"]
        assert np.array_equal(cells.total, duck.total)
        assert np.array_equal(cells.top, duck.top)


class PlansSeen:
    """A real engine that records the plans it is asked to tabulate."""

    def __init__(self) -> None:
        self.engine = DuckDBEngine()
        self.name = "duckdb"
        self.plans: list = []

    def ensure_valid(self, dataset):
        return self.engine.ensure_valid(dataset)

    def validate(self, dataset):
        return self.engine.validate(dataset)

    def tabulate(self, dataset, plan):
        self.plans.append(plan)
        return self.engine.tabulate(dataset, plan)


def test_the_server_path_asks_only_for_what_the_protection_uses(demo: Dataset) -> None:
    """With a site's rules (the server, and `table --config`) the path plans as without them."""
    from tablesafe._settings import RuleSettings

    engine = PlansSeen()
    mags = MagnitudeProtection(top_k=1, p_percent=None, dominance=None)
    prot = protection_from_options("ckm")
    ruled = TableBuilder(
        demo, prot, engine=engine, magnitudes=mags, rules=RuleSettings(min_universe_size=0)
    )
    request = TableRequest(("REGION",), magnitudes=("sum:INCOME",))
    table = ruled.build(request)
    assert [m.top for m in engine.plans[-1].magnitudes] == [1]
    plain = TableBuilder(demo, prot, engine=engine, magnitudes=mags)
    assert table.to_csv() == plain.build(request).to_csv()
