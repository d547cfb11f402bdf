"""The reconstruction audit of everything served: admin endpoint, page section, CLI."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from tablesafe._cli import get_app
from tablesafe._errors import RequestError
from tablesafe._protection import Protection
from tablesafe._request import TableRequest
from tablesafe._settings import load_site_config
from tablesafe.attacks import reconstruction_attack
from tablesafe.server import create_app, hash_key
from test_server import ADMIN_KEY, USER_KEY, error_of

SERVED = [
    {"dimensions": ["SEX", "AGEGRP"]},
    {"dimensions": ["SEX", "REGION"], "statistic": "count"},
    {"dimensions": ["AGEGRP", "REGION"], "universe": {"SEX": [1, 2]}},
]


def _config(demo_dir, tmp_path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "site.toml"
    path.write_text(
        f'[server]\naudit_db = "audit.sqlite"\n[[datasets]]\nname = "demo"\npath = "{demo_dir}"\n'
        '[datasets.protection]\nmethod = "ckm"\n[datasets.rules]\nmin_universe_size = 1\n'
        "min_cell_size = 3\nsliver_min_difference = 0\n"
        f'[[keys]]\nid = "user1"\nrole = "user"\nhash = "{hash_key(USER_KEY)}"\n'
        f'[[keys]]\nid = "admin1"\nrole = "admin"\nhash = "{hash_key(ADMIN_KEY)}"\n'
    )
    return path


@pytest.fixture
def served_site(demo_dir, tmp_path):
    path = _config(demo_dir, tmp_path)
    with TestClient(create_app(load_site_config(path))) as c:
        for body in SERVED:
            r = c.post("/api/datasets/demo/tables", json=body, headers={"x-api-key": USER_KEY})
            assert r.status_code == 200, r.text
        # The same table from another key is the same published table.
        again = c.post(
            "/api/datasets/demo/tables", json=SERVED[0], headers={"x-api-key": ADMIN_KEY}
        )
        assert again.status_code == 200
        # A refused request is not published.
        bad = c.post("/api/datasets/demo/tables", json={"dimensions": ["NOPE"]})
        assert bad.status_code >= 400
    return path


def test_admin_endpoint_attacks_every_served_table(served_site, demo_dir):
    with TestClient(create_app(load_site_config(served_site))) as c:
        url = "/api/admin/datasets/demo/reconstruction"
        denied = c.post(url, headers={"x-api-key": USER_KEY})
        assert error_of(denied)["status"] == 403
        assert c.get(url, headers={"x-api-key": ADMIN_KEY}).json()["history"] == []
        run = c.post(f"{url}?time_limit=30", headers={"x-api-key": ADMIN_KEY})
        assert run.status_code == 200, run.text
        out = run.json()
        assert out["tables"] == 3
        assert out["variables"] == ["REGION", "SEX", "AGE"]
        assert out["cells"] == 8 * 2 * 8  # AGE's atoms are the age groups
        for name in ("cells_exact_share", "records_exact_share", "uniques_exact_share"):
            assert 0 <= out[name] <= out["unprotected"][name] <= 1
        # The same attack by hand on the same requests agrees (the site's rules included).
        from tablesafe.attacks._reconstruct._cumulative import requests_from_bodies
        from tablesafe.catalog._dataset import Dataset

        plain = reconstruction_attack(
            Dataset.open(demo_dir),
            requests_from_bodies(SERVED),
            Protection(None),
            time_limit=30,
        )
        assert out["unprotected"]["cells_exact_share"] == plain.cells_exact_share
        history = c.get(url, headers={"x-api-key": ADMIN_KEY}).json()["history"]
        assert len(history) == 1 and history[0]["tables"] == 3
        assert history[0]["records_exact_share"] == out["records_exact_share"]
        assert (
            error_of(
                c.get("/api/admin/datasets/nope/reconstruction", headers={"x-api-key": ADMIN_KEY})
            )["status"]
            == 404
        )
        bad = c.post(f"{url}?time_limit=0", headers={"x-api-key": ADMIN_KEY})
        assert error_of(bad)["status"] == 422
        page = c.get("/").text
        assert 'id="risk-admin"' in page and "/static/admin.js" in page
        assert c.get("/static/admin.js").status_code == 200


def test_audit_reconstruct_command(served_site):
    runner = CliRunner()
    out = runner.invoke(
        get_app(),
        [
            "audit",
            "reconstruct",
            "--config",
            str(served_site),
            "--dataset",
            "demo",
            "--format",
            "json",
        ],
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["tables"] == 3 and "unprotected" in data and data["served_until"]
    text = runner.invoke(
        get_app(), ["audit", "reconstruct", "--config", str(served_site), "--dataset", "demo"]
    )
    assert text.exit_code == 0, text.output
    assert "records in pinned cells" in text.stdout
    # The plain audit listing still works beside the subcommand.
    listing = runner.invoke(get_app(), ["audit", "--config", str(served_site), "--format", "json"])
    assert listing.exit_code == 0 and json.loads(listing.stdout)


def test_audit_reconstruct_bad_input(served_site, demo_dir, tmp_path):
    runner = CliRunner()
    unknown = runner.invoke(
        get_app(), ["audit", "reconstruct", "--config", str(served_site), "--dataset", "nope"]
    )
    assert isinstance(unknown.exception, RequestError)
    assert "unknown dataset 'nope'" in str(unknown.exception)
    fresh = _config(demo_dir, tmp_path / "fresh")
    never = runner.invoke(
        get_app(), ["audit", "reconstruct", "--config", str(fresh), "--dataset", "demo"]
    )
    assert isinstance(never.exception, RequestError)
    assert "holds no table served" in str(never.exception)
    zero = runner.invoke(
        get_app(),
        [
            "audit",
            "reconstruct",
            "--config",
            str(served_site),
            "--dataset",
            "demo",
            "--time-limit",
            "0",
        ],
    )
    assert zero.exit_code != 0 and "--time-limit" in str(zero.exception)


def test_requests_from_bodies_is_strict():
    from tablesafe.attacks._reconstruct._cumulative import requests_from_bodies

    with pytest.raises(RequestError, match="JSON list"):
        requests_from_bodies({"dimensions": ["SEX"]})  # type: ignore[arg-type]
    with pytest.raises(RequestError, match="no table request"):
        requests_from_bodies([])
    with pytest.raises(RequestError, match="request 2 is invalid"):
        requests_from_bodies([{"dimensions": ["SEX"]}, {"dimension": ["SEX"]}])
    got = requests_from_bodies([{"dimensions": ["SEX"]}, {"dimensions": ["SEX"]}])
    assert got == [TableRequest(("SEX",))]
