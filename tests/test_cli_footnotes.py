"""`tablesafe table --footnotes`: the CSV the API serves, footnotes included, byte for byte."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from tablesafe._cli import get_app
from tablesafe._settings import load_site_config
from tablesafe.catalog._catalog import Catalog
from tablesafe.server import create_app

SITE = """\
[server]
audit_db = "audit.sqlite"

[[datasets]]
name = "demo"
path = "{data}"

[datasets.protection]
method = "ckm"
max_deviation = 3
variance = 1.0

[datasets.rules]
min_universe_size = 20
sliver_min_difference = 0
"""


@pytest.fixture(scope="module")
def site_file(demo_dir, tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("clifoot")
    path = base / "site.toml"
    path.write_text(SITE.format(data=demo_dir))
    return path


def _cli(*args: str) -> str:
    result = CliRunner().invoke(get_app(), ["table", *args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def test_cli_csv_with_footnotes_is_the_api_csv(demo_dir, site_file):
    args = ["--rows", "AGEGRP", "--cols", "SEX", "--where", "ZONE=N", "--format", "csv"]
    cli = _cli(str(demo_dir), *args, "--footnotes", "--config", str(site_file))
    with TestClient(create_app(load_site_config(site_file))) as client:
        api = client.post(
            "/api/datasets/demo/tables?format=csv",
            json={"dimensions": ["AGEGRP", "SEX"], "universe": {"ZONE": ["N"]}},
        ).text
    assert cli == api
    notes = [line for line in cli.splitlines() if line.startswith("#")]
    assert any("Protection:" in line for line in notes)
    citation = Catalog.from_toml(demo_dir / "catalog.toml").citation
    assert any(citation[:40] in line for line in notes)
    # The cells read back unchanged, and without --footnotes there are no '#' lines.
    plain = _cli(str(demo_dir), *args, "--config", str(site_file))
    assert "#" not in plain
    pd.testing.assert_frame_equal(
        pd.read_csv(io.StringIO(cli), comment="#"), pd.read_csv(io.StringIO(plain))
    )


def test_text_output_gains_the_footnotes(demo_dir):
    out = _cli(str(demo_dir), "--rows", "REGION", "--footnotes")
    tail = out.split("\n\n# ", 1)[1]
    assert tail.startswith("Universe: All records.\n# Protection:") and "Source:" in out


def test_footnotes_of_an_unprotected_table_are_refused(demo_dir):
    result = CliRunner().invoke(
        get_app(), ["table", str(demo_dir), "--rows", "REGION", "--method", "none", "--footnotes"]
    )
    assert result.exit_code != 0
    assert "--method none gives an unprotected table" in str(result.exception)
