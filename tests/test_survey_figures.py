"""Survey figures that must not mislead: design warnings, intervals of counts, means in text."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from tablesafe import Dataset, Protection, TableBuilder, TableRequest
from tablesafe._cli import get_app
from tablesafe._cli._methods import protection_from_options
from tablesafe.catalog._catalog import Catalog
from tablesafe.mechanisms._variance import confidence_interval
from tablesafe.prepare._replicates import (
    MIN_REPLICATES,
    add_replicates,
    design_warnings,
    replicate_weights,
)
from test_replicates import make_dataset, nhanes_like
from tsdata import RANDOM_CATALOG, random_frame, write_dataset

# -- replicates add: warnings --------------------------------------------------------------


@pytest.fixture(scope="module")
def nhanes2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NHANES II's layout: 31 strata of 2 PSUs, numbered 1 and 2 in every stratum."""
    return make_dataset(tmp_path_factory.mktemp("nhanes2"), nhanes_like(strata=31, psus=2))


def _copy(ds: Path, folder: Path) -> Path:
    folder.mkdir()
    for name in ("catalog.toml", "microdata.parquet"):
        (folder / name).write_bytes((ds / name).read_bytes())
    return folder


def test_psus_numbered_within_strata_without_strata_warn(nhanes2: Path, tmp_path: Path):
    folder = _copy(nhanes2, tmp_path / "ds")
    result = CliRunner().invoke(
        get_app(), ["replicates", "add", str(folder), "--psu", "PSU", "--method", "JK1"]
    )
    assert result.exit_code == 0, result.output
    assert "wrote 2 JK1 replicate weights" in result.stdout
    assert "warning" not in result.stdout
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2, result.stderr
    nested, few = warnings
    # What to pass, and the column that looks like the strata.
    assert "--strata" in nested and "STRATUM" in nested and "codes 1..2" in nested
    assert "only 2 replicate weights" in few and f"fewer than {MIN_REPLICATES}" in few


def test_the_full_design_gives_no_warning(nhanes2: Path, tmp_path: Path):
    folder = _copy(nhanes2, tmp_path / "ds")
    report = add_replicates(folder, strata="STRATUM", psu="PSU", method="JK1")
    assert (report.strata, report.psus, len(report.columns)) == (31, 62, 62)
    assert report.warnings == ()
    args = ["replicates", "add", str(folder), "--strata", "STRATUM", "--psu", "PSU"]
    result = CliRunner().invoke(get_app(), [*args, "--method", "JK2", "--replace"])
    assert result.exit_code == 0 and result.stderr == ""


def _without_coefficient(folder: Path) -> Path:
    """The catalog with its replicate_coefficient line taken out (as declared by hand)."""
    path = folder / "catalog.toml"
    lines = path.read_text().splitlines()
    kept = [line for line in lines if not line.startswith("replicate_coefficient")]
    assert len(kept) == len(lines) - 1
    path.write_text("\n".join(kept) + "\n")
    return folder


@pytest.mark.parametrize("engine", ["duckdb", "memory"])
def test_a_stratified_jackknife_declared_as_jk1_without_a_coefficient_is_refused(
    nhanes2: Path, tmp_path: Path, engine: str
):
    # NHANES II's 31 strata of 2 PSUs, delete-one-PSU replicates declared as JK1 by hand: the
    # default (R - 1) / R = 61/62 against the right 1/2 made every standard error 1.40 times
    # too large, with no word.
    from tablesafe._errors import DataError
    from tablesafe.engines import DuckDBEngine, MemoryEngine

    folder = _copy(nhanes2, tmp_path / "ds")
    add_replicates(folder, strata="STRATUM", psu="PSU", method="JK1")
    request = TableRequest(("SEX",), statistic="weighted", replicates=True)
    right = TableBuilder(Dataset.open(folder), Protection(None)).build(request).se
    _without_coefficient(folder)
    ds = Dataset.open(folder)
    assert ds.catalog.replicates.coefficient == pytest.approx(61 / 62)
    make = DuckDBEngine if engine == "duckdb" else MemoryEngine
    with pytest.raises(DataError) as error:
        TableBuilder(ds, Protection(None), engine=make()).build(request)
    words = str(error.value)
    assert "replicate_coefficient = 0.5 " in words and "2 PSUs" in words
    assert "1.40 times too large" in words
    # Declared, it gives the standard errors of the design.
    path = folder / "catalog.toml"
    path.write_text(
        path.read_text().replace("[dataset]\n", "[dataset]\nreplicate_coefficient = 0.5\n")
    )
    again = TableBuilder(Dataset.open(folder), Protection(None), engine=make()).build(request)
    np.testing.assert_array_equal(again.se, right)


def test_strata_of_different_sizes_are_told_to_use_replicates_add(tmp_path: Path):
    from tablesafe._errors import DataError

    folder = make_dataset(tmp_path, nhanes_like(strata=6, psus=[2, 3, 2, 4, 3, 2]))
    add_replicates(folder, strata="STRATUM", psu="PSU", method="JK1")
    _without_coefficient(folder)
    with pytest.raises(DataError, match="different numbers of PSUs.*replicates add"):
        TableBuilder(Dataset.open(folder), Protection(None)).build(
            TableRequest(("SEX",), statistic="weighted", replicates=True)
        )


def test_an_unstratified_jk1_takes_its_default_coefficient(nhanes2: Path, tmp_path: Path):
    folder = _copy(nhanes2, tmp_path / "ds")
    psu = pd.read_parquet(folder / "microdata.parquet")
    # Each of the 62 PSUs with its own code, no strata: (R - 1) / R is the coefficient.
    psu["UNIT"] = psu["STRATUM"] * 10 + psu["PSU"]
    psu.to_parquet(folder / "microdata.parquet")
    add_replicates(folder, strata=None, psu="UNIT", method="JK1")
    _without_coefficient(folder)
    table = TableBuilder(Dataset.open(folder), Protection(None)).build(
        TableRequest(("SEX",), statistic="weighted", replicates=True)
    )
    assert table.metadata["replicate_coefficient"] == pytest.approx(61 / 62)


def _warnings(strata: np.ndarray | None, psu: np.ndarray, method: str, **kw: object) -> tuple:
    design = replicate_weights(strata, psu, method, rng=np.random.default_rng(0), **kw)
    return design_warnings(design, None if strata is None else "S", "P", psu, ["SDMVSTRA", "X"])


@pytest.mark.parametrize(
    ("strata", "psu", "method", "nested", "few"),
    [
        # 40 PSUs with their own codes, no strata: an unstratified design, nothing to say.
        (None, np.repeat(np.arange(1, 41), 5), "JK1", False, False),
        # The codes 1..3 without strata: numbered within strata, by the look of them.
        (None, np.repeat([1, 2, 3], 50), "bootstrap", True, False),
        (None, np.repeat([0, 1, 2, 3], 50), "JK1", True, True),
        # Codes that are not 1..k: no sign of nesting; still too few replicates.
        (None, np.repeat([101, 205], 50), "JK1", False, True),
        (None, np.repeat(["a", "b", "c"], 50), "JK1", False, True),
        # 16 strata of 2 PSUs: the design is given, but JK2 makes 16 replicates.
        (np.repeat(np.arange(16), 20), np.tile(np.repeat([1, 2], 10), 16), "JK2", False, True),
        (np.repeat(np.arange(16), 20), np.tile(np.repeat([1, 2], 10), 16), "JK1", False, False),
    ],
)
def test_design_warnings(strata, psu, method, nested, few):
    got = _warnings(strata, psu, method)
    assert any("numbered within strata" in w for w in got) == nested
    assert any("replicate weights:" in w for w in got) == few
    assert len(got) == nested + few
    if nested:
        assert "(a candidate: SDMVSTRA)" in got[0]


def test_bootstrap_replicates_below_twenty_warn():
    psu = np.repeat(np.arange(1, 31), 4)
    assert len(_warnings(None, psu, "bootstrap", replicates=MIN_REPLICATES)) == 0
    (few,) = _warnings(None, psu, "bootstrap", replicates=MIN_REPLICATES - 1)
    assert f"only {MIN_REPLICATES - 1} replicate weights" in few


# -- intervals of weighted counts --------------------------------------------------------------


def test_confidence_interval_lower_bound():
    est = np.array([10.0, 100.0, 0.0])
    se = np.array([10.0, 10.0, 5.0])
    low, high = confidence_interval(est, se)
    assert low[0] < 0 and low[2] < 0  # the normal interval reaches below 0
    clipped, high2 = confidence_interval(est, se, lower_bound=0.0)
    np.testing.assert_array_equal(clipped, np.maximum(low, 0.0))
    np.testing.assert_array_equal(high2, high)


@pytest.fixture(scope="module")
def one_group(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """Records of A = 3 all in the first replicate group: their se equals their weighted count."""
    frame = random_frame(3000, seed=5)
    rare = frame["A"] == 3
    w = frame["W"].to_numpy()
    frame.loc[rare, "R1"] = 0.0
    for r in (2, 3, 4):
        frame.loc[rare, f"R{r}"] = w[rare.to_numpy()] * 4 / 3
    return write_dataset(tmp_path_factory.mktemp("onegroup"), frame)


@pytest.mark.parametrize(("method", "base"), [("none", 1), ("ckm", 1000)])
def test_interval_of_a_weighted_count_starts_at_zero_at_most(one_group, method, base):
    protection = (
        Protection(None)
        if method == "none"
        else replace(protection_from_options(method), rounding=str(base))
    )
    request = TableRequest(("A", "D"), statistic="both", replicates=True)
    table = TableBuilder(one_group, protection).build(request)
    frame = table.to_frame()
    shown = frame.dropna(subset=["se"])
    low, high, w, se = (shown[c].astype(float) for c in ("ci_low", "ci_high", "weighted", "se"))
    assert (low >= 0).all()
    # Cells of A = 3 have se ~ weighted (JK1, one group): the normal interval reaches below 0.
    rare = shown["A"] == 3
    assert rare.sum() >= 2 and (w[rare] - 1.96 * se[rare] < 0).all()
    assert (low[rare] == 0).all() and (high[rare] > w[rare]).all()
    # Elsewhere the interval is the normal one, up to rounding of its three figures.
    expected = np.maximum(w - 1.96 * se, 0.0)
    assert np.all(np.abs(low - expected) <= 1.5 * base + 0.01 * se)
    meta = table.public_metadata()
    assert meta["ci_lower_bound"] == 0
    assert any("starts at 0" in s for s in meta["footnotes"]["statement"])


def test_no_interval_no_statement(one_group):
    table = TableBuilder(one_group, Protection(None)).build(TableRequest(("A",), statistic="both"))
    meta = table.public_metadata()
    assert "ci_lower_bound" not in meta
    assert not any("starts at 0" in s for s in meta["footnotes"]["statement"])


# -- means in text output -------------------------------------------------------------------


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """A 0/1 variable as a magnitude: its mean is a share."""
    frame = random_frame(2000, seed=9)
    rng = np.random.default_rng(9)
    frame["EMP"] = (rng.random(len(frame)) < 0.37).astype(int)
    frame["BIG"] = rng.uniform(20_000, 90_000, len(frame)).round()
    catalog = {
        **RANDOM_CATALOG,
        "magnitudes": [
            {"name": "EMP", "lower": 0, "upper": 1},
            {"name": "BIG", "lower": 0, "upper": 100_000},
        ],
    }
    Catalog.from_dict(catalog)
    return write_dataset(tmp_path_factory.mktemp("binary"), frame, catalog)


def test_mean_of_a_binary_variable_shows_its_digits(binary):
    request = TableRequest(("D",), statistic="count", magnitudes=("mean:EMP", "mean:BIG"))
    table = TableBuilder(binary, Protection(None)).build(request)
    text = table.render("text")
    means = table.statistics()["mean_EMP"]
    assert 0.2 < means[-1] < 0.5
    for value in means:
        # Four significant digits of the published mean (0.3712 as 0.3712, 0.37 as 0.37).
        shown = f"{value:.4f}".rstrip("0").rstrip(".")
        assert f" {shown} " in text, (shown, text)
    big = table.statistics()["mean_BIG"]
    for value in big:
        assert f" {round(value):,} " in text  # large means: whole units with separators
    rows = [line.split() for line in text.splitlines()]
    assert not any(r[-1:] == ["0"] for r in rows if r and r[0] in ("one", "two", "Total"))


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.3712, "0.3712"),
        (0.37, "0.37"),
        (0.5, "0.5"),
        (0.000123456, "0.0001235"),
        (41.237, "41.24"),
        (1.0, "1"),
        (0.0, "0"),
        (-2.5, "-2.5"),
        (52341.6, "52,342"),
        (1234.5, "1,234"),  # round half to even at the unit, as Python formats
    ],
)
def test_significant_digits(value, shown):
    from tablesafe.output._render import _fmt

    assert _fmt(value, "mean_X") == shown
    assert _fmt(value, "n") == f"{int(value):,}"  # other statistics as before


def test_means_of_one_column_show_one_number_of_decimals():
    # Issue 38: not 52,028.1 beside 18,790.66.
    from tablesafe.output._render import _fmt, column_decimals

    column = np.array([52028.1, 18.79, 7.0])
    d = column_decimals("mean_X", column)
    assert d == 2
    assert [_fmt(v, "mean_X", d) for v in column] == ["52,028.10", "18.79", "7.00"]
    assert column_decimals("mean_X", np.array([52028.1, 61234.5])) == 0  # 4 digits: whole units
    assert column_decimals("mean_X", np.array([0.37, 0.5])) == 2
    assert column_decimals("sum_X", column) is None


def test_text_shows_every_mean_of_a_table_with_the_same_decimals(binary):
    request = TableRequest(("D", "A"), statistic="count", magnitudes=("mean:EMP",))
    table = TableBuilder(binary, Protection(None)).build(request)
    text = table.render("text")
    means = table.statistics()["mean_EMP"][table.computed]
    means = means[~np.isnan(means)]
    assert any(round(v * 100) % 10 == 0 for v in means)  # a mean with one decimal published
    tokens = [t for line in text.splitlines() for t in line.split() if t.startswith("0.")]
    assert len(tokens) >= len(means) - 1
    assert {len(t.split(".")[1]) for t in tokens} == {2}


def test_frames_are_untouched_by_text_rendering(binary):
    request = TableRequest(("D",), statistic="count", magnitudes=("mean:EMP",))
    frame = TableBuilder(binary, Protection(None)).build(request).to_frame()
    assert isinstance(frame, pd.DataFrame) and frame["mean_EMP"].between(0, 1).all()
