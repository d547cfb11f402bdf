"""The simulation study of Shlomo, Krenzke & Li (2019), with few replications."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tablesafe._cli import get_app
from tablesafe.experiments import run_shlomo2019
from tablesafe.experiments._report import comparison_text, write_report


@pytest.fixture(scope="module")
def small():
    return run_shlomo2019(40, rng=7)


def test_deterministic_for_a_fixed_seed(small):
    again = run_shlomo2019(40, rng=7)
    assert again.table4 == small.table4
    assert again.table5 == small.table5
    assert run_shlomo2019(40, rng=8).table5 != small.table5


def test_sizes_match_the_paper_reading(small):
    # Population about 45,000 (e^6.5 E[e^U]^2 49), sample about 1,560, cells about 31.
    for kind in ("dependent", "independent"):
        pop = small.table5[kind]["Weighted Original"][0]
        n = small.table5[kind]["Sample Original"][0]
        assert 38_000 < pop < 52_000
        assert 1_300 < n < 1_800


def test_measures_are_in_the_papers_range(small):
    t4 = small.table4
    assert abs(t4["DP"]["pp_dep"] - 24.0) < 3
    assert abs(t4["Q"]["pp_dep"] - 67.0) < 3
    assert 0.98 < t4["DP"]["rm_dep"] < 1.0
    assert t4["Q"]["rm_dep"] < t4["DP"]["rm_dep"]  # Q perturbs more: lower RM
    hd = {m: small.table5["dependent"][f"Sample {m}"][3] for m in ("DP", "PRAM", "Q")}
    assert hd["DP"] < hd["PRAM"] < hd["Q"]  # the paper's ordering of utility


def test_report_and_text(small, tmp_path):
    text = comparison_text(small)
    assert "Table 4" in text and "Weighted Q Avg cell" in text
    path = write_report(small, tmp_path)
    assert path.read_text().count("data:image/png;base64") == 5
    assert (tmp_path / "figure1_risk_utility.png").stat().st_size > 1000


def test_cli_reproduce_json():
    result = CliRunner().invoke(
        get_app(), ["reproduce", "shlomo2019", "--reps", "10", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["table4"]["paper"]["DP"]["pp_ind"] == 23.8
    assert set(doc["table4"]["ours"]) == {"DP", "PRAM", "Q"}


def test_evaluate_on_a_dataset(demo_dir, tmp_path):
    result = CliRunner().invoke(
        get_app(),
        [
            "evaluate",
            str(demo_dir),
            "--table",
            "AGEGRP*SEX",
            "--methods",
            "dp,q",
            "--epsilon",
            "0.5,2",
            "--cap",
            "7",
            "--format",
            "json",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["method"] for r in rows] == ["dp eps=0.5 cap=7", "dp eps=2.0 cap=7", "q cap=7"]
    by = {r["method"]: r for r in rows}
    # A smaller epsilon perturbs at least as much, with lower utility.
    assert (
        by["dp eps=0.5 cap=7"]["percent_perturbed"] >= by["dp eps=2.0 cap=7"]["percent_perturbed"]
    )
    assert by["dp eps=0.5 cap=7"]["epsilon"] == 0.5
    assert (tmp_path / "report.html").exists() and (tmp_path / "risk_utility.png").exists()
