"""One column name per statistic (issue 30): a weighted sum is never called what an unweighted one is.

A sum or mean over the records is ``sum_VAR`` / ``mean_VAR``; over the
survey weights ``sum_VAR_weighted`` / ``mean_VAR_weighted``, with their own
words ("Weighted sum of ..."). Checked across every statistic a table can
have, in the table's arrays, its JSON, CSV, JSON-stat and SDMX-CSV, and
against brute-force sums of the records.
"""

from __future__ import annotations

import csv
import io
import itertools
import json

import numpy as np
import pandas as pd
import pytest

import tablesafe as ts
from tablesafe._errors import CatalogError
from tablesafe._protection import Protection
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._magnitudes import magnitude_column, read_magnitude_column
from tablesafe.mechanisms._magnitudes import MagnitudeProtection
from tablesafe.output._tabulation import tabulate

STATISTICS = ["count", "weighted", "both"]
MAGNITUDES = ("sum:INCOME", "mean:INCOME", "sum:HOURS", "mean:HOURS")


@pytest.fixture(scope="module")
def tables(demo_dir):
    """statistic -> a table of every sum and mean, sums published unperturbed."""
    dataset = ts.Dataset.open(demo_dir)
    exact = MagnitudeProtection(method="none")  # type: ignore[arg-type]
    builder = ts.TableBuilder(dataset, Protection(None), magnitudes=exact)
    out = {}
    for statistic in STATISTICS:
        request = ts.TableRequest(
            ("REGION", "SEX"),
            statistic=statistic,
            magnitudes=MAGNITUDES,
            replicates=statistic == "both",
        )
        out[statistic] = builder.build(request)
    return out


def test_no_two_statistics_share_a_column_name_or_words(tables):
    meaning: dict[str, set[str]] = {}
    for table in tables.values():
        labels = table.statistic_labels()
        # Within a table: every column of the CSV once (dimensions, labels,
        # statistics, flags), every statistic in its own words.
        header = next(csv.reader(io.StringIO(table.to_csv(labels=True))))
        assert len(header) == len(set(header)), header
        assert len(set(labels.values())) == len(labels), labels
        for name, words in labels.items():
            meaning.setdefault(name, set()).add(words)
    # Across tables: a name always means the same statistic, and no two names one.
    assert all(len(words) == 1 for words in meaning.values()), meaning
    by_words = [next(iter(w)) for w in meaning.values()]
    assert len(by_words) == len(set(by_words))
    assert {"sum_INCOME", "sum_INCOME_weighted", "mean_HOURS", "mean_HOURS_weighted"} <= set(
        meaning
    )
    assert meaning["sum_INCOME_weighted"] == {"Weighted sum of Annual income (currency units)"}
    assert meaning["sum_INCOME"] == {"Sum of Annual income (currency units)"}
    assert meaning["mean_HOURS_weighted"] == {"Weighted mean of Weekly hours worked (hours)"}


def test_each_name_says_what_is_summed(tables, demo_dir):
    records = pd.read_parquet(ts.Dataset.open(demo_dir).path)
    for statistic, table in tables.items():
        weighted = statistic != "count"
        stats = table.statistics()
        w = records.WEIGHT.to_numpy() if weighted else np.ones(len(records))
        for item in MAGNITUDES:
            kind, name = item.split(":")
            column = magnitude_column(kind, name, weighted=weighted)
            assert column.endswith("_weighted") == weighted
            assert read_magnitude_column(column) == (kind, name, weighted)
            total = float(np.sum(records[name].to_numpy() * w))
            want = total if kind == "sum" else total / float(np.sum(w))
            # The grand total, published unperturbed (summed in fixed point of 1/16 per
            # contribution, rounded): within a millionth or one unit; weights are in the hundreds.
            got = float(stats[column][-1, -1])
            assert got == pytest.approx(want, rel=1e-6, abs=1)


def test_every_format_uses_the_same_names(tables, demo_dir):
    for table in tables.values():
        names = list(table.statistics())
        labels = table.statistic_labels()
        doc = json.loads(table.to_json())
        assert doc["meta"]["statistics"] == labels
        assert set(names) <= set(doc["cells"][0])
        js = json.loads(table.render("jsonstat"))
        category = js["dimension"]["STATISTIC"]["category"]
        assert category["index"] == names and category["label"] == labels
        rows = list(csv.DictReader(io.StringIO(table.render("sdmx-csv"))))
        # (An unprotected table's SDMX-CSV starts with its dataset-level row: no statistic.)
        assert list(dict.fromkeys(r["STATISTIC"] for r in rows if r["STATISTIC"])) == names
    # The unprotected tabulation names its columns as the protected table does.
    dataset = ts.Dataset.open(demo_dir)
    for statistic, table in tables.items():
        truth = tabulate(dataset, table.request).statistics()
        weighted = statistic != "count"
        names = [magnitude_column(*i.split(":"), weighted=weighted) for i in MAGNITUDES]
        assert [c for c in truth if c in names] == [c for c in table.statistics() if c in names]
        assert set(names) <= set(truth)


@pytest.mark.parametrize("name", ["INCOME_weighted", "x_WEIGHTED"])
def test_a_catalog_name_may_not_end_in_weighted(demo_dir, name):
    raw = ts.Dataset.open(demo_dir).catalog.to_dict()
    mags = [{**raw["magnitudes"][0], "name": name, "column": "INCOME"}]
    with pytest.raises(CatalogError, match=r"names ending in _label or _weighted"):
        Catalog.from_dict({**raw, "magnitudes": mags})
    variable = {**raw["variables"][0], "name": name}
    with pytest.raises(CatalogError, match=r"names ending in _label or _weighted"):
        Catalog.from_dict({**raw, "variables": [variable, *raw["variables"][1:]]})


def test_reading_a_column_name_back():
    for kind, weighted in itertools.product(("sum", "mean"), (False, True)):
        for name in ("X", "INCOME", "A_B_C", "weighted", "sum_x"):
            column = magnitude_column(kind, name, weighted=weighted)
            assert read_magnitude_column(column) == (kind, name, weighted)
    for other in ("n", "weighted", "se", "ci_low", "sensitive_INCOME", "sum_", "summary"):
        assert read_magnitude_column(other) is None
