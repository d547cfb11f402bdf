"""Magnitude tables through the HTTP API, the CLI and the site configuration (issue 17)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from tablesafe._cli import get_app
from tablesafe._settings import load_site_config
from tablesafe.server import create_app
from tablesafe.server._auth import hash_key

KEY = "magnitude-test-key-0123456789"


def site(demo_dir: Path, tmp_path: Path, magnitudes: dict[str, object] | None = None):
    return load_site_config(
        data={
            "base": str(tmp_path),
            "server": {"title": "Test", "audit_db": "audit.sqlite"},
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": {"method": "ckm"},
                    "rules": {"min_universe_size": 20},
                    "magnitudes": magnitudes or {},
                }
            ],
            "keys": [{"id": "u", "hash": hash_key(KEY), "role": "user"}],
        }
    )


def test_http_api_sums_and_means(demo_dir: Path, tmp_path: Path) -> None:
    with TestClient(create_app(site(demo_dir, tmp_path))) as c:
        c.headers["x-api-key"] = KEY
        body = {"dimensions": ["REGION"], "statistic": "count,sum:INCOME,mean:HOURS"}
        r = c.post("/api/datasets/demo/tables", json=body)
        assert r.status_code == 200, r.text
        data = r.json()
        cell = data["cells"][0]
        assert {"n", "sum_INCOME", "mean_HOURS", "sensitive_INCOME"} <= set(cell)
        meta = data["meta"]["magnitudes"]
        assert meta["method"] == "ckm" and meta["variables"] == ["INCOME", "HOURS"]
        # The same figures through the magnitudes field.
        body2 = {"dimensions": ["REGION"], "statistic": "count", "magnitudes": ["sum:INCOME"]}
        r2 = c.post("/api/datasets/demo/tables", json=body2)
        assert [x["sum_INCOME"] for x in r2.json()["cells"]] == [
            x["sum_INCOME"] for x in data["cells"]
        ]
        bad = c.post(
            "/api/datasets/demo/tables",
            json={"dimensions": ["REGION"], "statistic": "count,mean:SEX"},
        )
        assert bad.status_code == 400
        assert "categorical variable, not a continuous one" in bad.json()["error"]["message"]


def test_site_settings_choose_the_method(demo_dir: Path, tmp_path: Path) -> None:
    with TestClient(create_app(site(demo_dir, tmp_path, {"method": "dp", "epsilon": 2.0}))) as c:
        c.headers["x-api-key"] = KEY
        body = {"dimensions": ["SEX"], "statistic": "count,sum:HOURS"}
        meta = c.post("/api/datasets/demo/tables", json=body).json()["meta"]["magnitudes"]
        assert meta["method"] == "dp" and meta["epsilon"] == 2.0
        assert meta["laplace_scale"] == {"HOURS": 99 / 2.0}
    with pytest.raises(Exception, match="sensitive_action"):
        site(demo_dir, tmp_path, {"sensitive_action": "publish"})


def test_cli_table_with_magnitudes(demo_dir: Path) -> None:
    runner = CliRunner()
    args = ["table", str(demo_dir), "--rows", "SEX", "--format", "csv"]
    out = runner.invoke(get_app(), [*args, "--statistic", "count,sum:INCOME,mean:INCOME"])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.output)))
    assert len(rows) == 3 and float(rows[-1]["sum_INCOME"]) > 0
    bad = runner.invoke(get_app(), [*args, "--statistic", "count,sum:SEX"])
    assert bad.exit_code != 0 and "not a continuous one" in bad.output + str(bad.exception)


@pytest.mark.system
def test_spark_gives_the_same_bits(demo_dir: Path, spark: Any) -> None:
    import numpy as np

    from tablesafe._request import TableRequest
    from tablesafe.catalog._dataset import Dataset
    from tablesafe.engines import DuckDBEngine

    ds = Dataset.open(demo_dir)
    for statistic in ("count", "both"):
        plan = TableRequest(
            ("REGION", "AGEGRP"),
            statistic=statistic,  # type: ignore[arg-type]
            magnitudes=("sum:INCOME", "mean:HOURS"),
        ).bind(ds.catalog)
        cells = spark.tabulate(ds, plan)
        duck = DuckDBEngine().tabulate(ds, plan)
        for name in ("INCOME", "HOURS"):
            assert np.array_equal(cells.magnitudes[name].total, duck.magnitudes[name].total)
            assert np.array_equal(cells.magnitudes[name].top, duck.magnitudes[name].top)
