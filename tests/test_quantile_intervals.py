"""Quantiles' own rounding, standard errors, intervals and the precision rule (issue 38, item 3).

* Rounded to 3 significant figures by default (``quantile_rounding``): a
  median of a 1-5 scale keeps its decimals (it was 3 in every stratum).
* Woodruff's interval from the replicate weights, computed here by brute
  force from the records (the share at or below the quantile, its replicate
  standard error, the quantiles at that share -/+ 1.96 standard errors) and
  against R ``survey``'s ``svyquantile`` in ``tests/test_r_survey.py``.
* Protected: each end is a quantile protected as quantiles are (within its
  window's noise of the exact end), and the published quantile lies inside.
* The precision rule marks quantiles as it marks means, on their base.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from survey_designs import schools_dataset
from tablesafe import Dataset, Protection, TableBuilder, TableRequest
from tablesafe._settings import RuleSettings
from tablesafe.mechanisms import destatis
from tablesafe.mechanisms._magnitudes import MagnitudeMethod, MagnitudeProtection

Z = 1.959963984540054
EXACT = MagnitudeProtection(method=MagnitudeMethod.NONE, quantile_rounding="1e-9")
REQUEST = TableRequest(
    ("stype", "sch_wide"),
    statistic="weighted,median:avg_ed,quantile:api00:0.25",
    replicates=True,
)


@pytest.fixture(scope="module")
def schools(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return Dataset.open(schools_dataset(tmp_path_factory.mktemp("schools") / "ds"))


def hf1(x: np.ndarray, w: np.ndarray, p: float) -> float:
    """The smallest value whose cumulative weight reaches p of the total (R's qrule "math")."""
    order = np.argsort(x, kind="stable")
    cum = np.cumsum(w[order])
    return float(x[order][np.searchsorted(cum, p * cum[-1] * (1 - 1e-12), side="left")])


def woodruff(x: np.ndarray, w: np.ndarray, reps: np.ndarray, p: float, c: float):
    """Quantile, standard error and interval, as svyquantile(interval.type = "mean", df = Inf)."""
    q = hf1(x, w, p)
    share = w[x <= q].sum() / w.sum()
    shares = np.array([r[x <= q].sum() / r.sum() for r in reps])
    se = math.sqrt(c * float(((shares - share) ** 2).sum()))
    low = hf1(x, w, share - Z * se) if share - Z * se >= 0 else math.nan
    high = hf1(x, w, share + Z * se) if share + Z * se <= 1 else math.nan
    return q, (high - low) / (2 * Z), low, high


def _cells(table):
    for at in zip(*np.nonzero(table.computed), strict=True):
        yield (
            at,
            [
                None if i == d.size else d.codes[i]
                for i, d in zip(at, table.dimensions, strict=True)
            ],
        )


def test_a_median_of_a_scale_keeps_its_significant_figures(schools):
    table = TableBuilder(schools, Protection(None)).build(
        TableRequest(("stype",), statistic="weighted,median:avg_ed")
    )
    micro = pd.read_parquet(schools.path)
    medians = table.magnitudes["median_avg_ed_weighted"]
    for at, (stype,) in _cells(table):
        sub = micro if stype is None else micro[micro["stype"] == stype]
        sub = sub[sub["avg_ed"].notna()]
        exact = hf1(sub["avg_ed"].to_numpy(), sub["pw"].to_numpy(), 0.5)
        assert medians[at] == float(f"{exact:.3g}")
    assert len({float(m) for m in medians}) > 1  # not 3 in every stratum
    assert table.metadata["quantiles"]["rounding"] == "3sf"


def test_unprotected_intervals_are_woodruffs_by_brute_force(schools):
    table = TableBuilder(schools, Protection(None), magnitudes=EXACT).build(REQUEST)
    micro = pd.read_parquet(schools.path)
    design = schools.catalog.replicates
    assert design is not None
    checked = 0
    for column, var, p in (
        ("median_avg_ed_weighted", "avg_ed", 0.5),
        ("p25_api00_weighted", "api00", 0.25),
    ):
        for at, (stype, wide) in _cells(table):
            keep = micro[var].notna().to_numpy().copy()
            if stype is not None:
                keep &= (micro["stype"] == stype).to_numpy()
            if wide is not None:
                keep &= (micro["sch_wide"] == wide).to_numpy()
            sub = micro[keep]
            reps = sub[list(design.columns)].to_numpy().T
            q, se, low, high = woodruff(
                sub[var].to_numpy(), sub["pw"].to_numpy(), reps, p, design.coefficient
            )
            assert table.magnitudes[column][at] == pytest.approx(q, abs=1e-9)
            if keep.sum() < 10 or math.isnan(se):
                assert math.isnan(table.magnitudes[f"{column}_se"][at])
                continue
            assert table.magnitudes[f"{column}_se"][at] == pytest.approx(se, abs=1e-8)
            assert table.magnitudes[f"{column}_ci_low"][at] == pytest.approx(low, abs=1e-9)
            assert table.magnitudes[f"{column}_ci_high"][at] == pytest.approx(high, abs=1e-9)
            checked += 1
    assert checked >= 16


def test_protected_ends_are_protected_quantiles_around_the_published_one(schools):
    exact = TableBuilder(schools, Protection(None), magnitudes=EXACT).build(REQUEST)
    prot = MagnitudeProtection(quantile_min_count=11, quantile_rounding="1e-9")
    table = TableBuilder(schools, Protection(destatis(3, 1.0)), magnitudes=prot).build(REQUEST)
    high_move = prot.quantile_move[1]
    moved = 0
    for column in ("median_avg_ed_weighted", "p25_api00_weighted"):
        q = table.magnitudes[column]
        se, low, high = (table.magnitudes[f"{column}_{s}"] for s in ("se", "ci_low", "ci_high"))
        shown = ~np.isnan(se)
        assert shown.any()
        assert np.all((low[shown] <= q[shown]) & (q[shown] <= high[shown]))
        np.testing.assert_allclose(se[shown], (high - low)[shown] / (2 * Z), atol=1e-9)
        assert np.array_equal(np.isnan(low), np.isnan(se)) and np.array_equal(
            np.isnan(high), np.isnan(se)
        )
        for end in ("ci_low", "ci_high"):
            mine, truth = table.magnitudes[f"{column}_{end}"], exact.magnitudes[f"{column}_{end}"]
            # Where not moved out to the quantile, an end is the exact end (the same rank:
            # the shares are the exact ones) moved by its window's noise, at most the
            # largest move times the largest spread.
            free = shown & (mine != q) & ~np.isnan(truth)
            assert np.all(
                np.abs(mine - truth)[free]
                <= high_move * prot.quantile_cap * np.abs(truth[free]) + 1e-9
            )
            moved += int((free & (mine != truth)).sum())
    assert moved > 0


def test_the_precision_rule_marks_quantiles(schools):
    rules = RuleSettings(
        max_rse=3, min_effective_count=40, min_universe_size=0, min_cell_size=0,
        unreliable_action="flag",
    )  # fmt: skip
    table = TableBuilder(schools, Protection(None), rules=rules).build(REQUEST)
    marks = table.unreliable["median_avg_ed_weighted"]
    median = table.magnitudes["median_avg_ed_weighted"]
    se = table.magnitudes["median_avg_ed_weighted_se"]
    base = table.estimate_counts["median_avg_ed_weighted"]
    shown = table.computed & ~np.isnan(median) & (median != 0)
    expect = shown & (np.isnan(se) | (100 * se / np.abs(median) > 3) | (base < 40))
    np.testing.assert_array_equal(marks, expect)
    assert marks.any() and not marks[shown].all()
    # The base is the records with a value: some cells hold more records than that.
    assert np.any(base[table.computed] < table.base_counts[table.computed])


def test_footnotes_state_the_intervals(schools):
    for protection, words in (
        (Protection(None), "each end the exact quantile there"),
        (Protection(destatis(3, 1.0)), "each end protected as a quantile is"),
    ):
        table = TableBuilder(schools, protection).build(REQUEST)
        notes = table.footnotes()["statement"]
        sentence = table.metadata["quantiles"]["intervals"]
        assert sentence in notes and words in sentence and "Woodruff" in sentence
        assert f"at least {protection.se_threshold()}" in sentence


def test_a_workbook_shows_quantiles_with_their_published_decimals(schools):
    # XLSX: medians of a 1-5 scale at 2 significant figures (2.8) have 1 decimal, not the 2
    # of the means' rounding.
    import io

    from openpyxl import load_workbook

    mags = MagnitudeProtection(method=MagnitudeMethod.NONE, quantile_rounding="2sf")
    table = TableBuilder(schools, Protection(None), magnitudes=mags).build(
        TableRequest(("stype",), statistic="weighted,median:avg_ed")
    )
    book = load_workbook(io.BytesIO(table.to_xlsx_bytes()))
    sheet = next(s for s in book.worksheets if "median" in s.title.lower())
    cells = [c for row in sheet.iter_rows() for c in row[1:] if isinstance(c.value, float)]
    assert cells and {c.number_format for c in cells} == {"#,##0.0"}
