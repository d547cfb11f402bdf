"""Tables ready to publish (issue 30): titles and universes in words, file names, labels, XLSX as shown."""

from __future__ import annotations

import io
import itertools
import json

import pandas as pd
import pytest
from click.testing import CliRunner
from openpyxl import load_workbook

import tablesafe as ts
from publishing import PROFILES, REQUESTS, client
from tablesafe._cli import get_app
from tablesafe._protection import Protection
from tablesafe.output._workbook import sheet_names


@pytest.fixture(scope="module")
def site(demo_dir, tmp_path_factory):
    with client(demo_dir, tmp_path_factory.mktemp("site")) as c:
        yield c


def test_title_universe_and_file_name_in_words(site):
    body = {"dimensions": ["AGEGRP", "SEX"], "universe": {"REGION": [1]}, "statistic": "both"}
    doc = site.post("/api/datasets/lt/tables", json=body).json()
    assert doc["meta"]["title"] == "Count and weighted count by Age group and Sex"
    assert doc["meta"]["universe_label"] == "Region is North"
    r = site.post("/api/datasets/lt/tables?format=xlsx", json=body)
    assert r.headers["content-disposition"] == 'attachment; filename="AGEGRP-by-SEX-North.xlsx"'
    two = {**body, "universe": {"REGION": ["1", 2], "SEX": [2]}, "statistic": "count,mean:INCOME"}
    doc = site.post("/api/datasets/lt/tables", json=two).json()
    assert doc["meta"]["universe_label"] == "Region is North or North East; Sex is Female"
    assert doc["meta"]["title"] == (
        "Count and mean of Annual income (currency units) by Age group and Sex"
    )
    r = site.post("/api/datasets/lt/tables?format=sdmx-csv", json=two)
    assert (
        'filename="AGEGRP-by-SEX-North-North-East-Female.sdmx.csv"'
        in r.headers["content-disposition"]
    )
    many = {"dimensions": ["SEX"], "universe": {"REGION": [1, 2, 3, 4, 5]}}
    r = site.post("/api/datasets/lt/tables?format=csv", json=many)
    assert 'filename="SEX-REGION-5-categories.csv"' in r.headers["content-disposition"]
    text = r.text
    assert "\n# Universe: Region is North, North East, North West, Capital or Central.\n# " in text
    r = site.post("/api/datasets/lt/tables?format=csv", json={"dimensions": ["SEX"]})
    assert "\n# Universe: All records.\n" in r.text


def test_csv_labels_with_custom_groups(site):
    body = REQUESTS[3]
    codes = pd.read_csv(
        io.StringIO(site.post("/api/datasets/none/tables?format=csv", json=body).text), comment="#"
    )
    labelled = pd.read_csv(
        io.StringIO(site.post("/api/datasets/none/tables?format=csv&labels=true", json=body).text),
        comment="#",
    )
    assert list(labelled.columns[:4]) == ["AGEB", "AGEB_label", "EDUC", "EDUC_label"]
    assert set(labelled["AGEB_label"]) == {"Under 35", "35 to 64", "65 and over", "Total"}
    # The same cells: the label columns are added, nothing else changes.
    pd.testing.assert_frame_equal(labelled.drop(columns=["AGEB_label", "EDUC_label"]), codes)


def _layers(table):
    return itertools.product(*[range(d.size + 1) for d in table.dimensions[2:]])


@pytest.mark.parametrize("dims", [("REGION",), ("AGEGRP", "MARSTAT"), ("ZONE", "SEX", "TENURE")])
def test_xlsx_first_sheets_are_the_crosstab_as_shown(demo_dir, dims):
    dataset = ts.Dataset.open(demo_dir)
    request = ts.TableRequest(dims, statistic="both,mean:INCOME", universe={"EDUC": [1, 2, 3]})
    table = ts.TableBuilder(dataset, Protection(None)).build(request)
    book = load_workbook(io.BytesIO(table.to_xlsx_bytes()))
    shown = table.shown_statistics()
    assert book.sheetnames == [*sheet_names(list(shown)).values(), "cells", "about"]
    assert book.sheetnames[:3] == ["Count", "Weighted count", "Weighted mean INCOME"]
    for stat, sheet in zip(shown, book.worksheets, strict=False):
        rows = [list(r) for r in sheet.iter_rows(values_only=True)]
        by = table.title.split(" by ", 1)[1]
        # The table is unprotected (Protection(None)): each sheet's heading says so first.
        assert rows[0][0] == f"UNPROTECTED: {table.statistic_labels()[stat]} by {by}"
        assert rows[1][0] == f"Universe: {table.universe_label}"
        # Brute force: find each block and compare every figure with the table's array.
        labels = [(*d.labels, "Total") for d in table.dimensions]
        r = 3
        for layer in _layers(table):
            if table.dimensions[2:]:
                name = ", ".join(
                    f"{d.label} = {labels[2 + k][j]}"
                    for k, (d, j) in enumerate(zip(table.dimensions[2:], layer, strict=True))
                )
                assert rows[r][0] == name
                r += 1
            header = rows[r]
            if len(dims) == 1:
                assert header[:2] == [table.dimensions[0].label, "Value"]
                cols = [None]
            else:
                assert header[0] == f"{table.dimensions[0].label} \\ {table.dimensions[1].label}"
                assert header[1 : 2 + table.dimensions[1].size] == list(labels[1])
                cols = list(range(table.dimensions[1].size + 1))
            for i, row_label in enumerate(labels[0]):
                row = rows[r + 1 + i]
                assert row[0] == row_label
                for c, j in enumerate(cols):
                    want = shown[stat][(i,) if j is None else (i, j, *layer)]
                    got = row[1 + c]
                    assert got == (None if want is None else pytest.approx(want)), (stat, i, j)
            r += 2 + len(labels[0])
        # The statement follows the blocks.
        statement = table.footnotes()["statement"]
        assert [row[0] for row in rows[r : r + len(statement)]] == statement
    # The first figure (below the layer's name in a 3-way table): whole numbers, separated.
    first = book.worksheets[0].cell(row=5 + (len(dims) > 2), column=2)
    assert isinstance(first.value, int) and first.number_format == "#,##0"
    # Means are rounded to 0.01 by the site: two decimals.
    means = [c for row in book["Weighted mean INCOME"].iter_rows() for c in row[1:]]
    assert {c.number_format for c in means if isinstance(c.value, float)} == {"#,##0.00"}


def test_xlsx_about_sheet_reads_as_text(site):
    raw = site.post("/api/datasets/lt/tables?format=xlsx", json=REQUESTS[0]).content
    book = load_workbook(io.BytesIO(raw))
    about = [r for r in book["about"].iter_rows(values_only=True)]
    items = {r[0]: r[1] for r in about[1:]}
    assert about[0][0] == "About this table"
    assert items["Universe"] == "Region is North or North East"
    assert items["Universe in codes"] == "REGION: 1, 2"
    assert items["Source"].startswith("tablesafe demo survey")
    assert items["Rounding of weighted figures"] == "1"
    text = " ".join(str(v) for r in about for v in r if v is not None)
    # No Python dict or list of codes: settings read "key: value; key: value".
    assert "{" not in text and "[" not in text and "': " not in text
    # Suppressed cells show as the site shows them ("<5"), in the cross-tab too.
    values = {v for r in book["Count"].iter_rows(values_only=True) for v in r[1:]}
    assert "<5" in values


def test_cli_writes_jsonstat_sdmx_and_labels(demo_dir):
    run = CliRunner().invoke
    base = ["table", str(demo_dir), "--rows", "SEX", "--where", "REGION=1"]
    out = run(get_app(), [*base, "--format", "jsonstat"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["class"] == "dataset" and doc["note"][0] == "Universe: Region is North."
    out = run(get_app(), [*base, "--format", "sdmx-csv", "--labels"])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[0].startswith("STRUCTURE,STRUCTURE_ID,ACTION,SEX: Sex,")
    out = run(get_app(), [*base, "--format", "csv", "--labels"])
    assert out.output.splitlines()[0].startswith("SEX,SEX_label,n,")


def test_every_served_profile_answers_every_format(site):
    for profile in PROFILES:
        for fmt in ("csv", "json", "xlsx", "jsonstat", "sdmx-csv", "sdmx-json"):
            r = site.post(f"/api/datasets/{profile}/tables?format={fmt}", json=REQUESTS[1])
            assert r.status_code == 200, (profile, fmt, r.text)
