"""Withheld cells in every format, as docs/formats.md ("Withheld cells") says (issue 37).

SEX by AGEGRP is published, then the same table in a universe without one
employment status of which one age group holds a few records: that age
group's cells are withheld, and the totals over them add up the cells
published. The table asks for counts, weighted counts, row percentages and a
mean, so that every kind of withheld figure occurs: a withheld cell's, and a
mean of a total that leaves withheld cells out. Each format is read back and
every figure checked against the JSON format's flags.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
import zipfile
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.output._render import EXCLUDES_WITHHELD_MARK, WITHHELD_MARK
from test_account import CKM, WHO, _service
from test_guard import _dimension_sliver

MEAN = "mean_INCOME_weighted"


@pytest.fixture(scope="module")
def sliver(demo_dir) -> list[int]:
    """Every employment status but one that isolates a few records of an age group."""
    data = pd.read_parquet(demo_dir / "microdata.parquet", columns=["AGE", "SEX", "EMPSTAT"])
    groups = Dataset.open(demo_dir).catalog.variable("AGEGRP")
    where = {a: c for c, ms in zip(groups.codes, groups.members, strict=True) for a in ms}
    data["AGEGRP"] = data["AGE"].map(where)
    status, _, _ = _dimension_sliver(data, 10)
    return [int(s) for s in sorted(data["EMPSTAT"].unique()) if s != status]


@pytest.fixture(scope="module")
def table(demo_dir, tmp_path_factory, sliver):
    others = sliver
    tmp = tmp_path_factory.mktemp("withheld")
    service = _service(demo_dir, tmp, CKM, sliver_min_difference=10, max_withheld_share=1.0)
    try:
        service.table(WHO, "demo", TableRequest(("SEX", "AGEGRP"), statistic="both"))
        return service.table(
            WHO,
            "demo",
            TableRequest(
                ("SEX", "AGEGRP"),
                universe={"EMPSTAT": others},
                statistic="both,percent:row",
                magnitudes=("mean:INCOME",),
            ),
        )
    finally:
        service.close()


@pytest.fixture(scope="module")
def cells(table) -> list[dict[str, Any]]:
    return json.loads(table.render("json"))["cells"]


@pytest.fixture(scope="module")
def flags(table) -> dict[str, str]:
    return json.loads(table.render("json"))["meta"]["footnotes"]["flags"]


def _key(cell: dict[str, Any]) -> tuple[str, str]:
    return str(cell["SEX"]), str(cell["AGEGRP"])


def _withheld_figures(cells: list[dict[str, Any]]) -> set[tuple[tuple[str, str], str]]:
    """Every (cell, statistic) withheld, from the JSON flags alone: every statistic of a
    withheld cell, a row percentage whose row total is withheld, a mean of a total that
    leaves withheld cells out."""
    by = {_key(c): c for c in cells}
    out = set()
    for c in cells:
        for stat in ("n", "weighted", "percent_row", MEAN):
            row_total = by[(str(c["SEX"]), "_T")]
            if (
                c["withheld"]
                or (stat == "percent_row" and row_total["withheld"])
                or (stat == MEAN and c["excludes_withheld"])
            ):
                out.add((_key(c), stat))
    return out


def test_json_and_csv_blank_withheld_figures_and_flag_the_cells(table, cells, flags):
    hidden = [c for c in cells if c["withheld"]]
    totals = [c for c in cells if c["excludes_withheld"]]
    assert hidden and totals and not any(c["withheld"] for c in totals)
    for key, stat in _withheld_figures(cells):
        assert next(c for c in cells if _key(c) == key)[stat] is None, (key, stat)
    # A total marked excludes_withheld adds up the published cells it covers (additive site).
    by = {_key(c): c for c in cells}
    for c in totals:
        parts = [
            d
            for d in cells
            if "_T" not in _key(d)
            and all(t == "_T" or t == v for t, v in zip(_key(c), _key(d), strict=True))
        ]
        assert c["n"] == sum(d["n"] for d in parts if not d["withheld"])
        assert any(d["withheld"] for d in parts)
    assert by[("_T", "_T")]["excludes_withheld"]
    assert "withheld" in flags and "excludes_withheld" in flags
    rows = list(csv.DictReader(io.StringIO(table.to_csv())))
    assert len(rows) == len(cells)
    for row, cell in zip(rows, cells, strict=True):
        assert row["withheld"] == str(cell["withheld"])
        assert row["excludes_withheld"] == str(cell["excludes_withheld"])
        if cell["withheld"]:
            assert row["n"] == row["weighted"] == row["percent_row"] == row[MEAN] == ""


def _section(text: str, label: str) -> dict[str, list[str]]:
    """One statistic's cross-tab in the text format: row label -> the words after it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == label)
    out = {}
    for line in lines[start + 3 :]:
        if not line.strip():
            break
        if not line.strip().startswith("━"):
            words = line.split()
            out[words[0]] = words[1:]
    return out


def test_text_shows_marks_never_a_withheld_number(table, cells, flags):
    text = table.render("text")
    labels = table.statistic_labels()
    sexes = dict(zip([*table.dimensions[0].labels, "Total"], ["1", "2", "_T"], strict=True))
    codes = [*map(str, table.dimensions[1].codes), "_T"]
    by = {_key(c): c for c in cells}
    withheld = _withheld_figures(cells)
    marks = 0
    for stat in ("n", "weighted", "percent_row", MEAN):
        rows = _section(text, labels[stat])
        for sex_label, sex in sexes.items():
            words = iter(rows[sex_label])
            for code in codes:
                cell, shown = by[(sex, code)], next(words)
                if ((sex, code), stat) in withheld:
                    # The mark, never a number.
                    assert shown == WITHHELD_MARK, (sex, code, stat)
                    marks += 1
                    continue
                assert re.fullmatch(r"[\d,.]+", shown), (sex, code, stat, shown)
                if stat == "n":
                    assert shown == f"{cell['n']:,}"
                if cell["excludes_withheld"]:
                    # A total of the cells published only: its figure, then the mark t.
                    assert next(words) == EXCLUDES_WITHHELD_MARK, (sex, code, stat)
            assert next(words, None) is None
    assert marks == len(withheld)
    # The means of the totals that leave withheld cells out are withheld: marked too.
    assert any(stat == MEAN and not by[key]["withheld"] for key, stat in withheld)
    # The marks' legend, in the footnotes' words.
    assert f"{WITHHELD_MARK}: {flags['withheld']}" in text
    assert f"{EXCLUDES_WITHHELD_MARK}: {flags['excludes_withheld']}" in text


def test_xlsx_cross_tabs_mark_withheld_cells_and_partial_totals(table, cells, flags):
    import openpyxl

    book = openpyxl.load_workbook(io.BytesIO(table.to_xlsx_bytes()))
    sheet = book["Count"]
    rows = [r for r in sheet.iter_rows() if r[0].value in ("Male", "Female", "Total")]
    codes = [*map(str, table.dimensions[1].codes), "_T"]
    sexes = {"Male": "1", "Female": "2", "Total": "_T"}
    by = {_key(c): c for c in cells}
    for row in rows:
        for code, xl in zip(codes, row[1:], strict=True):
            cell = by[(sexes[row[0].value], code)]
            if cell["withheld"]:
                assert xl.value == WITHHELD_MARK
            else:
                assert xl.value == cell["n"]
                marked = xl.number_format.endswith(f'" {EXCLUDES_WITHHELD_MARK}"')
                assert marked == cell["excludes_withheld"], (cell, xl.number_format)
    notes = [r[0].value for r in sheet.iter_rows() if r[0].value]
    assert f"{WITHHELD_MARK}: {flags['withheld']}" in notes
    assert f"{EXCLUDES_WITHHELD_MARK}: {flags['excludes_withheld']}" in notes
    about = {r[0].value: r[1].value for r in book["about"].iter_rows() if r[0].value}
    assert about["Flag withheld"] == flags["withheld"]
    sheet_rows = list(book["cells"].iter_rows(values_only=True))
    at = next(i for i, r in enumerate(sheet_rows) if r and "withheld" in r)
    header, body = sheet_rows[at], [r for r in sheet_rows[at + 1 :] if r and r[0] is not None]
    col = {name: header.index(name) for name in ("n", "withheld", "excludes_withheld")}
    assert len(body) == len(cells)
    for row, cell in zip(body, cells, strict=True):
        assert row[col["withheld"]] is cell["withheld"]
        assert row[col["excludes_withheld"]] is cell["excludes_withheld"]
        assert row[col["n"]] == cell["n"]  # None (an empty cell) where withheld
    assert zipfile.is_zipfile(io.BytesIO(table.to_xlsx_bytes()))


def test_jsonstat_status_c_and_t(table, cells, flags):
    doc = json.loads(table.render("jsonstat"))
    index = [doc["dimension"][d]["category"]["index"] for d in doc["id"]]
    assert doc["id"] == ["SEX", "AGEGRP", "STATISTIC"]
    withheld = _withheld_figures(cells)
    by = {_key(c): c for c in cells}
    for i, (sex, group, stat) in enumerate(itertools.product(*index)):
        status, value = doc["status"].get(str(i)), doc["value"][i]
        cell = by[(sex, group)]
        if ((sex, group), stat) in withheld:
            assert status == "C" and value is None, (sex, group, stat)
        elif cell["excludes_withheld"]:
            assert status == EXCLUDES_WITHHELD_MARK and value == cell[stat], (sex, group, stat)
        else:
            assert status not in ("C", EXCLUDES_WITHHELD_MARK), (sex, group, stat)
    legend = doc["extension"]["status"]
    assert legend["C"] == flags["withheld"]
    assert legend[EXCLUDES_WITHHELD_MARK] == flags["excludes_withheld"]


def _sdmx_rows(table) -> list[dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(table.render("sdmx-csv"))))
    return [r for r in rows if r["STATISTIC"]]


def test_sdmx_withheld_is_q_and_c_partial_totals_commented(table, cells, flags):
    withheld = _withheld_figures(cells)
    by = {_key(c): c for c in cells}
    rows = _sdmx_rows(table)
    stats = {r["STATISTIC"] for r in rows}
    assert {"n", "weighted", "percent_row", MEAN} <= stats
    seen = 0
    for r in rows:
        key, stat = (r["SEX"], r["AGEGRP"]), r["STATISTIC"]
        cell = by[key]
        if (key, stat) in withheld:
            assert (r["OBS_VALUE"], r["OBS_STATUS"], r["CONF_STATUS"]) == ("", "Q", "C")
            assert r["COMMENT_OBS"] == flags["withheld"]
            seen += 1
        else:
            assert r["CONF_STATUS"] == "F" and r["OBS_VALUE"] != ""
            if cell["excludes_withheld"]:
                assert r["COMMENT_OBS"] == flags["excludes_withheld"]
                assert r["OBS_STATUS"] == "E"  # the cell-key method changes every count
    assert seen == len([1 for key, stat in withheld if stat in stats])
    # SDMX-JSON carries the same observations and attributes.
    doc = json.loads(table.render("sdmx-json"))
    attributes = doc["data"]["structures"][0]["attributes"]["observation"]
    conf = next(a for a in attributes if a["id"] == "CONF_STATUS")
    codes = [v["id"] for v in conf["values"]]
    observations = doc["data"]["dataSets"][0]["observations"].values()
    confidential = [o for o in observations if codes[o[2]] == "C"]
    assert len(confidential) == seen
    assert all(o[0] is None for o in confidential)


def test_the_masks_are_the_blank_figures(table):
    """withheld_figures() is exactly where withholding blanked a figure the table had."""
    figures = table.withheld_figures()
    published = table.published(table.statistics())
    for name, mask in figures.items():
        blank = np.vectorize(lambda v: v is None, otypes=[bool])(published[name].astype(object))
        assert (blank[mask]).all(), name


def test_where_margins_are_perturbed_on_their_own_totals_over_a_withheld_cell_are_withheld(
    demo_dir, tmp_path, sliver
):
    """Additivity independent: no total adds up the published cells, so a total over a
    withheld cell is withheld with it (and none is flagged excludes_withheld)."""
    others = sliver
    service = _service(
        demo_dir,
        tmp_path,
        {**CKM, "additivity": "independent"},
        sliver_min_difference=10,
        max_withheld_share=1.0,
    )
    try:
        service.table(WHO, "demo", TableRequest(("SEX", "AGEGRP"), statistic="both"))
        table = service.table(
            WHO, "demo", TableRequest(("SEX", "AGEGRP"), universe={"EMPSTAT": others})
        )
    finally:
        service.close()
    cells = json.loads(table.render("json"))["cells"]
    hidden = {_key(c) for c in cells if c["withheld"]}
    assert hidden and not any(c.get("excludes_withheld") for c in cells)
    for sex, group in [k for k in hidden if "_T" not in k]:
        assert {(sex, "_T"), ("_T", group), ("_T", "_T")} <= hidden
    assert any("Totals over a withheld cell are withheld too." in s for s in
               json.loads(table.render("json"))["meta"]["footnotes"]["statement"])  # fmt: skip
