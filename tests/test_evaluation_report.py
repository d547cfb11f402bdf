"""`tablesafe evaluate`: the small-cell recovery measure, the text table and the report."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tablesafe._builder import Protection, TableBuilder
from tablesafe._cli import get_app
from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.experiments._evaluate import (
    SMALL_CELL_MAX,
    _posterior_mode,
    evaluate,
    mechanism_grid,
    small_cell_recovery,
)
from tablesafe.experiments._report import (
    EVALUATION_COLUMNS,
    evaluation_text,
    risk_utility_figure,
    risk_utility_plot,
    write_evaluation_report,
)
from tablesafe.mechanisms import destatis, dp_geometric, drop_add_q, pram_shlomo_young

DIMS = ("AGE", "REGION", "SEX")  # single years of age: many cells of 1 to 4 records


@pytest.fixture(scope="module")
def rows(demo_dir) -> list[dict[str, object]]:
    configs = mechanism_grid(["dp", "pram", "q", "ckm"], (0.5, 2.0), (5,))
    results = evaluate(Dataset.open(demo_dir), [DIMS, ("AGEGRP", "SEX")], configs)
    return [r.as_dict() for r in results]


@pytest.mark.parametrize(
    "mech", [dp_geometric(1.0, cap=3), drop_add_q(0.01, 5), destatis(3, 1.0), pram_shlomo_young()]
)
def test_posterior_mode_is_the_brute_force_argmax(mech) -> None:
    support = 5
    published = np.array([0, 0, 1, 1, 1, 2, 3, 3, 4, 6, 7, 9, 12, 40, 41], dtype=np.int64)
    size = SMALL_CELL_MAX + 2 * support + 2
    prior = np.bincount(np.minimum(published, size - 1), minlength=size) + 1.0
    expected = []
    for j in published:
        if j > SMALL_CELL_MAX + support:
            expected.append(j)
            continue
        # P(true i | published j) by hand, over every candidate true count.
        post = [prior[i] * mech.distribution(i).get(int(j), 0.0) for i in range(size)]
        expected.append(int(np.argmax(post)))
    assert _posterior_mode(mech, published, support).tolist() == expected


def test_recovery_counts_by_hand(demo_dir) -> None:
    dataset = Dataset.open(demo_dir)
    request = TableRequest(DIMS, statistic="both")
    mech = dp_geometric(1.0, cap=5)
    truth = TableBuilder(dataset, Protection(None)).tabulate(request).aggregates.n
    table = TableBuilder(dataset, Protection(mech)).build(request)
    builder = TableBuilder(dataset, Protection(mech))
    got = small_cell_recovery(table, truth, mech, builder.overall_mean_weights()[0])
    inner = table.inner
    t, p = truth[inner].ravel(), table.counts[inner].ravel()
    small = [(a, b) for a, b in zip(t, p, strict=True) if 1 <= a <= SMALL_CELL_MAX]
    assert got["small_cells"] == len(small) > 50
    assert got["small_published"] == round(100 * sum(a == b for a, b in small) / len(small), 1)
    shares = [got[k] for k in ("small_published", "small_posterior", "small_weighted")]
    assert got["small_recovered"] == max(shares)


def test_unperturbed_mechanism_gives_everything_away(demo_dir) -> None:
    # A ptable that changes nothing (DP at the largest epsilon the range allows, 50): every small cell is known.
    dataset = Dataset.open(demo_dir)
    [row] = evaluate(dataset, [DIMS], [("identity", dp_geometric(50.0, cap=1))])
    assert row.measures["percent_perturbed"] == 0.0
    assert row.measures["small_recovered"] == 100.0
    assert row.measures["rm"] == pytest.approx(1.0)


def test_the_measure_separates_the_methods(rows) -> None:
    by = {r["method"]: r for r in rows if r["table"] == " * ".join(DIMS)}
    rec = {m: r["small_recovered"] for m, r in by.items()}
    # More privacy, less recovered; every share is a percentage of the same cells.
    assert rec["dp eps=0.5 cap=5"] < rec["dp eps=2.0 cap=5"]
    assert all(0.0 <= v <= 100.0 for v in rec.values())
    for r in by.values():
        assert r["small_recovered"] >= max(r["small_published"], r["small_posterior"])
    # AGEGRP * SEX has no small cell: no figure rather than a made-up one.
    two_way = [r for r in rows if r["table"] == "AGEGRP * SEX"]
    assert all(r["small_cells"] == 0 and r["small_recovered"] is None for r in two_way)


def test_text_keeps_every_heading_and_name(rows) -> None:
    text = evaluation_text(rows)
    lines = text.splitlines()
    header = lines[0]
    for key, heading, _ in EVALUATION_COLUMNS:
        if any(key in r for r in rows):
            assert heading in header
    for r in rows:
        assert any(str(r["method"]) in line and str(r["table"]) in line for line in lines)
    # Aligned columns: no data line wider than the rule under the header.
    assert max(len(line) for line in lines[2 : 2 + len(rows)]) <= len(lines[1])


def test_figure_has_a_legend_and_no_labels_on_points(rows) -> None:
    import matplotlib.pyplot as plt

    fig = risk_utility_plot(rows)
    try:
        [legend] = fig.legends
        labels = [t.get_text() for t in legend.get_texts()]
        assert labels == list(dict.fromkeys(str(r["method"]) for r in rows))
        texts = [t.get_text() for ax in fig.axes for t in ax.texts]
        assert texts == ["no inner cell with a true count of 1 to 4"]  # the two-way table only
    finally:
        plt.close(fig)
    assert risk_utility_figure(rows) == risk_utility_figure(rows)  # same rows, same bytes


def test_report_files(rows, tmp_path) -> None:
    path = write_evaluation_report(rows, tmp_path)
    page = path.read_text()
    assert "% small recovered" in page and "Owner only" in page
    assert json.loads((tmp_path / "results.json").read_text()) == rows
    assert (tmp_path / "risk_utility.png").read_bytes().startswith(b"\x89PNG")


def test_cli_text_is_not_cut(demo_dir) -> None:
    result = CliRunner().invoke(
        get_app(),
        ["evaluate", str(demo_dir), "--table", "AGE*REGION*SEX", "--methods", "ckm,pram"],
        terminal_width=60,
    )
    assert result.exit_code == 0, result.output
    assert "% small recovered" in result.output and "ckm D=3 V=1" in result.output
