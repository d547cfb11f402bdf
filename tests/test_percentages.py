"""Percentages (issue 29, issue 38): ratios of the table's protected figures, rounded once.

A percentage divides two protected figures of the same table before they are
rounded (docs/decisions.md, "Ratios of protected figures"). The check: every
percentage equals the ratio recomputed from the same table published at full
precision (rounding ``1e-9``), whatever the rounding of the weighted figures
beside it; of counts, from the published counts. Under additive protections
the percentages of a row, column or layer add to 100 within rounding.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tablesafe import Protection, TableBuilder, TableRequest
from tablesafe._errors import RequestError
from tablesafe._request import Percent
from tablesafe._settings import RuleSettings
from tablesafe.mechanisms import destatis, drop_add_records
from tablesafe.mechanisms._precision import PERCENT_ROUNDING, denominator_index
from tsdata import random_frame, write_dataset

SECRET = b"0123456789abcdef0123456789abcdef"

PROTECTIONS = {
    "ckm-aggregate": lambda r="1": Protection(destatis(3, 1.0), rounding=r),
    "ckm-ipf": lambda r="1": Protection(destatis(3, 1.0), additivity="ipf", rounding=r),
    "ckm-independent": lambda r="1": Protection(
        destatis(3, 1.0), additivity="independent", rounding=r
    ),
    "q-records": lambda r="1": Protection(
        drop_add_records(0.05), seeds="keyed", secret=SECRET, rounding=r
    ),
    "none": lambda r="1": Protection(None, rounding=r),
}
#: A rounding fine enough that the published weighted figures are the unrounded ones.
FULL_PRECISION = "1e-9"
ADDITIVE = ("ckm-aggregate", "ckm-ipf", "q-records", "none")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("pct"), random_frame(3000, seed=29))


def _published(table, column):
    """A statistic as published (JSON cells), on the extended grid: NaN where blank."""
    out = np.full(table.shape, np.nan)
    codes = [[*d.codes, "_T"] for d in table.dimensions]
    names = [d.name for d in table.dimensions]
    import json

    for cell in json.loads(table.to_json())["cells"]:
        at = tuple(codes[i].index(cell[n]) for i, n in enumerate(names))
        value = cell.get(column)
        out[at] = np.nan if value is None else float(value)
    return out


def _recomputed(values, kind):
    den = values[denominator_index(kind, values.shape)]
    with np.errstate(divide="ignore", invalid="ignore"):
        out = PERCENT_ROUNDING.apply(100.0 * values / den)
    return np.where(den > 0, out, np.nan)


@pytest.mark.parametrize("name", list(PROTECTIONS))
@pytest.mark.parametrize("base", ["weighted", "count"])
def test_every_percentage_is_the_ratio_of_the_unrounded_protected_figures(data, name, base):
    statistic = f"{base},percent:row,percent:column,percent:total"
    for dims in (("A", "B"), ("A", "B", "D")):
        request = TableRequest(dims, statistic=statistic)
        full = TableBuilder(data, PROTECTIONS[name](FULL_PRECISION)).build(request)
        figures = _published(full, "weighted" if base == "weighted" else "n")
        for rounding in ("1", "1000", "3sf"):
            table = TableBuilder(data, PROTECTIONS[name](rounding)).build(request)
            for kind in Percent:
                shown = _published(table, kind.column_name)
                again = _recomputed(figures, kind)
                np.testing.assert_array_equal(shown, again, err_msg=f"{dims} {kind} {rounding}")
                assert not np.isnan(shown[table.computed & (figures > 0)]).all()
    if base == "weighted":
        # The ratio of the rounded figures is another figure: at rounding 1000 some differ.
        table = TableBuilder(data, PROTECTIONS[name]("1000")).build(request)
        rounded = _recomputed(_published(table, "weighted"), Percent.ROW)
        assert not np.array_equal(_published(table, "percent_row"), rounded, equal_nan=True)


def _layer_sums(pct, kind):
    """Sums of the inner percentages along the dimensions the percentage totals over."""
    inner = pct[tuple(slice(0, s - 1) for s in pct.shape)]
    return inner.sum(axis=kind.over(pct.ndim))


@pytest.mark.parametrize("name", ADDITIVE)
def test_percentages_of_a_row_or_column_add_to_100_within_rounding(data, name):
    builder = TableBuilder(data, PROTECTIONS[name]())
    request = TableRequest(
        ("A", "B", "D"), statistic="weighted,percent:row,percent:column,percent:total"
    )
    table = builder.build(request)
    for kind in Percent:
        pct = np.nan_to_num(table.percentages[kind.column_name])
        sums = _layer_sums(pct, kind)
        # Rows (or columns, or layers) with a positive total: 100 within half a unit of the
        # rounding for each cell added.
        terms = np.prod([pct.shape[a] - 1 for a in kind.over(3)])
        den = table.weighted[denominator_index(kind, table.shape)]
        live = den[tuple(slice(0, s - 1) for s in den.shape)].max(axis=kind.over(3)) > 0
        assert live.any()
        assert np.all(np.abs(sums[live] - 100) <= terms * 0.005 + 1e-9), (kind, sums)


def test_independent_totals_need_not_give_100(data):
    # Each total protected on its own: the percentages of a row add to its
    # cells' sum over an independently perturbed total, which may miss 100.
    table = TableBuilder(data, PROTECTIONS["ckm-independent"]()).build(
        TableRequest(("A", "C"), statistic="count,percent:row")
    )
    sums = _layer_sums(np.nan_to_num(table.percentages["percent_row"]), Percent.ROW)
    assert np.any(np.abs(sums[:3] - 100) > 0.05)


def test_the_table_publishes_what_its_percentages_divide(data):
    table = TableBuilder(data, Protection(destatis(3, 1.0))).build(
        TableRequest(("A", "B"), statistic="percent:row")
    )
    # percent:row alone is of the weighted counts, which the table publishes beside it.
    assert list(table.statistics()) == ["weighted", "percent_row"]
    assert table.metadata["percentages"] == {"of": "weighted", "rounding": "0.01"}


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"dimensions": ("A",), "statistic": "percent:row"}, "needs a column dimension"),
        (
            {"dimensions": ("A", "B"), "statistic": "percent:row", "margins": "none"},
            "the margin A",
        ),
        (
            {"dimensions": ("A", "B"), "statistic": "percent:total", "margins": [["A"]]},
            "the grand total",
        ),
        ({"dimensions": ("A", "B"), "statistic": "percent:rows"}, "allowed: row, column, total"),
        ({"dimensions": ("A", "B"), "percentages": [3]}, "allowed: row, column, total"),
    ],
)
def test_bad_percentages_are_refused_with_what_is_allowed(kwargs, words):
    with pytest.raises(RequestError, match=words):
        TableRequest(**kwargs)


def test_unweighted_data_is_told_to_ask_for_percentages_of_counts(tmp_path):
    frame = random_frame(200, seed=1).drop(columns=["W", "R1", "R2", "R3", "R4"])
    from tsdata import RANDOM_CATALOG

    catalog = {**RANDOM_CATALOG, "dataset": {"title": "t", "record_key": "RKEY"}}
    data = write_dataset(tmp_path / "u", frame, catalog)
    with pytest.raises(RequestError, match="use statistic 'count,percent:row'"):
        TableBuilder(data, Protection(None)).build(
            TableRequest(("A", "B"), statistic="percent:row")
        )
    table = TableBuilder(data, Protection(None)).build(
        TableRequest(("A", "B"), statistic="count,percent:row")
    )
    assert table.metadata["percentages"]["of"] == "count"


def test_percentages_whose_total_is_hidden_are_hidden(data):
    # The small-cell rule hides a count; a shown cell's percentage of it would give it away.
    rules = RuleSettings(min_cell_size=40, min_universe_size=0, max_cells=10_000)
    builder = TableBuilder(data, Protection(destatis(3, 1.0)), rules=rules)
    table = builder.build(TableRequest(("A", "C"), statistic="count,percent:row,percent:column"))
    assert table.suppressed is not None and table.suppressed.any()
    for kind in (Percent.ROW, Percent.COLUMN):
        pct = table.percentages[kind.column_name]
        hidden = table.suppressed[denominator_index(kind, table.shape)] | table.suppressed
        assert np.isnan(pct[hidden & table.computed]).all()
        assert not np.isnan(pct[~hidden & table.computed & (table.counts > 0)]).any()
    shown = table.shown_statistics()
    assert all(v is None or isinstance(v, float) for v in shown["percent_row"].ravel())


def test_same_request_same_percentages_in_any_order_of_dimensions(data):
    builder = TableBuilder(data, Protection(destatis(3, 1.0)))
    ab = builder.build(TableRequest(("A", "B"), statistic="weighted,percent:row"))
    ba = builder.build(TableRequest(("B", "A"), statistic="weighted,percent:column"))
    np.testing.assert_array_equal(ab.percentages["percent_row"], ba.percentages["percent_column"].T)
    for a, b in itertools.pairwise([ab, builder.build(ab.request)]):
        assert a.to_json_bytes() == b.to_json_bytes()


def test_percentages_and_their_precision_in_words(data):
    table = TableBuilder(data, Protection(destatis(3, 1.0))).build(
        TableRequest(("A", "B"), statistic="weighted,percent:row", replicates=True)
    )
    labels = table.statistic_labels()
    assert labels["percent_row"] == "Row percentage"
    assert labels["percent_row_se"] == "Standard error of the row percentage"
    assert labels["percent_row_ci_high"] == (
        "Row percentage, upper end of the 95% confidence interval"
    )
    assert table.title == "Weighted count and row percentage by A and B"
    # The footnotes say what a percentage divides (tested above: the unrounded figures).
    notes = table.footnotes()["statement"]
    assert (
        "Percentages divide this table's weighted counts, before they are rounded, by their "
        "totals in this table and are rounded to a multiple of 0.01, so they may differ "
        "slightly from the shares of the rounded figures."
    ) in notes
    counts = TableBuilder(data, Protection(destatis(3, 1.0))).build(
        TableRequest(("A", "B"), statistic="count,percent:row")
    )
    assert (
        "Percentages divide this table's counts by their totals in this table, rounded to a "
        "multiple of 0.01."
    ) in counts.footnotes()["statement"]
    import io

    import pandas as pd

    sheets = pd.read_excel(io.BytesIO(table.to_xlsx_bytes()), sheet_name=None)
    assert {"Row percentage", "Row percentage SE", "Row percentage CI lower"} <= set(sheets)


@pytest.mark.parametrize("name", ["percent_x", "Unreliable_w", "AGE_se", "x_ci_low", "x_CI_HIGH"])
def test_names_of_published_columns_are_reserved(name):
    from tablesafe.catalog._catalog import reserved_name

    assert reserved_name(name) is not None
