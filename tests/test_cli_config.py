"""`tablesafe table --config`: the site's protection and rules, the API's bytes and refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from tablesafe._cli import get_app
from tablesafe._errors import UserError
from tablesafe._settings import load_site_config
from tablesafe.server import create_app

SITE = """\
[server]
title = "cli preview"
audit_db = "audit.sqlite"

[[datasets]]
name = "demo"
path = "{data}"

[datasets.protection]
method = "ckm"

[datasets.rules]
min_universe_size = 40
min_cell_size = 10
max_cells = 400
sliver_min_difference = 0
"""


@pytest.fixture(scope="module")
def site_file(demo_dir, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cliconfig") / "site.toml"
    path.write_text(SITE.format(data=demo_dir))
    return path


def cli(demo_dir, site_file, *args: str):
    return CliRunner().invoke(
        get_app(), ["table", str(demo_dir), *args, "--config", str(site_file), "--format", "csv"]
    )


def api(site_file, body: dict, fmt: str = "csv"):
    with TestClient(create_app(load_site_config(site_file))) as client:
        return client.post(f"/api/datasets/demo/tables?format={fmt}&footnotes=false", json=body)


def test_small_cells_are_suppressed_as_the_api_suppresses_them(demo_dir, site_file):
    # Ages 80-84 by region and sex: some protected counts under 10.
    where = "AGE=" + ",".join(str(a) for a in range(80, 85))
    out = cli(demo_dir, site_file, "--rows", "REGION", "--cols", "SEX", "--where", where)
    assert out.exit_code == 0, out.output
    served = api(
        site_file, {"dimensions": ["REGION", "SEX"], "universe": {"AGE": list(range(80, 85))}}
    )
    assert served.status_code == 200
    assert out.output == served.text
    rows = [line.split(",") for line in out.output.splitlines()[1:]]
    suppressed = [r for r in rows if r[-1] == "True"]
    assert suppressed, out.output


@pytest.mark.parametrize(
    ("args", "body"),
    [
        # 91 ages x 8 regions with margins: over max_cells.
        (["--rows", "AGE", "--cols", "REGION"], {"dimensions": ["AGE", "REGION"]}),
        # A universe under min_universe_size.
        (
            ["--rows", "SEX", "--where", "AGE=90", "--where", "REGION=1"],
            {"dimensions": ["SEX"], "universe": {"AGE": [90], "REGION": [1]}},
        ),
    ],
)
def test_refusals_are_the_api_refusals(demo_dir, site_file, args, body):
    out = cli(demo_dir, site_file, *args)
    served = api(site_file, body, "json")
    assert isinstance(out.exception, UserError) and 400 <= served.status_code < 500
    assert str(out.exception) == served.json()["error"]["message"]
