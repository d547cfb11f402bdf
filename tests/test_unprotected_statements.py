"""An unprotected table says so in every format; a protected one never does (issue 38, item 5).

The flag comes from the protection objects (``Protection.protects``, the magnitudes'
``protects``), never from a constant: ``--method none`` through the protected path (with
standard errors, percentages, a median), a site with ``method = "none"``, and protected
counts beside exact sums all publish ``"protected": false``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from tablesafe import Dataset, Protection, TableBuilder, TableRequest
from tablesafe._cli import get_app
from tablesafe._cli._methods import protection_from_options
from tablesafe._settings import load_site_config
from tablesafe.mechanisms._magnitudes import MagnitudeMethod, MagnitudeProtection
from tablesafe.server import create_app

runner = CliRunner()

#: Requests that go through the protected path even with ``--method none``.
PROTECTED_PATH = [
    ["--se"],
    ["--cols", "SEX", "--statistic", "both,percent:row"],
    ["--statistic", "both,median:INCOME"],
]
TEXT_FORMATS = ["json", "csv", "text", "jsonstat", "sdmx-csv", "sdmx-json"]


def _table(demo_dir: Path, *args: str) -> str:
    result = runner.invoke(get_app(), ["table", str(demo_dir), "--rows", "REGION", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _says_unprotected(fmt: str, text: str) -> None:
    """The document says the table is unprotected, in the format's own way."""
    if fmt == "json":
        meta = json.loads(text)["meta"]
        assert meta["protected"] is False and meta["title"].startswith("UNPROTECTED: ")
    elif fmt == "csv":
        assert text.splitlines()[0].startswith("# UNPROTECTED")
        # Still read back with the documented call.
        assert len(pd.read_csv(io.StringIO(text), comment="#")) > 0
    elif fmt == "text":
        assert text.splitlines()[0].startswith("UNPROTECTED: ")
    elif fmt == "jsonstat":
        doc = json.loads(text)
        assert doc["label"].startswith("UNPROTECTED: ")
        assert doc["extension"]["meta"]["protected"] is False
    elif fmt == "sdmx-csv":
        # The dataset-level row comes first, footnotes asked or not.
        head = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False).iloc[0]
        assert head["TITLE"].startswith("UNPROTECTED: ")
        assert "no protection" in head["COMMENT_DSET"]
    else:
        assert "UNPROTECTED: " in json.loads(text)["data"]["structures"][0]["name"]


@pytest.mark.parametrize("fmt", TEXT_FORMATS)
@pytest.mark.parametrize("args", PROTECTED_PATH, ids=["se", "percent", "median"])
def test_method_none_says_unprotected_in_every_format(demo_dir, args, fmt):
    _says_unprotected(fmt, _table(demo_dir, *args, "--method", "none", "--format", fmt))


@pytest.mark.parametrize("fmt", TEXT_FORMATS)
def test_a_protected_table_never_says_unprotected(demo_dir, fmt):
    text = _table(demo_dir, "--se", "--format", fmt)
    assert "UNPROTECTED" not in text
    if fmt == "json":
        assert json.loads(text)["meta"]["protected"] is True


def test_owner_flags_csv_of_an_unprotected_table(demo_dir):
    text = _table(demo_dir, "--se", "--method", "none", "--format", "csv", "--owner-flags")
    assert text.startswith("# UNPROTECTED")


def _xlsx_text(data: bytes) -> dict[str, pd.DataFrame]:
    return pd.read_excel(io.BytesIO(data), sheet_name=None, header=None)


def test_workbook_of_an_unprotected_table(demo_dir):
    demo = Dataset.open(demo_dir)
    request = TableRequest(("REGION",), replicates=True)
    book = _xlsx_text(TableBuilder(demo, Protection(None)).build(request).to_xlsx_bytes())
    for name, sheet in book.items():
        if name not in ("cells", "about"):
            assert str(sheet.iloc[0, 0]).startswith("UNPROTECTED: "), name
    about = dict(zip(book["about"][0], book["about"][1], strict=True))
    assert about["Protected"] is False or about["Protected"] == "False"
    assert str(about["Title"]).startswith("UNPROTECTED: ")
    protected = TableBuilder(demo, protection_from_options("ckm")).build(request)
    assert all(
        "UNPROTECTED" not in sheet.to_string()
        for sheet in _xlsx_text(protected.to_xlsx_bytes()).values()
    )


def test_protected_counts_beside_exact_sums_are_not_a_protected_table(demo_dir):
    demo = Dataset.open(demo_dir)
    exact = MagnitudeProtection(method=MagnitudeMethod.NONE)
    builder = TableBuilder(demo, protection_from_options("ckm"), magnitudes=exact)
    assert builder.build(TableRequest(("REGION",))).protected  # counts only: protected
    sums = builder.build(TableRequest(("REGION",), magnitudes=("sum:INCOME",)))
    assert not sums.protected and sums.public_metadata()["protected"] is False
    median = builder.build(TableRequest(("REGION",), quantiles=("median:INCOME",)))
    assert not median.protected


def test_a_site_with_method_none_serves_unprotected_tables(demo_dir, tmp_path):
    site = load_site_config(
        data={
            "base": str(tmp_path),
            "server": {"audit_db": "audit.sqlite"},
            "datasets": [{"name": "demo", "path": str(demo_dir), "protection": {"method": "none"}}],
        }
    )
    body = {"dimensions": ["REGION"], "statistic": "both", "se": True}
    with TestClient(create_app(site)) as client:
        url = "/api/datasets/demo/tables"
        doc = client.post(url, json=body).json()
        assert doc["meta"]["protected"] is False
        assert doc["meta"]["title"].startswith("UNPROTECTED: ")
        csv = client.post(url + "?format=csv", json=body).text
        assert csv.startswith("# UNPROTECTED")
