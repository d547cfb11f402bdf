"""The output-format registry (issue 27): one place that every interface reads."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

import tablesafe as ts
from tablesafe._errors import ParameterError, RequestError
from tablesafe._protection import Protection
from tablesafe._settings import load_site_config
from tablesafe.output import _formats as _formats
from tablesafe.output._formats import OutputFormat, format_names, output_format, register_format
from tablesafe.server import create_app


def _tsv(table, options):
    return table.to_csv(footnotes=options.footnotes).replace(",", "\t")


@pytest.fixture
def tsv(monkeypatch):
    # The registry is process-wide: the test's format is taken out again.
    monkeypatch.setattr(_formats, "_REGISTRY", dict(_formats._REGISTRY))
    register_format(OutputFormat("tsv", "text/tab-separated-values", "tsv", _tsv))


def test_builtin_formats():
    sdmx = ("sdmx-csv", "sdmx-json", "sdmx-structure")
    assert format_names() == ("text", "csv", "json", "xlsx", "jsonstat", *sdmx)
    assert format_names(served=True) == ("csv", "json", "xlsx", "jsonstat", *sdmx)
    assert format_names(binary=False) == ("text", "csv", "json", "jsonstat", *sdmx)
    with pytest.raises(
        RequestError,
        match=r"unknown format 'yaml'; allowed: text, csv, json, xlsx, jsonstat, sdmx-csv, "
        r"sdmx-json, sdmx-structure$",
    ):
        output_format("yaml")
    with pytest.raises(
        RequestError,
        match="allowed: text, csv, json, jsonstat, sdmx-csv, sdmx-json, sdmx-structure$",
    ):
        output_format("xlsx", binary=False)


def test_a_registered_format_reaches_every_interface(tsv, demo_dir, tmp_path):
    with pytest.raises(ParameterError, match="registered already"):
        register_format(OutputFormat("tsv", "text/plain", "tsv", _tsv))
    table = ts.TableBuilder(ts.Dataset.open(demo_dir), Protection(None)).build(
        ts.TableRequest(("SEX",))
    )
    assert table.render("tsv") == table.to_csv().replace(",", "\t")
    site = load_site_config(
        data={
            "base": str(tmp_path),
            "server": {"audit_db": "audit.sqlite"},
            "datasets": [{"name": "demo", "path": str(demo_dir), "protection": {"method": "none"}}],
        }
    )
    with TestClient(create_app(site)) as client:
        r = client.post(
            "/api/datasets/demo/tables?format=tsv&footnotes=false", json={"dimensions": ["SEX"]}
        )
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/tab-separated-values")
        # Named after the table (issue 30).
        assert 'filename="SEX.tsv"' in r.headers["content-disposition"]
        assert r.text == table.to_csv().replace(",", "\t")
        bad = client.post("/api/datasets/demo/tables?format=text", json={"dimensions": ["SEX"]})
        assert bad.status_code == 400
        assert bad.json()["error"]["message"] == (
            "unknown format 'text'; allowed: csv, json, xlsx, jsonstat, sdmx-csv, sdmx-json, "
            "sdmx-structure, tsv"
        )


def test_render_refuses_a_binary_format(demo_dir):
    table = ts.TableBuilder(ts.Dataset.open(demo_dir), Protection(None)).build(
        ts.TableRequest(("SEX",))
    )
    with pytest.raises(RequestError, match="unknown format 'xlsx'; allowed: text, csv, json,"):
        table.render("xlsx")
