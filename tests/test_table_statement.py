"""Every format states the table (issue 30): title, universe, source, dates of the data, rounding.

The catalog's ``citation``, ``reference_date`` and ``updated`` reach every
output: JSON's meta, the CSV's ``#`` lines, the XLSX's sheets, JSON-stat's
``source``/``updated``/``note``, SDMX-CSV's dataset attributes and the text
format, which is headed by the title and the universe in words.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import shutil
import tomllib

import pytest
from fastapi.testclient import TestClient
from openpyxl import load_workbook

import tablesafe as ts
from tablesafe._errors import CatalogError
from tablesafe._settings import load_site_config
from tablesafe.catalog._catalog import Catalog
from tablesafe.server import create_app

DATES = 'reference_date = "2021-03-21"\nupdated = 2024-05-02\n'
BODY = {
    "dimensions": ["AGEGRP", "SEX"],
    "universe": {"REGION": [1, 2]},
    "statistic": "both,sum:INCOME",
}


@pytest.fixture(scope="module")
def dated_dir(demo_dir, tmp_path_factory):
    """The demo survey with a reference date and a date of update in its catalog."""
    out = tmp_path_factory.mktemp("dated")
    shutil.copy(demo_dir / "microdata.parquet", out / "microdata.parquet")
    text = (demo_dir / "catalog.toml").read_text()
    (out / "catalog.toml").write_text(text.replace("[dataset]\n", "[dataset]\n" + DATES, 1))
    return out


@pytest.fixture(scope="module")
def site(dated_dir, tmp_path_factory):
    config = load_site_config(
        data={
            "base": str(tmp_path_factory.mktemp("site")),
            "server": {"audit_db": "audit.sqlite"},
            "datasets": [
                {"name": "dated", "path": str(dated_dir), "protection": {"method": "ckm"}}
            ],
        }
    )
    with TestClient(create_app(config)) as client:
        yield client


def _post(site, fmt):
    r = site.post(f"/api/datasets/dated/tables?format={fmt}", json=BODY)
    assert r.status_code == 200, r.text
    return r


@pytest.fixture(scope="module")
def meta(site):
    return _post(site, "json").json()["meta"]


def test_json_meta_states_the_table(meta, dated_dir):
    catalog = ts.Dataset.open(dated_dir).catalog
    assert catalog.reference_date == "2021-03-21" and catalog.updated == "2024-05-02"
    assert meta["title"] == (
        "Count, weighted count and weighted sum of Annual income (currency units) "
        "by Age group and Sex"
    )
    assert meta["universe_label"] == "Region is North or North East"
    assert (meta["reference_date"], meta["updated"]) == ("2021-03-21", "2024-05-02")
    statement = meta["footnotes"]["statement"]
    assert f"Source: {catalog.citation.replace('`', '')}" in statement
    assert "Reference date of the data: 2021-03-21." in statement
    assert "Data last updated: 2024-05-02." in statement
    assert any("rounded to whole units" in s for s in statement)
    assert meta["file_stem"] == "AGEGRP-by-SEX-North-North-East"


def test_csv_xlsx_jsonstat_and_sdmx_carry_every_sentence(site, meta):
    statement = meta["footnotes"]["statement"]
    universe = f"Universe: {meta['universe_label']}."
    comments = [line[2:] for line in _post(site, "csv").text.splitlines() if line.startswith("# ")]
    # The universe, every sentence of the statement, then the flags' legend.
    assert comments[: 1 + len(statement)] == [universe, *statement]
    assert all(line.startswith("Flag ") for line in comments[1 + len(statement) :])
    doc = json.loads(_post(site, "jsonstat").text)
    assert (doc["label"], doc["updated"]) == (meta["title"], "2024-05-02")
    assert doc["source"] == meta["citation"].replace("`", "")
    assert doc["note"] == [universe, *statement]
    head = next(csv.DictReader(io.StringIO(_post(site, "sdmx-csv").text)))
    assert head["TITLE"] == meta["title"]
    assert head["COMMENT_DSET"] == " ".join([universe, *statement])
    book = load_workbook(io.BytesIO(_post(site, "xlsx").content))
    about = {r[0]: r[1] for r in book["about"].iter_rows(values_only=True)}
    assert (about["Reference date"], about["Updated"]) == ("2021-03-21", "2024-05-02")
    assert about["Source"] == doc["source"]
    assert about["Rounding of weighted figures"] == "1"
    notes = [v for (k, v) in book["about"].iter_rows(values_only=True) if k == "Note"]
    assert notes == statement
    for sheet in book.worksheets[:3]:
        column = [r[0] for r in sheet.iter_rows(values_only=True)]
        assert column[1] == universe.rstrip(".")
        assert column[-len(statement) :] == statement


def test_text_is_headed_in_words(dated_dir):
    dataset = ts.Dataset.open(dated_dir)
    request = ts.TableRequest(("AGEGRP", "SEX"), universe={"REGION": [1, 2]}, statistic="both")
    table = ts.TableBuilder(dataset, ts.Protection(None)).build(request)
    lines = table.render_text(footnotes=True).splitlines()
    assert lines[:3] == [
        # An unprotected table (Protection(None)) says so first (issue 38).
        "UNPROTECTED: Count and weighted count by Age group and Sex",
        "Universe: Region is North or North East",
        f"Dataset: {dataset.catalog.title} ({dataset.name})",
    ]
    # The statistics in words, not codes; the footnotes as "#" lines at the end.
    assert lines[3].strip() == "Count" and "Weighted count" in [x.strip() for x in lines]
    assert "# Reference date of the data: 2021-03-21." in lines
    assert not any("REGION in" in line for line in lines)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("reference_date", "21/03/2021", r"ISO 8601 date \(YYYY, YYYY-MM or YYYY-MM-DD\)"),
        ("reference_date", "2021-02-29", "not a date of the calendar"),
        ("updated", "2024", r"ISO 8601 date \(YYYY-MM-DD\), not '2024'"),
        ("updated", 20240502, r"ISO 8601 date \(YYYY-MM-DD\)"),
    ],
)
def test_bad_dates_are_refused(demo_dir, key, value, message):
    raw = ts.Dataset.open(demo_dir).catalog.to_dict()
    with pytest.raises(CatalogError, match=rf"dataset\.{key} .*{message}|{message}"):
        Catalog.from_dict({**raw, "dataset": {**raw["dataset"], key: value}})


def test_dates_round_trip_and_periods(demo_dir):
    raw = ts.Dataset.open(demo_dir).catalog.to_dict()
    for ref in ("2021", "2021-03", "2020-02-29", datetime.date(2021, 3, 21)):
        dataset = {**raw["dataset"], "reference_date": ref, "updated": "2024-05-02"}
        catalog = Catalog.from_dict({**raw, "dataset": dataset})
        assert catalog.reference_date == str(ref)
        again = Catalog.from_dict(tomllib.loads(catalog.to_toml()))
        assert (again.reference_date, again.updated) == (str(ref), "2024-05-02")
    # Without dates, no table says anything of them.
    assert "reference_date" not in raw["dataset"]
