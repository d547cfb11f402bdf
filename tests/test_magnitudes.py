"""Magnitude tables: requests, exact sums in every engine, protection, rules (issue 17)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tablesafe import RequestError
from tablesafe._builder import TableBuilder
from tablesafe._cli._methods import protection_from_options
from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.catalog._magnitudes import from_magnitude_fixed, magnitude_fixed
from tablesafe.engines import DuckDBEngine, MemoryEngine
from tablesafe.mechanisms._magnitudes import (
    MagnitudeProtection,
    dominance_rule,
    p_percent_rule,
)
from tablesafe.mechanisms._num_ptable import num_ptable


@pytest.fixture(scope="module")
def demo(demo_dir: Path) -> Dataset:
    return Dataset.open(demo_dir)


# -- requests --------------------------------------------------------------------------


def test_statistic_items_move_to_magnitudes() -> None:
    r = TableRequest(("SEX",), statistic="count,sum:INCOME,mean:HOURS")  # type: ignore[arg-type]
    assert (r.statistic, r.magnitudes) == ("count", ("sum:INCOME", "mean:HOURS"))
    r = TableRequest(("SEX",), statistic="mean:HOURS")  # type: ignore[arg-type]
    assert (r.statistic, r.magnitudes) == ("count", ("mean:HOURS",))
    r = TableRequest(("SEX",), statistic="both", magnitudes=("sum:INCOME", "sum:INCOME"))
    assert r.magnitudes == ("sum:INCOME",)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"statistic": "count,weighted,sum:INCOME"}, "at most one of"),
        ({"statistic": "mode:INCOME"}, "sum:VAR or mean:VAR"),  # median: is a quantile
        ({"statistic": "sum:"}, "sum:VAR or mean:VAR"),
        ({"magnitudes": ("INCOME",)}, "sum:VAR or mean:VAR"),
    ],
)
def test_bad_statistic(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(RequestError, match=message):
        TableRequest(("SEX",), **kwargs)  # type: ignore[arg-type]


def test_bind_errors(demo: Dataset) -> None:
    with pytest.raises(RequestError, match="categorical variable, not a continuous one"):
        TableRequest(("SEX",), magnitudes=("sum:REGION",)).bind(demo.catalog)
    with pytest.raises(RequestError, match="available for: INCOME, HOURS"):
        TableRequest(("SEX",), magnitudes=("sum:WAGE",)).bind(demo.catalog)


def test_mean_over_an_empty_universe_is_refused(demo: Dataset) -> None:
    b = TableBuilder(demo, protection_from_options("none"))
    empty = TableRequest(("SEX",), universe={"AGE": [3]}, magnitudes=("mean:HOURS",))
    # Children under 15 are never employed, so their hours are all 0, but they exist:
    assert b.build(empty).magnitudes is not None
    request = TableRequest(
        ("SEX",), universe={"AGEGRP": [1], "EMPSTAT": [1]}, magnitudes=("mean:HOURS",)
    )
    with pytest.raises(RequestError, match="nothing to average over"):
        b.build(request)


# -- exact sums in every engine ------------------------------------------------------------


@pytest.mark.parametrize("statistic", ["count", "both"])
def test_engines_agree_with_brute_force(demo: Dataset, statistic: str) -> None:
    request = TableRequest(
        ("REGION", "AGEGRP"),
        statistic=statistic,  # type: ignore[arg-type]
        magnitudes=("sum:INCOME", "mean:HOURS"),
        universe={"SEX": [2]},
    )
    plan = request.bind(demo.catalog)
    duck = DuckDBEngine(threads=2).tabulate(demo, plan)
    mem = MemoryEngine().tabulate(demo, plan)
    df = pd.read_parquet(demo.path)
    df = df[df.SEX == 2]
    groups = {
        c.code: m
        for c, m in zip(
            demo.catalog.variable("AGEGRP").categories,
            demo.catalog.variable("AGEGRP").members or (),
            strict=True,
        )
    }
    age_to_group = {a: g for g, members in groups.items() for a in members}
    df = df.assign(AG=df.AGE.map(age_to_group))
    codes_r = plan.dimensions[0].codes
    codes_a = plan.dimensions[1].codes
    for name in ("INCOME", "HOURS"):
        contrib = df[name] * (df.WEIGHT if statistic == "both" else 1.0)
        df = df.assign(c=contrib, f=magnitude_fixed(contrib.to_numpy()))
        for engine_agg in (duck, mem):
            mag = engine_agg.magnitudes[name]
            for i, r in enumerate(codes_r):
                for j, a in enumerate(codes_a):
                    cell = df[(r == df.REGION) & (a == df.AG)]
                    assert mag.total[i, j] == from_magnitude_fixed(cell.f.sum())
                    best = np.sort(np.abs(cell.c.to_numpy()))[::-1][:3]
                    assert np.array_equal(mag.top[: best.size, i, j], best)
            # Margins too: the grand total and its three largest contributions.
            assert mag.total[-1, -1] == from_magnitude_fixed(df.f.sum())
            top3 = np.sort(np.abs(df.c.to_numpy()))[::-1][:3]
            assert np.array_equal(mag.top[:, -1, -1], top3)
        assert np.array_equal(duck.magnitudes[name].total, mem.magnitudes[name].total)


# -- same request, same bytes; counts untouched ---------------------------------------------------


@pytest.mark.parametrize("method", ["ckm", "dp"])
def test_same_bytes_across_engines_and_threads(demo: Dataset, method: str) -> None:
    prot = protection_from_options("ckm")
    mags = MagnitudeProtection(method=method)  # type: ignore[arg-type]
    request = TableRequest(
        ("REGION", "SEX", "AGEGRP"), statistic="count", magnitudes=("sum:INCOME", "mean:INCOME")
    )
    outputs = set()
    for engine in (DuckDBEngine(threads=1), DuckDBEngine(threads=2), MemoryEngine()):
        table = TableBuilder(demo, prot, engine=engine, magnitudes=mags).build(request)
        outputs.add((table.to_csv(), table.to_json()))
    assert len(outputs) == 1


def test_counts_and_weighted_figures_unchanged(demo: Dataset) -> None:
    prot = protection_from_options("ckm")
    plain = TableRequest(("REGION", "SEX"), statistic="both")
    with_mags = TableRequest(("REGION", "SEX"), statistic="both", magnitudes=("mean:INCOME",))
    a = TableBuilder(demo, prot).build(plain)
    b = TableBuilder(demo, prot).build(with_mags)
    assert np.array_equal(a.counts, b.counts)  # type: ignore[arg-type]
    assert np.array_equal(a.weighted, b.weighted)  # type: ignore[arg-type]
    # A weighted mean is the protected weighted sum over the protected weighted count.
    mean = b.statistics()["mean_INCOME_weighted"]
    assert np.all(np.isfinite(mean[b.computed]))


def test_consistency_same_cell_same_value(demo: Dataset) -> None:
    """A cell gets the same protected sum in every table that publishes it."""
    b = TableBuilder(demo, protection_from_options("ckm"))
    one = b.build(TableRequest(("REGION",), magnitudes=("sum:INCOME",)))
    two = b.build(TableRequest(("REGION", "SEX"), magnitudes=("sum:INCOME",)))
    three = b.build(TableRequest(("SEX", "REGION"), magnitudes=("sum:INCOME",)))
    s1, s2 = one.statistics()["sum_INCOME_weighted"], two.statistics()["sum_INCOME_weighted"]
    s3 = three.statistics()["sum_INCOME_weighted"]
    assert np.array_equal(s1[:-1], s2[:-1, -1])  # REGION margin of REGION x SEX
    assert np.array_equal(s2, s3.T)
    assert s1[-1] == s2[-1, -1]


# -- the numeric ptable ------------------------------------------------------------------------


def test_num_ptable_matches_create_num_ptable_example() -> None:
    """``create_num_ptable(D = 5, V = 2, step = 4, icat = c(1, 3, 5))``, the package's example.

    Checked from the documented construction: rows 0, 1, 3, 5; perturbed
    values j from max(i - D, 0) to i + D by 1/step; each row unbiased with
    variance at most V (exactly V in the symmetric row i = D, which has
    2 * D * step + 1 entries), monotone up to v = 0, no probability below
    1e-8, bounds rounded to 8 digits.
    """
    pt = num_ptable(5, 2, step=4, icat=(1, 3, 5))
    assert pt.rows == (0, 1, 3, 5)
    assert pt.v[0].tolist() == [0.0] and pt.p[0].tolist() == [1.0]
    for i, v, p, ub in zip(pt.rows[1:], pt.v[1:], pt.p[1:], pt.ub[1:], strict=True):
        j = np.round(i + v, 4)
        assert j[0] == max(i - 5, 0) and j[-1] == i + 5
        assert np.allclose(np.diff(j), 0.25)
        assert abs(p.sum() - 1) < 1e-8 and ub[-1] == 1.0
        assert abs(float(p @ v)) < 1e-7
        assert float(p @ (v * v)) <= 2 + 1e-7
        assert p.min() >= 1e-8 - 1e-8
        zero = int(np.flatnonzero(v == 0)[0])
        assert np.all(np.diff(p[: zero + 1]) >= -1e-8)
        assert np.array_equal(ub, np.round(ub, 8))
    sym_v, sym_p = pt.v[-1], pt.p[-1]
    assert sym_v.size == 2 * 5 * 4 + 1
    assert abs(float(sym_p @ (sym_v * sym_v)) - 2) < 1e-6
    assert np.allclose(sym_p, sym_p[::-1], atol=1e-7)
    # The R layout: (i, j, p, v, p_int_lb, p_int_ub).
    rows = pt.table()
    assert len(rows) == 1 + 25 + 33 + 41 and rows[0] == (0, 0.0, 1.0, 0.0, 0.0, 1.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"D": 5, "V": 2, "icat": (1, 3)}, "icat must hold 1 and D"),
        ({"D": 5, "V": 2, "icat": (1, 5, 7)}, "icat must hold 1 and D"),
        ({"D": 5, "V": 2, "icat": (1, "a", 5)}, "icat must be whole numbers"),
        ({"D": 5, "V": 2, "icat": (1, 2.5, 5)}, "icat must be whole numbers"),
        ({"D": 10, "V": 2, "step": 5}, "below 50"),
        ({"D": 0, "V": 2}, "D must be a whole number from 1 to 10"),
        ({"D": 3, "V": 0}, "V \\(variance\\)"),
    ],
)
def test_num_ptable_refuses_what_r_refuses(kwargs: dict[str, object], message: str) -> None:
    from tablesafe import ParameterError

    with pytest.raises(ParameterError, match=message):
        num_ptable(**kwargs)  # type: ignore[arg-type]


def test_lookup_keeps_the_sign() -> None:
    pt = num_ptable(3, 1, step=2)
    u = (np.arange(4000) + 0.5) / 4000
    for a in (0.5, 1.0, 2.0, 3.0, 7.5):
        v = pt.lookup(pt.row_for(np.full(u.size, min(a, 3))), u)
        assert v.min() >= -a  # X + v * x_delta never changes sign
        assert abs(v.mean()) < 0.01


# -- sensitivity rules, by hand ---------------------------------------------------------------------


def test_rules_on_hand_computed_cells() -> None:
    total = np.array([100.0, 100.0, 100.0, 7.0, 0.0])
    top = np.array([[90, 50, 40, 7, 0], [5, 30, 35, 0, 0], [3, 10, 10, 0, 0]], dtype=float)
    # (1, 85): x1 > 85% of the total: 90 > 85 only in the first (and the one-record cell).
    assert dominance_rule(total, top, 1, 85).tolist() == [True, False, False, True, False]
    # (2, 75): 95, 80, 75 (not above), 7.
    assert dominance_rule(total, top, 2, 75).tolist() == [True, True, False, True, False]
    # p% with p = 10: X - x1 - x2 = 5, 20, 25, 0 against 9, 5, 4, 0.7.
    assert p_percent_rule(total, top, 10).tolist() == [True, False, False, True, False]
    # p = 70: 25 < 28 makes the third sensitive; 20 < 35 the second.
    assert p_percent_rule(total, top, 70).tolist() == [True, True, True, True, False]


def test_suppress_blanks_sensitive_cells(demo: Dataset) -> None:
    request = TableRequest(("REGION", "AGE", "OCC"), magnitudes=("sum:INCOME", "mean:INCOME"))
    prot = protection_from_options("ckm")
    flag = TableBuilder(demo, prot).build(request)
    hide = TableBuilder(demo, prot, magnitudes=MagnitudeProtection(action="suppress")).build(
        request
    )
    sens = flag.sensitive["INCOME"]  # type: ignore[index]
    assert sens.any() and not sens.all()
    assert np.isnan(hide.statistics()["sum_INCOME_weighted"][sens]).all()
    assert np.isnan(hide.statistics()["mean_INCOME_weighted"][sens]).all()
    kept = flag.computed & ~sens
    assert np.array_equal(
        hide.statistics()["sum_INCOME_weighted"][kept],
        flag.statistics()["sum_INCOME_weighted"][kept],
    )
    # Flags are published as columns; blanks as empty CSV fields.
    assert "sensitive_INCOME" in flag.to_csv().splitlines()[0]
    assert ",," in hide.to_csv()


# -- DP sums: the noise scale -------------------------------------------------------------------------


def test_dp_table_noise_and_statement(demo: Dataset) -> None:
    from scipy import stats

    mags = MagnitudeProtection(method="dp", epsilon=10.0)
    request = TableRequest(
        ("REGION", "AGE", "SEX"), statistic="count", margins="none", magnitudes=("sum:HOURS",)
    )
    prot = protection_from_options("ckm")
    table = TableBuilder(demo, prot, magnitudes=mags).build(request)
    truth = TableBuilder(demo, protection_from_options("none")).tabulate(request)
    true = truth.aggregates.magnitudes["HOURS"].total
    got = table.statistics()["sum_HOURS"]
    b = 99 / 10.0
    cells = table.computed & (true > 30 * b)
    assert cells.sum() > 300
    diff = (got - true)[cells]
    assert stats.kstest(diff, stats.laplace(scale=b).cdf).pvalue > 1e-3
    meta = table.public_metadata()["magnitudes"]
    assert meta["epsilon"] == 10.0 and meta["laplace_scale"] == {"HOURS": b}


def test_weighted_dp_is_refused(demo: Dataset) -> None:
    mags = MagnitudeProtection(method="dp")
    request = TableRequest(("REGION",), statistic="both", magnitudes=("sum:HOURS",))
    with pytest.raises(RequestError, match="unweighted sums only"):
        TableBuilder(demo, protection_from_options("ckm"), magnitudes=mags).build(request)


# -- the differencing attack on the largest contributor ----------------------------------------------


def differencing_errors(
    make_dataset, method: str, trials: int = 40, others: int = 60
) -> np.ndarray:
    """Relative errors of the attacker's estimate of the largest contribution.

    One cell (A = 1) holds a dominant record (income 500,000, C = 9) and
    ``others`` records of ordinary incomes (C in 0..8). The attacker asks for
    the income of A = 1 twice, over all of C and over C in 0..8: the two
    published sums differ by exactly the dominant record, so their
    difference estimates it. Each trial draws fresh record keys.
    """
    import copy

    from tsdata import RANDOM_CATALOG

    raw = copy.deepcopy(RANDOM_CATALOG)
    raw["magnitudes"] = [{"name": "INC", "lower": 0, "upper": 1_000_000}]
    errors = []
    for t in range(trials):
        rng = np.random.default_rng(100 + t)
        n = others + 1
        frame = pd.DataFrame(
            {
                "A": np.ones(n, dtype=np.int64),
                "B": rng.choice(list("xyzw"), n),
                "C": np.r_[rng.integers(0, 9, others), 9],
                "D": rng.integers(1, 3, n),
                "E": rng.choice([10, 20, 30], n),
                "W": rng.uniform(5, 50, n),
                "RKEY": rng.integers(0, 2**32, n, dtype=np.uint32),
                "INC": np.r_[np.round(rng.lognormal(10, 0.5, others)), 500_000.0],
            }
        )
        for r in range(4):
            frame[f"R{r + 1}"] = frame.W
        ds = make_dataset(frame, raw)
        b = TableBuilder(ds, protection_from_options(method), engine=MemoryEngine())
        whole = b.build(TableRequest(("A",), statistic="count", magnitudes=("sum:INC",)))
        part = b.build(
            TableRequest(
                ("A",),
                statistic="count",
                universe={"C": list(range(9))},
                magnitudes=("sum:INC",),
            )
        )
        est = whole.statistics()["sum_INC"][0] - part.statistics()["sum_INC"][0]
        errors.append(abs(est - 500_000.0) / 500_000.0)
    return np.array(errors)


def test_differencing_does_not_recover_the_largest_contributor(make_dataset) -> None:
    # Unprotected sums give the record away exactly: the attack works.
    assert np.all(differencing_errors(make_dataset, "none", trials=3) == 0)
    # Protected: the sum with the record moves by at least share * mu = 5% of it,
    # and the ordinary incomes' noise (x_(2) ~ 60,000 at most) cannot cancel that.
    errors = differencing_errors(make_dataset, "ckm")
    assert errors.min() > 0.01
    assert np.median(errors) > 0.05


@pytest.mark.parametrize("margins", ["none", "total", "all"])
@pytest.mark.parametrize("method", ["none", "ckm"])
def test_means_without_the_grand_total(demo: Dataset, margins: str, method: str) -> None:
    # A table without the universe's total (margins "none") still has means, the
    # same as in the table with every margin; an empty universe is still refused.
    b = TableBuilder(demo, protection_from_options(method))
    full = b.build(TableRequest(("REGION", "SEX"), magnitudes=("mean:INCOME",)))
    part = b.build(TableRequest(("REGION", "SEX"), margins=margins, magnitudes=("mean:INCOME",)))
    assert part.magnitudes is not None and full.magnitudes is not None
    a, f = part.magnitudes["mean_INCOME_weighted"], full.magnitudes["mean_INCOME_weighted"]
    shown = ~np.isnan(a)
    assert shown[:-1, :-1].all()
    np.testing.assert_array_equal(a[shown], f[shown])
    empty = TableRequest(
        ("SEX",),
        universe={"AGEGRP": [1], "EMPSTAT": [1]},
        margins=margins,
        magnitudes=("mean:HOURS",),
    )
    with pytest.raises(RequestError, match="nothing to average over"):
        b.build(empty)
