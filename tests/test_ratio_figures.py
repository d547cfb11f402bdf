"""Means and percentages are ratios of protected figures, rounded once (issue 38, items 1, 2 and 4).

* A mean or percentage divides protected figures before rounding: it does not
  change with the rounding of the weighted figures beside it, and unprotected
  it is the ratio of the exact sums, computed here by hand from the microdata.
* At any rounding every published estimate (weighted count, sum, mean,
  percentage) lies inside its own published interval.
* The precision rule judges a mean of a variable with item non-response on
  the records that hold a value (NHANES II race 2 / diabetes 1 / highlead 0:
  35 records, 26 with serum zinc).
* Without protection a margin is the true total rounded once, not a sum of
  rounded cells.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from survey_designs import nhanes2_dataset, outside_intervals, schools_dataset
from tablesafe import Dataset, Protection, TableBuilder, TableRequest
from tablesafe._settings import RuleSettings
from tablesafe.mechanisms import destatis, drop_add_records

SECRET = b"0123456789abcdef0123456789abcdef"
ROUNDINGS = ("1", "1000", "1000000", "3sf")
PROTECTIONS = {
    "none": lambda r: Protection(None, rounding=r),
    "ckm": lambda r: Protection(destatis(3, 1.0), rounding=r),
    "ckm-independent": lambda r: Protection(destatis(3, 1.0), additivity="independent", rounding=r),
    "q-records": lambda r: Protection(
        drop_add_records(0.05), seeds="keyed", secret=SECRET, rounding=r
    ),
}
SCHOOLS = TableRequest(
    ("stype", "sch_wide"),
    statistic="weighted,percent:row,percent:column,mean:api00,mean:avg_ed,sum:api00",
    replicates=True,
)


@pytest.fixture(scope="module")
def schools(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return Dataset.open(schools_dataset(tmp_path_factory.mktemp("schools") / "ds"))


def _inside(table) -> None:
    """Every published estimate inside its own published interval (ends included)."""
    for name, (bad, shown) in outside_intervals(table).items():
        assert bad == 0, (name, bad, shown)
        assert shown > 0, name
    columns = {"weighted": table.weighted, **(table.magnitudes or {})}
    lows = {"weighted": table.ci_low, **{k: v for k, v in (table.magnitudes or {}).items()}}
    for name, values in columns.items():
        low = lows.get(f"{name}_ci_low") if name != "weighted" else table.ci_low
        high = (
            (table.magnitudes or {}).get(f"{name}_ci_high") if name != "weighted" else table.ci_high
        )
        if low is None or high is None:
            continue
        has = ~np.isnan(values) & ~np.isnan(low)
        assert has.any(), name
        assert np.all((low[has] <= values[has]) & (values[has] <= high[has])), name


@pytest.mark.parametrize("name", list(PROTECTIONS))
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_every_estimate_lies_inside_its_own_interval(schools, name, rounding):
    _inside(TableBuilder(schools, PROTECTIONS[name](rounding)).build(SCHOOLS))


@pytest.mark.parametrize("name", list(PROTECTIONS))
def test_means_and_percentages_do_not_move_with_the_rounding(schools, name):
    full = TableBuilder(schools, PROTECTIONS[name]("1e-9")).build(SCHOOLS)
    ratios = {
        k: v
        for k, v in {**full.percentages, **full.magnitudes}.items()
        if k.startswith(("percent_", "mean_")) and not k.endswith(("_se", "_ci_low", "_ci_high"))
    }
    assert len(ratios) == 4
    for rounding in ROUNDINGS:
        table = TableBuilder(schools, PROTECTIONS[name](rounding)).build(SCHOOLS)
        columns = {**table.percentages, **table.magnitudes}
        for column, values in ratios.items():
            np.testing.assert_array_equal(columns[column], values, err_msg=f"{column} {rounding}")
        # Their standard errors do not move either: the rounding is not part of them.
        np.testing.assert_array_equal(
            table.magnitudes["mean_api00_weighted_se"], full.magnitudes["mean_api00_weighted_se"]
        )


def test_standard_errors_are_rounded_as_their_estimate(schools):
    # docs/precision.md: a standard error under half the unit is published as 0.
    request = TableRequest(("stype", "sch_wide", "awards"), statistic="weighted", replicates=True)
    full = TableBuilder(schools, Protection(destatis(3, 1.0), rounding="1e-9")).build(request)
    table = TableBuilder(schools, Protection(destatis(3, 1.0), rounding="1000")).build(request)
    shown = ~np.isnan(full.se)
    np.testing.assert_array_equal(table.se[shown], 1000 * np.rint(full.se[shown] / 1000))
    assert np.any(table.se[shown] == 0) and np.any(table.se[shown] > 0)


def test_unprotected_means_and_percentages_are_the_ratios_of_the_exact_sums(schools):
    micro = pd.read_parquet(schools.path)
    table = TableBuilder(schools, Protection(None, rounding="1000")).build(SCHOOLS)
    codes = [[*d.codes, None] for d in table.dimensions]
    for i, stype in enumerate(codes[0]):
        for j, wide in enumerate(codes[1]):
            keep = np.ones(len(micro), dtype=bool)
            if stype is not None:
                keep &= micro["stype"].to_numpy() == stype
            if wide is not None:
                keep &= micro["sch_wide"].to_numpy() == wide
            cell = micro[keep]
            row = micro[micro["stype"] == stype] if stype is not None else micro
            w = cell["pw"]
            assert table.magnitudes["mean_api00_weighted"][i, j] == round(
                float((w * cell["api00"]).sum() / w.sum()), 2
            )
            has = cell["avg_ed"].notna()
            assert table.magnitudes["mean_avg_ed_weighted"][i, j] == round(
                float((w[has] * cell["avg_ed"][has]).sum() / w[has].sum()), 2
            )
            assert table.percentages["percent_row"][i, j] == round(
                float(100 * w.sum() / row["pw"].sum()), 2
            )
            # The weighted count itself is rounded to thousands, once (margins too).
            assert table.weighted[i, j] == 1000 * round(float(w.sum()) / 1000)


def test_unprotected_margins_are_true_totals_rounded_once(schools):
    request = TableRequest(("stype", "sch_wide", "awards"), statistic="weighted")
    table = TableBuilder(schools, Protection(None, rounding="100")).build(request)
    exact = TableBuilder(schools, Protection(None, rounding="1e-9")).build(request)
    np.testing.assert_array_equal(table.weighted, 100 * np.rint(exact.weighted / 100))
    micro = pd.read_parquet(schools.path)
    assert table.weighted[-1, -1, -1] == 100 * round(float(micro["pw"].sum()) / 100)
    # Summed from rounded cells, some margins would differ from these (the check has teeth).
    w = table.weighted
    inner = w[:-1, :-1, :-1]
    margins = (w[-1, :-1, :-1], w[:-1, -1, :-1], w[:-1, :-1, -1])
    assert any(not np.array_equal(inner.sum(axis=a), m) for a, m in enumerate(margins))


def test_protected_additive_margins_still_add_up(schools):
    table = TableBuilder(schools, Protection(destatis(3, 1.0), rounding="100")).build(
        TableRequest(("stype", "sch_wide"), statistic="weighted")
    )
    assert table.weighted[-1, -1] == table.weighted[:-1, :-1].sum()
    assert np.array_equal(table.weighted[:-1, -1], table.weighted[:-1, :-1].sum(axis=1))


# -- NHANES II ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nhanes2(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return Dataset.open(nhanes2_dataset(tmp_path_factory.mktemp("nhanes2") / "ds"))


@pytest.mark.system
def test_nhanes_mean_zinc_is_rs_at_every_rounding(nhanes2):
    # R survey 4.1.1, svyby(~zinc, ~region+race, design, svymean, na.rm=TRUE): 84.04 in
    # region 3, race 2; rounding the weighted counts to millions published 77.38.
    request = TableRequest(("region", "race"), statistic="weighted,mean:zinc", replicates=True)
    cat = nhanes2.catalog
    at = (list(cat.variable("region").codes).index(3), list(cat.variable("race").codes).index(2))
    for rounding in ROUNDINGS:
        for name in ("none", "ckm"):
            table = TableBuilder(nhanes2, PROTECTIONS[name](rounding)).build(request)
            _inside(table)
            if name == "none":
                assert table.magnitudes["mean_zinc_weighted"][at] == 84.04


@pytest.mark.system
def test_the_precision_rule_judges_a_mean_on_the_records_with_a_value(nhanes2):
    rules = RuleSettings(
        max_rse=50, min_effective_count=30, min_universe_size=0, min_cell_size=0,
        unreliable_action="flag",
    )  # fmt: skip
    request = TableRequest(
        ("race", "diabetes", "highlead"), statistic="both,mean:zinc", replicates=True
    )
    table = TableBuilder(nhanes2, Protection(None), rules=rules).build(request)
    cat = nhanes2.catalog
    at = tuple(
        list(cat.variable(v).codes).index(c)
        for v, c in (("race", 2), ("diabetes", 1), ("highlead", 0))
    )
    assert table.counts[at] == 35 and table.magnitudes["n_zinc"][at] == 26
    # The cell holds 35 records, more than 30, but its mean rests on 26.
    assert not table.unreliable["weighted"][at]
    assert table.unreliable["mean_zinc_weighted"][at]
    # Every mark of the mean is the rule's on the base's counts, cell by cell.
    base = table.magnitudes["n_zinc"]
    marked = table.unreliable["mean_zinc_weighted"]
    mean, se = table.magnitudes["mean_zinc_weighted"], table.magnitudes["mean_zinc_weighted_se"]
    shown = table.computed & ~np.isnan(mean) & (mean != 0)
    expect = shown & ((base < 30) | np.isnan(se) | (100 * se / np.abs(mean) > 50))
    np.testing.assert_array_equal(marked, expect)
