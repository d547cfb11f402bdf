"""Standard errors with the protection's variance, and intervals that cover (issue 29).

Two simulations with fixed Generators:

* no sampling variance (every replicate weight is the weight): the standard
  error is the protection's alone, and ``(W' - W) / se`` over hundreds of
  cells has a mean square near 1 and the 95% intervals cover the true
  weighted count (and the true percentage) about 95% of the time;
* a finite population, a stratified two-PSU sample from it (JK2 replicates
  from ``replicates add``'s code), the cell-key method on top: the stated
  95% interval covers the population count at about its nominal rate, and
  every standard error is at least the sampling one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tablesafe import Dataset, Protection, TableBuilder, TableRequest
from tablesafe._request import Percent
from tablesafe.catalog._magnitudes import MAGNITUDE_SCALE
from tablesafe.mechanisms import destatis, drop_add_records
from tablesafe.mechanisms._precision import (
    count_noise_mean_square,
    denominator_index,
    percent_of,
    weighted_noise_variance,
)
from tablesafe.mechanisms._variance import replicate_se
from tablesafe.prepare._catalog_init import init_catalog
from tablesafe.prepare._replicates import add_replicates
from tsdata import write_dataset

SECRET = b"0123456789abcdef0123456789abcdef"


def _catalog(a: int, b: int) -> dict:
    # The coefficient is declared: a test may change weights without their replicates
    # (then they scale by no jackknife's factor, and validation would refuse a default).
    return {
        "dataset": {
            "title": "precision",
            "record_key": "RKEY",
            "weight": "W",
            "replicate_weights": ["R1", "R2", "R3", "R4"],
            "replicate_method": "JK1",
            "replicate_coefficient": 0.75,
        },
        "variables": [
            {"name": "A", "categories": [{"code": i, "label": f"a{i}"} for i in range(a)]},
            {"name": "B", "categories": [{"code": i, "label": f"b{i}"} for i in range(b)]},
        ],
    }


@pytest.fixture(scope="module")
def census(tmp_path_factory: pytest.TempPathFactory) -> tuple[Dataset, pd.DataFrame]:
    """Records whose replicate weights all equal the weight: no sampling variance."""
    rng = np.random.default_rng(2929)
    n = 24_000
    frame = pd.DataFrame(
        {
            "A": rng.integers(0, 20, n),
            "B": rng.choice(15, n, p=np.arange(15, 0, -1) / 120),
            "W": rng.uniform(5, 60, n),
            "RKEY": rng.integers(0, 2**32, n, dtype=np.uint32),
        }
    )
    for r in range(1, 5):
        frame[f"R{r}"] = frame["W"]
    return write_dataset(tmp_path_factory.mktemp("census"), frame, _catalog(20, 15)), frame


def _truth(frame: pd.DataFrame, shape: tuple[int, ...]) -> np.ndarray:
    """Exact weighted counts on the extended grid (margins included), by brute force."""
    inner = np.zeros(tuple(s - 1 for s in shape))
    np.add.at(inner, (frame["A"].to_numpy(), frame["B"].to_numpy()), frame["W"].to_numpy())
    out = np.zeros(shape)
    out[:-1, :-1] = inner
    out[-1, :-1] = inner.sum(axis=0)
    out[:-1, -1] = inner.sum(axis=1)
    out[-1, -1] = inner.sum()
    return out


PROTECTIONS = {
    "ckm-aggregate": lambda: Protection(destatis(3, 1.0), rounding="0.001"),
    "ckm-independent": lambda: Protection(
        destatis(3, 1.0), additivity="independent", rounding="0.001"
    ),
    "ckm-wide": lambda: Protection(destatis(6, 6.0), weight_noise=2.0, rounding="0.001"),
    "q-records": lambda: Protection(
        drop_add_records(0.05), seeds="keyed", secret=SECRET, rounding="0.001"
    ),
}


@pytest.mark.parametrize("name", list(PROTECTIONS))
def test_the_protections_standard_error_is_calibrated(census, name):
    dataset, frame = census
    table = TableBuilder(dataset, PROTECTIONS[name]()).build(
        TableRequest(("A", "B"), statistic="weighted,percent:row,percent:column", replicates=True)
    )
    truth = _truth(frame, table.shape)
    shown = ~np.isnan(table.se)
    assert shown.sum() > 250
    z = (table.weighted - truth)[shown] / table.se[shown]
    assert 0.6 < float(np.mean(z**2)) < 1.4, float(np.mean(z**2))
    covered = (table.ci_low <= truth) & (truth <= table.ci_high)
    assert 0.9 <= covered[shown].mean() <= 1.0
    for kind in (Percent.ROW, Percent.COLUMN):
        col = kind.column_name
        se = table.percentages[f"{col}_se"]
        live = ~np.isnan(se) & (se > 0)
        assert live.sum() > 250
        zp = (table.percentages[col] - percent_of(truth, kind))[live] / se[live]
        assert 0.5 < float(np.mean(zp**2)) < 1.5, (kind, float(np.mean(zp**2)))


def test_without_protection_there_is_no_added_variance(census):
    dataset, _ = census
    table = TableBuilder(dataset, Protection(None)).build(
        TableRequest(("A", "B"), statistic="weighted,percent:row", replicates=True)
    )
    shown = ~np.isnan(table.se)
    assert shown.any() and np.all(table.se[shown] == 0)
    assert table.metadata["se_perturbation"] is False


def test_noise_variance_formula_by_hand():
    table = destatis(3, 1.0)
    counts = np.array([[0, 1, 2], [5, 40, 47], [0, 0, 0]], dtype=np.int64)
    weighted = np.array([[0.0, 10.0, 30.0], [50.0, 800.0, 890.0], [0.0, 0.0, 0.0]])
    # A brute-force mean square from each row's distribution, by the protected count.
    ms = np.zeros(counts.shape)
    for at, c in np.ndenumerate(counts):
        dist = table.distribution(int(c))
        ms[at] = sum(p * (j - c) ** 2 for j, p in dist.items()) if c > 0 else 0.0
    got = count_noise_mean_square(table, counts)
    # Rows of small counts: a perturbation below -count is published as 0, so the
    # brute force (on published values) is at most the ptable's mean square.
    assert np.all(ms <= got + 1e-12)
    np.testing.assert_allclose(got[counts >= 3], ms[counts >= 3])
    mean = np.divide(weighted, counts, out=np.zeros(counts.shape), where=counts > 0)
    var = weighted_noise_variance(table, counts, weighted, 0.5, False, ())
    np.testing.assert_allclose(var, mean**2 * (got + 0.25 / 3))
    additive = weighted_noise_variance(table, counts, weighted, 0.5, True, ((0, 1), (0,), (1,), ()))
    np.testing.assert_allclose(additive[-1, -1], var[:-1, :-1].sum())
    np.testing.assert_allclose(additive[0, -1], var[0, :-1].sum())
    q = drop_add_records(0.1)
    np.testing.assert_array_equal(
        count_noise_mean_square(q, np.array([0, 5, 40])), [0.0, 2 / 3, 4 * 5 / 3]
    )


# -- a population, a sample, replicates and the cell-key method ------------------------


def _population(rng: np.random.Generator) -> pd.DataFrame:
    """40 strata of 20 clusters; A and B depend on the cluster (a design effect)."""
    rows = []
    for h in range(40):
        for c in range(20):
            size = int(rng.integers(25, 55))
            shift = rng.normal(0, 0.6, 2)
            pa = np.exp(shift[0] * np.linspace(-1, 1, 12))
            pb = np.exp(shift[1] * np.linspace(-1, 1, 10))
            rows.append(
                pd.DataFrame(
                    {
                        "STRATUM": h + 1,
                        "CLUSTER": c,
                        "A": rng.choice(12, size, p=pa / pa.sum()),
                        "B": rng.choice(10, size, p=pb / pb.sum()),
                    }
                )
            )
    return pd.concat(rows, ignore_index=True)


def _sample(pop: pd.DataFrame, rng: np.random.Generator, folder: Path) -> Dataset:
    """Two clusters per stratum (weight 10), JK2 replicates, a catalog."""
    picked = []
    for _, stratum in pop.groupby("STRATUM"):
        two = rng.choice(np.unique(stratum["CLUSTER"]), 2, replace=False)
        for psu, c in enumerate(two, start=1):
            picked.append(stratum[stratum["CLUSTER"] == c].assign(PSU=psu))
    sample = pd.concat(picked, ignore_index=True).assign(WT=10.0)
    folder.mkdir()
    src = folder / "raw.parquet"
    sample.drop(columns=["CLUSTER"]).to_parquet(src)
    init_catalog(src, folder / "ds", weight="WT", variables=["A", "B", "STRATUM", "PSU"], rng=rng)
    add_replicates(folder / "ds", strata="STRATUM", psu="PSU", method="JK2")
    return Dataset.open(folder / "ds")


@pytest.mark.system
def test_intervals_cover_the_population_count_at_about_95_percent(tmp_path):
    rng = np.random.default_rng(29)
    pop = _population(rng)
    truth = np.zeros((13, 11))
    np.add.at(truth, (pop["A"].to_numpy(), pop["B"].to_numpy()), 1.0)
    truth[-1, :] = truth[:-1, :].sum(axis=0)
    truth[:, -1] = truth[:, :-1].sum(axis=1)
    hits, shown, z2 = 0, 0, []
    for i in range(5):
        dataset = _sample(pop, rng, tmp_path / f"s{i}")
        table = TableBuilder(dataset, Protection(destatis(3, 1.0), rounding="0.001")).build(
            TableRequest(("A", "B"), statistic="weighted", replicates=True)
        )
        # A catalog draft lists the codes in the order it found them: put them in order.
        order = [[*np.argsort(d.codes).tolist(), len(d.codes)] for d in table.dimensions]
        grid = np.ix_(*order)
        se, low, high, w = (
            a[grid] for a in (table.se, table.ci_low, table.ci_high, table.weighted)
        )
        ok = ~np.isnan(se)
        sampling = replicate_se(
            table.weighted, table.replicate_weighted, dataset.catalog.replicates
        )
        # The protection adds variance: never below the sampling standard error.
        assert np.all(table.se[~np.isnan(table.se)] >= sampling[~np.isnan(table.se)])
        assert np.mean(table.se[~np.isnan(table.se)] > sampling[~np.isnan(table.se)]) == 1.0
        hits += int(((low <= truth) & (truth <= high))[ok].sum())
        shown += int(ok.sum())
        z2.extend((((w - truth) / se)[ok] ** 2).tolist())
    assert shown > 500
    assert 0.88 <= hits / shown <= 0.995, hits / shown
    assert 0.6 < float(np.mean(z2)) < 1.4, float(np.mean(z2))


def test_denominators_of_each_percentage():
    shape = (3, 4, 2)
    for kind, over in ((Percent.ROW, (1,)), (Percent.COLUMN, (0,)), (Percent.TOTAL, (0, 1))):
        idx = denominator_index(kind, shape)
        for at in np.ndindex(shape):
            expect = tuple(shape[a] - 1 if a in over else v for a, v in enumerate(at))
            assert tuple(int(i[at]) for i in idx) == expect


# -- sums and means ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def incomes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Dataset, pd.DataFrame]:
    """A magnitude X over 8 x 6 cells, JK1 replicate weights (4 groups), or none (a census)."""
    rng = np.random.default_rng(4242)
    n = 30_000
    frame = pd.DataFrame(
        {
            "A": rng.integers(0, 8, n),
            "B": rng.integers(0, 6, n),
            "W": rng.uniform(5, 60, n),
            "X": rng.lognormal(3, 0.6, n),
            "RKEY": rng.integers(0, 2**32, n, dtype=np.uint32),
        }
    )
    group = rng.integers(0, 4, n)
    for r in range(4):
        frame[f"R{r + 1}"] = np.where(group == r, 0.0, frame["W"] * 4 / 3)
        frame[f"C{r + 1}"] = frame["W"]
    catalog = _catalog(8, 6)
    catalog["magnitudes"] = [{"name": "X", "label": "X", "lower": 0, "upper": 1000}]
    folder = tmp_path_factory.mktemp("incomes")
    sampled = write_dataset(folder / "sampled", frame, catalog)
    census_catalog = {
        **catalog,
        "dataset": {**catalog["dataset"], "replicate_weights": ["C1", "C2", "C3", "C4"]},
    }
    return sampled, write_dataset(folder / "census", frame, census_catalog), frame


def _cells(frame: pd.DataFrame, weight: str, value: np.ndarray | float) -> np.ndarray:
    """Sums of weight x value on the extended 9 x 7 grid, by brute force.

    A magnitude's contributions are summed in sixteenths (the engines' fixed
    point, MAGNITUDE_SCALE), each contribution rounded to one.
    """
    contribution = frame[weight].to_numpy() * value
    if not np.isscalar(value):
        contribution = np.round(contribution * MAGNITUDE_SCALE) / MAGNITUDE_SCALE
    inner = np.zeros((8, 6))
    np.add.at(inner, (frame["A"].to_numpy(), frame["B"].to_numpy()), contribution)
    out = np.zeros((9, 7))
    out[:-1, :-1] = inner
    out[-1, :-1], out[:-1, -1], out[-1, -1] = inner.sum(0), inner.sum(1), inner.sum()
    return out


def test_unprotected_sums_and_means_have_the_jackknife_by_hand(incomes):
    sampled, _, frame = incomes
    table = TableBuilder(sampled, Protection(None)).build(
        TableRequest(("A", "B"), statistic="weighted,sum:X,mean:X", replicates=True)
    )
    x = frame["X"].to_numpy()
    total, count = _cells(frame, "W", x), _cells(frame, "W", 1.0)
    reps = [(_cells(frame, f"R{r}", x), _cells(frame, f"R{r}", 1.0)) for r in range(1, 5)]
    sum_se = np.sqrt(0.75 * sum((t - total) ** 2 for t, _ in reps))
    mean_se = np.sqrt(0.75 * sum((t / c - total / count) ** 2 for t, c in reps))
    stats = table.statistics()
    np.testing.assert_allclose(stats["sum_X_weighted_se"], sum_se, atol=0.5 + 1e-9)
    np.testing.assert_allclose(stats["mean_X_weighted_se"], mean_se, atol=0.005 + 1e-9)
    low = stats["mean_X_weighted_ci_low"]
    assert np.all(low <= stats["mean_X_weighted"]) and np.all(low >= 0)


def test_protected_sums_and_means_have_calibrated_standard_errors(incomes):
    _, census, frame = incomes
    table = TableBuilder(census, Protection(destatis(3, 1.0), rounding="0.001")).build(
        TableRequest(("A", "B"), statistic="weighted,sum:X,mean:X", replicates=True)
    )
    x = frame["X"].to_numpy()
    truth = {"sum_X_weighted": _cells(frame, "W", x)}
    truth["mean_X_weighted"] = truth["sum_X_weighted"] / _cells(frame, "W", 1.0)
    stats = table.statistics()
    for column, true in truth.items():
        se = stats[f"{column}_se"]
        live = ~np.isnan(se)
        assert live.sum() > 40
        z = (stats[column] - true)[live] / se[live]
        # Sums are rounded to whole units, means to 0.01: both far below these SEs.
        assert 0.4 < float(np.mean(z**2)) < 1.6, (column, float(np.mean(z**2)))
    # No sampling variance here: the standard error is the protection's, and positive.
    assert np.all(stats["sum_X_weighted_se"][~np.isnan(stats["sum_X_weighted_se"])] > 0)


# -- where standard errors are shown, and the footnotes that say so ----------------------


def test_percentage_intervals_stay_within_0_and_100_and_say_so(census):
    dataset, _ = census
    prot = Protection(destatis(3, 1.0), se_min_count=30)
    table = TableBuilder(dataset, prot).build(
        TableRequest(("A", "B"), statistic="weighted,percent:row,percent:total", replicates=True)
    )
    counts = table.base_counts
    statement = table.footnotes()["statement"]
    assert (
        "A percentage's interval that would reach below 0 starts at 0, and one above 100 "
        "ends at 100." in statement
    )
    for kind in (Percent.ROW, Percent.TOTAL):
        col = kind.column_name
        se, low, high = (table.percentages[f"{col}{s}"] for s in ("_se", "_ci_low", "_ci_high"))
        shown = ~np.isnan(se)
        assert np.all(low[shown] >= 0) and np.all(high[shown] <= 100)
        # Shown where the numerator's and the denominator's protected counts reach the threshold.
        den = counts[denominator_index(kind, counts.shape)]
        expect = table.computed & (counts >= 30) & (den >= 30)
        np.testing.assert_array_equal(shown, expect)
        assert shown.any() and (~shown & table.computed).any()


def test_no_standard_error_of_a_sum_in_a_dominated_cell(incomes, tmp_path):
    _, _, frame = incomes
    # One record with a huge value dominates its cell (A = 0, B = 0).
    big = frame.copy()
    big.loc[big.index[(big["A"] == 0) & (big["B"] == 0)][0], "X"] = 999.0
    big.loc[(big["A"] == 0) & (big["B"] == 0), "W"] = 5.0
    catalog = _catalog(8, 6)
    catalog["magnitudes"] = [{"name": "X", "label": "X", "lower": 0, "upper": 1000}]
    data = write_dataset(tmp_path / "big", big, catalog)
    from tablesafe.mechanisms._magnitudes import MagnitudeProtection

    table = TableBuilder(
        data, Protection(destatis(3, 1.0)), magnitudes=MagnitudeProtection(dominance=(1, 5.0))
    ).build(TableRequest(("A", "B"), statistic="weighted,sum:X,mean:X", replicates=True))
    flagged = table.sensitive["X"]
    assert flagged.any()
    for column in ("sum_X_weighted_se", "mean_X_weighted_se"):
        se = table.statistics()[column]
        assert np.isnan(se[flagged]).all()
        assert not np.isnan(se[~flagged & table.computed]).all()


def test_same_request_same_bytes_in_every_engine_and_row_order(incomes, tmp_path):
    from tablesafe.engines import CubeCache, DuckDBEngine, MemoryEngine

    sampled, _, frame = incomes
    catalog = _catalog(8, 6)
    catalog["magnitudes"] = [{"name": "X", "label": "X", "lower": 0, "upper": 1000}]
    # The same records in another order, in a folder of the same name (the dataset's name).
    shuffled = write_dataset(
        tmp_path / "sampled",
        frame.sample(frac=1.0, random_state=np.random.default_rng(1)),
        catalog,
    )
    request = TableRequest(
        ("A", "B"), statistic="weighted,percent:row,sum:X,mean:X", replicates=True
    )
    answers = {
        (name, i): TableBuilder(data, Protection(destatis(3, 1.0)), engine=make())
        .build(request)
        .to_json_bytes()
        for name, make in (
            ("duckdb", DuckDBEngine),
            ("memory", MemoryEngine),
            ("cube", lambda: CubeCache(DuckDBEngine())),
        )
        for i, data in enumerate((sampled, shuffled))
    }
    assert len(set(answers.values())) == 1, list(answers)
    assert b"mean_X_weighted_se" in next(iter(answers.values()))
