"""The unprotected tabulation (``--method none``) shows true sums and means (issue 17)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from tablesafe import RequestError
from tablesafe._cli import get_app
from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.catalog._magnitudes import from_magnitude_fixed, magnitude_fixed
from tablesafe.cells._fixed import from_fixed, to_fixed
from tablesafe.output._tabulation import tabulate


@pytest.fixture(scope="module")
def demo(demo_dir: Path) -> Dataset:
    return Dataset.open(demo_dir)


@pytest.fixture(scope="module")
def records(demo: Dataset) -> pd.DataFrame:
    return pd.read_parquet(demo.path)


def _true(df: pd.DataFrame, name: str, weighted: bool) -> tuple[float, float]:
    """Brute force: the exact (fixed-point) sum and the mean over the (weighted) count.

    Weighted counts are exact fixed-point sums of the weights (tablesafe.cells._fixed).
    """
    w = df.WEIGHT.to_numpy() if weighted else np.ones(len(df))
    total = from_magnitude_fixed(magnitude_fixed(df[name].to_numpy() * w).sum())
    count = float(from_fixed(to_fixed(w).sum())) if weighted else float(len(df))
    return total, total / count


@pytest.mark.parametrize("statistic", ["count", "both"])
def test_true_sums_and_means_equal_brute_force(
    demo: Dataset, records: pd.DataFrame, statistic: str
) -> None:
    request = TableRequest(
        ("REGION",),
        statistic=statistic,  # type: ignore[arg-type]
        magnitudes=("sum:INCOME", "mean:INCOME", "mean:HOURS"),
        universe={"SEX": [2]},
    )
    stats = tabulate(demo, request).statistics()
    df = records[records.SEX == 2]
    weighted = statistic == "both"
    # Over the survey weights, each column says so: sum_INCOME_weighted.
    end = "_weighted" if weighted else ""
    codes = [*demo.catalog.variable("REGION").codes, None]
    for i, code in enumerate(codes):
        cell = df if code is None else df[code == df.REGION]
        income_sum, income_mean = _true(cell, "INCOME", weighted)
        assert stats[f"sum_INCOME{end}"][i] == income_sum
        assert stats[f"mean_INCOME{end}"][i] == pytest.approx(income_mean, rel=1e-15)
        hours_mean = _true(cell, "HOURS", weighted)[1]
        assert stats[f"mean_HOURS{end}"][i] == pytest.approx(hours_mean, rel=1e-15)
    assert list(stats)[-3:] == [f"sum_INCOME{end}", f"mean_INCOME{end}", f"mean_HOURS{end}"]


def test_cli_method_none_prints_true_sums(demo_dir: Path, records: pd.DataFrame) -> None:
    runner = CliRunner()
    args = ["table", str(demo_dir), "--rows", "SEX", "--method", "none"]
    out = runner.invoke(
        get_app(), [*args, "--statistic", "count,sum:INCOME,mean:HOURS", "--format", "csv"]
    )
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].startswith("# UNPROTECTED")
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[1:]))))
    assert list(rows[0]) == ["SEX", "n", "sum_INCOME", "mean_HOURS"]
    total = rows[-1]
    assert total["SEX"] == "_T" and int(total["n"]) == len(records)
    assert float(total["sum_INCOME"]) == _true(records, "INCOME", False)[0]
    assert float(total["mean_HOURS"]) == pytest.approx(_true(records, "HOURS", False)[1])
    js = runner.invoke(get_app(), [*args, "--statistic", "mean:INCOME", "--format", "json"])
    assert js.exit_code == 0, js.output
    doc = json.loads(js.output)
    assert doc["meta"]["protected"] is False and doc["meta"]["magnitudes"] == ["mean:INCOME"]
    assert doc["cells"][-1]["mean_INCOME"] == pytest.approx(_true(records, "INCOME", False)[1])
    text = runner.invoke(get_app(), [*args, "--statistic", "count,sum:INCOME"])
    assert text.exit_code == 0 and "sum_INCOME" in text.output


def test_mean_over_nothing_is_refused_and_empty_cells_are_blank(demo: Dataset) -> None:
    nothing = TableRequest(
        ("SEX",), universe={"AGEGRP": [1], "EMPSTAT": [1]}, magnitudes=("mean:HOURS",)
    )
    with pytest.raises(RequestError, match="nothing to average over"):
        tabulate(demo, nothing).statistics()
    # A cell without records has no mean: blank in CSV and null in JSON, never NaN.
    request = TableRequest(("AGEGRP", "EMPSTAT"), statistic="count", magnitudes=("mean:HOURS",))
    tab = tabulate(demo, request)
    mean = tab.statistics()["mean_HOURS"]
    empty = tab.aggregates.n == 0
    assert empty.any() and np.isnan(mean[empty]).all()
    assert "nan" not in tab.render("csv").lower() and "NaN" not in tab.render("json")
