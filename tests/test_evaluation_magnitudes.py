"""`tablesafe evaluate` with continuous variables: RAD of protected sums and means."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tablesafe._cli import get_app
from tablesafe._errors import RequestError
from tablesafe.catalog._dataset import Dataset
from tablesafe.experiments._evaluate import evaluate, magnitude_utility, mechanism_grid
from tablesafe.experiments._report import evaluation_text, write_evaluation_report


def test_rad_by_hand() -> None:
    truth = {
        "sum_X": np.array([100.0, 0.0, 50.0, 10.0]),
        "mean_X": np.array([10.0, np.nan, 5.0, 2.0]),
    }
    published = {
        "sum_X": np.array([110.0, 3.0, np.nan, 9.0]),
        "mean_X": np.array([11.0, 1.0, 5.0, 2.0]),
    }
    got = magnitude_utility(truth, published, slice(None))
    # sums: cells 0 (10%) and 3 (10%); cell 1 has a true 0, cell 2 is unpublished.
    assert got["rad_sum_X"] == pytest.approx(10.0)
    assert got["unpublished_sum_X"] == pytest.approx(25.0)
    # means: cells 0 (10%), 2 (0%), 3 (0%); cell 1 has no true mean.
    assert got["rad_mean_X"] == pytest.approx(10.0 / 3)
    assert "unpublished_mean_X" not in got
    none = magnitude_utility({"sum_X": np.zeros(2)}, {"sum_X": np.ones(2)}, slice(None))
    assert none["rad_sum_X"] is None


@pytest.fixture(scope="module")
def rows(demo_dir) -> list[dict[str, object]]:
    configs = mechanism_grid(["dp", "ckm"], (1.0,), (5,))
    results = evaluate(
        Dataset.open(demo_dir), [("REGION", "SEX")], configs, magnitudes=("INCOME", "HOURS")
    )
    return [r.as_dict() for r in results]


def test_every_configuration_measures_the_magnitudes(rows) -> None:
    assert len(rows) == 2
    for r in rows:
        for key in (
            "rad_sum_INCOME_weighted",
            "rad_mean_INCOME_weighted",
            "rad_sum_HOURS_weighted",
            "rad_mean_HOURS_weighted",
        ):
            value = r[key]
            assert isinstance(value, float) and np.isfinite(value)
            # The cell-key method for magnitudes moves every sum (mu > 0), by a
            # share of its largest contributions: not 0, and far below the sums.
            assert 0 < value < 50, (key, value)


def test_text_and_report_show_the_magnitude_columns(rows, tmp_path) -> None:
    text = evaluation_text(rows)
    assert "RAD weighted sum INCOME %" in text and "RAD weighted mean HOURS %" in text
    assert "|published - true| / |true|" in text
    path = write_evaluation_report(rows, tmp_path)
    page = path.read_text()
    assert "RAD weighted sum INCOME %" in page
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved[0]["rad_sum_INCOME_weighted"] == rows[0]["rad_sum_INCOME_weighted"]


def test_same_request_same_figures(demo_dir, rows) -> None:
    again = evaluate(
        Dataset.open(demo_dir),
        [("REGION", "SEX")],
        mechanism_grid(["dp", "ckm"], (1.0,), (5,)),
        magnitudes=("INCOME", "HOURS"),
    )
    assert [r.as_dict() for r in again] == rows


def test_a_categorical_variable_is_refused(demo_dir) -> None:
    with pytest.raises(RequestError, match="SEX"):
        evaluate(Dataset.open(demo_dir), [("REGION",)], [], magnitudes=("SEX",))


def test_cli_magnitude_option(demo_dir) -> None:
    result = CliRunner().invoke(
        get_app(),
        [
            "evaluate",
            str(demo_dir),
            "--table",
            "REGION*SEX",
            "--methods",
            "ckm",
            "--magnitude",
            "INCOME",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert row["rad_sum_INCOME_weighted"] > 0 and row["rad_mean_INCOME_weighted"] > 0
