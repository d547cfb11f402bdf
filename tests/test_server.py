"""The HTTP API, in process: every endpoint, rule and error shape."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from tablesafe._errors import ConfigError
from tablesafe._settings import load_site_config
from tablesafe.server import create_app, hash_key

USER_KEY = "ts_user_key_for_tests_0123456789"
ADMIN_KEY = "ts_admin_key_for_tests_0123456789"


def site(demo_dir, tmp_path, *, protection=None, rules=None, keys=True, server=None):
    data = {
        "base": str(tmp_path),
        "server": {"title": "Test site", "audit_db": "audit.sqlite", **(server or {})},
        "datasets": [
            {
                "name": "demo",
                "path": str(demo_dir),
                "protection": protection or {"method": "none"},
                "rules": {"min_universe_size": 20, **(rules or {})},
            }
        ],
    }
    if keys:
        data["keys"] = [
            {"id": "user1", "hash": hash_key(USER_KEY), "role": "user"},
            {"id": "admin1", "hash": hash_key(ADMIN_KEY), "role": "admin"},
        ]
    return load_site_config(data=data)


@pytest.fixture
def client(demo_dir, tmp_path):
    with TestClient(create_app(site(demo_dir, tmp_path))) as c:
        c.headers["x-api-key"] = USER_KEY
        yield c


def error_of(response):
    body = response.json()
    # A refusal may carry its nearest passing alternatives beside the error (docs/errors.md).
    assert set(body) - {"alternatives"} == {"error"}
    assert "alternatives" not in body or (
        body["alternatives"] and response.status_code in (400, 403)
    )
    assert set(body["error"]) == {"status", "type", "message"}
    assert body["error"]["status"] == response.status_code
    assert "Traceback" not in body["error"]["message"]
    return body["error"]


def test_health_and_openapi(client):
    assert client.get("/api/health").json() == {"status": "ok", "datasets": 1}
    schema = client.get("/openapi.json").json()
    assert {
        "/api/datasets",
        "/api/datasets/{name}",
        "/api/datasets/{name}/tables",
        "/api/health",
        "/api/admin/audit",
    } <= set(schema["paths"])


def test_datasets_and_variables(client):
    assert client.get("/api/datasets").json() == {
        "datasets": [{"name": "demo", "title": "tablesafe demo survey (synthetic)"}]
    }
    meta = client.get("/api/datasets/demo").json()
    names = [v["name"] for v in meta["variables"]]
    assert {"REGION", "SEX", "AGEGRP", "AGE5"} <= set(names)
    sex = next(v for v in meta["variables"] if v["name"] == "SEX")
    assert sex["categories"] == [{"code": 1, "label": "Male"}, {"code": 2, "label": "Female"}]
    assert meta["rules"]["max_dimensions"] == 3
    assert "secret" not in json.dumps(meta).lower()


def test_table_json_csv_xlsx(client):
    body = {"dimensions": ["AGEGRP", "SEX"], "universe": {"REGION": [1, 2]}, "statistic": "both"}
    doc = client.post("/api/datasets/demo/tables", json=body).json()
    assert doc["meta"]["dimensions"] == ["AGEGRP", "SEX"]
    assert len(doc["cells"]) == 9 * 3
    csv = client.post("/api/datasets/demo/tables?format=csv", json=body)
    assert csv.headers["content-type"].startswith("text/csv")
    frame = pd.read_csv(io.StringIO(csv.text), comment="#")
    assert frame["n"].tolist() == [c["n"] for c in doc["cells"]]
    xlsx = client.post("/api/datasets/demo/tables?format=xlsx", json=body)
    book = pd.read_excel(io.BytesIO(xlsx.content), sheet_name="cells")
    assert book["n"].tolist() == frame["n"].tolist()
    # Byte-identical answers for the same request (after the cache, too).
    assert client.post("/api/datasets/demo/tables?format=xlsx", json=body).content == xlsx.content


def test_same_answer_for_every_user_and_after_restart(demo_dir, tmp_path):
    body = {"dimensions": ["EDUC", "SEX"], "universe": {"TENURE": ["OWN"]}}
    answers = []
    for key in (USER_KEY, ADMIN_KEY):
        with TestClient(create_app(site(demo_dir, tmp_path))) as c:
            answers.append(
                c.post("/api/datasets/demo/tables", json=body, headers={"x-api-key": key}).content
            )
    assert answers[0] == answers[1]


@pytest.mark.parametrize(
    ("body", "status", "kind", "message"),
    [
        ({"dimensions": ["NOPE"]}, 400, "RequestError", "unknown variable 'NOPE'"),
        (
            {"dimensions": ["SEX"], "universe": {"REGION": [99]}},
            400,
            "RequestError",
            "unknown category 99",
        ),
        ({"dimensions": ["SEX", "SEX"]}, 400, "RequestError", "given twice"),
        (
            {"dimensions": ["SEX"], "universe": {"REGION": []}},
            400,
            "RequestError",
            "empty category list",
        ),
        (
            {"dimensions": ["SEX", "REGION", "EDUC", "OCC"]},
            400,
            "RequestError",
            "at most 3 dimensions",
        ),
        ({"dimensions": []}, 422, "ValidationError", "dimensions"),
        ({"dimensions": ["SEX"], "colour": "red"}, 422, "ValidationError", "unknown field"),
        ({"dimensions": "SEX"}, 422, "ValidationError", "dimensions"),
        ({"dimensions": ["SEX"], "statistic": "mean"}, 422, "ValidationError", "statistic"),
        (
            {"dimensions": ["SEX"], "universe": {"REGION": [[1]]}},
            422,
            "ValidationError",
            "universe",
        ),
        ({"dimensions": ["SEX'; DROP TABLE x; --"]}, 400, "RequestError", "unknown variable"),
        (
            {"dimensions": ["SEX"], "universe": {"TENURE": ["OWN' OR '1'='1"]}},
            400,
            "RequestError",
            "unknown category",
        ),
        (
            {"dimensions": ["SEX"], "universe": {"REGION) OR (1=1": [1]}},
            400,
            "RequestError",
            "unknown variable",
        ),
        (
            {"dimensions": ["SEX"], "universe": {"REGION": list(range(2000))}},
            400,
            "RequestError",
            "at most 1000",
        ),
    ],
)
def test_bad_table_requests(client, body, status, kind, message):
    response = client.post("/api/datasets/demo/tables", json=body)
    err = error_of(response)
    assert response.status_code == status
    assert err["type"] == kind
    assert message in err["message"]


def test_malformed_and_oversized_bodies(client):
    bad = client.post(
        "/api/datasets/demo/tables",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert bad.status_code == 422
    error_of(bad)
    huge = client.post(
        "/api/datasets/demo/tables",
        content=b"x" * 70_000,
        headers={"content-type": "application/json"},
    )
    assert huge.status_code == 413
    assert error_of(huge)["type"] == "PayloadTooLarge"
    deep = client.post(
        "/api/datasets/demo/tables",
        content=("[" * 5000 + "]" * 5000).encode(),
        headers={"content-type": "application/json"},
    )
    assert 400 <= deep.status_code < 500
    error_of(deep)


def test_unknown_dataset_and_route(client):
    err = error_of(client.get("/api/datasets/nope"))
    assert err["status"] == 404 and "available: demo" in err["message"]
    assert error_of(client.get("/api/nothing"))["status"] == 404


def test_keys_and_roles(demo_dir, tmp_path):
    with TestClient(create_app(site(demo_dir, tmp_path))) as c:
        assert error_of(c.get("/api/datasets"))["status"] == 401
        assert error_of(c.get("/api/datasets", headers={"x-api-key": "wrong"}))["status"] == 401
        assert (
            c.get("/api/datasets", headers={"authorization": f"Bearer {USER_KEY}"}).status_code
            == 200
        )
        assert error_of(c.get("/api/admin/audit", headers={"x-api-key": USER_KEY}))["status"] == 403
        rows = c.get("/api/admin/audit", headers={"x-api-key": ADMIN_KEY}).json()["requests"]
        assert rows[0]["key_id"] == "user1" and rows[0]["status"] == 403
        assert any(r["status"] == 401 for r in rows)


def test_open_site_without_keys_closes_admin(demo_dir, tmp_path):
    with TestClient(create_app(site(demo_dir, tmp_path, keys=False))) as c:
        assert c.get("/api/datasets").status_code == 200
        assert error_of(c.get("/api/admin/audit"))["status"] == 403


def test_rate_limit(demo_dir, tmp_path):
    with TestClient(create_app(site(demo_dir, tmp_path, server={"rate_limit_per_minute": 3}))) as c:
        c.headers["x-api-key"] = USER_KEY
        codes = [c.get("/api/datasets").status_code for _ in range(5)]
        assert codes == [200, 200, 200, 429, 429]


def test_rules_universe_size_and_cells(demo_dir, tmp_path):
    app = create_app(site(demo_dir, tmp_path, rules={"min_universe_size": 500, "max_cells": 100}))
    with TestClient(app) as c:
        c.headers["x-api-key"] = USER_KEY
        small = c.post(
            "/api/datasets/demo/tables", json={"dimensions": ["SEX"], "universe": {"AGE": [90]}}
        )
        assert small.status_code == 403 and "at least 500" in error_of(small)["message"]
        big = c.post("/api/datasets/demo/tables", json={"dimensions": ["AGE", "OCC"]})
        assert big.status_code == 403 and "at most 100" in error_of(big)["message"]


@pytest.mark.parametrize("action", ["suppress", "show_less_than"])
def test_small_cell_rule(demo_dir, tmp_path, action):
    app = create_app(
        site(demo_dir, tmp_path, rules={"min_cell_size": 5, "small_cell_action": action})
    )
    with TestClient(app) as c:
        c.headers["x-api-key"] = USER_KEY
        doc = c.post("/api/datasets/demo/tables", json={"dimensions": ["AGE5", "OCC"]}).json()
        small = [cell for cell in doc["cells"] if cell["suppressed"]]
        assert small
        shown = None if action == "suppress" else "<5"
        assert all(cell["n"] == shown and cell["weighted"] == shown for cell in small)
        assert all(
            cell["n"] == 0 or cell["n"] >= 5 for cell in doc["cells"] if not cell["suppressed"]
        )


def test_sliver_guard(demo_dir, tmp_path):
    app = create_app(site(demo_dir, tmp_path, rules={"sliver_min_difference": 50}))
    with TestClient(app) as c:
        c.headers["x-api-key"] = USER_KEY
        first = c.post(
            "/api/datasets/demo/tables",
            json={"dimensions": ["SEX"], "universe": {"AGE": list(range(30, 41))}},
        )
        assert first.status_code == 200
        # Age 30-40 and 30-39 differ by the 40-year-olds: a sliver of a few hundred? No:
        # the demo has ~20,000 records over 91 ages, so one year holds about 200.
        wide = c.post(
            "/api/datasets/demo/tables",
            json={"dimensions": ["SEX"], "universe": {"AGE": list(range(30, 40))}},
        )
        assert wide.status_code == 200
        # Removing a small group (widowed 30-40-year-olds) is a sliver away.
        sliver = c.post(
            "/api/datasets/demo/tables",
            json={
                "dimensions": ["SEX"],
                "universe": {"AGE": list(range(30, 41)), "MARSTAT": [1, 2, 4]},
            },
        )
        assert sliver.status_code == 403
        assert "fewer than 50 records" in error_of(sliver)["message"]
        # The same universe again is fine; another key is refused too (the guard
        # holds across keys by default: sliver_scope = "dataset").
        assert (
            c.post(
                "/api/datasets/demo/tables",
                json={"dimensions": ["EDUC"], "universe": {"AGE": list(range(30, 41))}},
            ).status_code
            == 200
        )
        other = c.post(
            "/api/datasets/demo/tables",
            json={
                "dimensions": ["SEX"],
                "universe": {"AGE": list(range(30, 41)), "MARSTAT": [1, 2, 4]},
            },
            headers={"x-api-key": ADMIN_KEY},
        )
        assert other.status_code == 403
        # Another user's request is not named in the refusal.
        assert "AGE in" not in error_of(other)["message"]


def test_audit_log_survives_restart_and_holds_no_values(demo_dir, tmp_path):
    cfg = site(demo_dir, tmp_path)
    with TestClient(create_app(cfg)) as c:
        c.post(
            "/api/datasets/demo/tables",
            json={"dimensions": ["SEX"]},
            headers={"x-api-key": USER_KEY},
        )
    with TestClient(create_app(cfg)) as c:
        rows = c.get("/api/admin/audit?key_id=user1", headers={"x-api-key": ADMIN_KEY}).json()[
            "requests"
        ]
    assert rows and rows[0]["request"]["dimensions"] == ["SEX"]
    assert rows[0]["outcome"] == "ok"
    assert "cells" not in json.dumps(rows)


def test_web_page_is_served(client):
    page = client.get("/")
    assert page.status_code == 200 and '<label for="rows">' in page.text
    assert client.get("/static/app.js").headers["content-type"].startswith("text/javascript")
    assert client.get("/static/../_app.py").status_code == 404


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"datasets": []}, "datasets"),
        ({"engine": {"kind": "oracle"}}, "engine.kind"),
        ({"server": {"colour": 1}}, "unknown setting"),
    ],
)
def test_invalid_site_configuration(demo_dir, tmp_path, patch, message):
    data = {"base": str(tmp_path), "datasets": [{"name": "demo", "path": str(demo_dir)}], **patch}
    with pytest.raises(ConfigError, match=message):
        load_site_config(data=data)


def test_site_configuration_needs_the_secret(demo_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("TS_TEST_SECRET", raising=False)
    cfg = site(
        demo_dir,
        tmp_path,
        protection={"method": "none", "seeds": "keyed", "secret_env": "TS_TEST_SECRET"},
    )
    with pytest.raises(ConfigError, match="TS_TEST_SECRET"):
        create_app(cfg)


def test_record_level_protection_from_the_site(demo_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TS_SITE_SECRET", "site-secret-0123456789abcdef")
    cfg = site(
        demo_dir,
        tmp_path,
        protection={
            "method": "q-records",
            "seeds": "keyed",
            "secret_env": "TS_SITE_SECRET",
            "rate": 0.05,
        },
    )
    with TestClient(create_app(cfg)) as c:
        c.headers["x-api-key"] = USER_KEY
        doc = c.post("/api/datasets/demo/tables", json={"dimensions": ["AGEGRP", "SEX"]}).json()
        assert doc["meta"]["mechanism"]["name"].startswith("drop/add")
        assert "secret" not in json.dumps(doc).lower()
        assert "site-secret" not in json.dumps(doc)
        # The answer differs from the truth somewhere, and no response or log holds the truth.
        truth = create_app(site(demo_dir, tmp_path / "plain"))
        with TestClient(truth) as t:
            t.headers["x-api-key"] = USER_KEY
            plain = t.post(
                "/api/datasets/demo/tables", json={"dimensions": ["AGEGRP", "SEX"]}
            ).json()
        changed = [
            (p["n"], q["n"])
            for p, q in zip(plain["cells"], doc["cells"], strict=True)
            if p["n"] != q["n"]
        ]
        assert changed
        rows = c.get("/api/admin/audit", headers={"x-api-key": ADMIN_KEY}).json()
        logged = json.dumps(rows)
        for true_n, _ in changed:
            assert f'"n": {true_n}' not in json.dumps(doc)
        assert '"cells"' not in logged


def test_audit_and_api_key_commands(demo_dir, tmp_path):
    from click.testing import CliRunner

    from tablesafe._cli import get_app

    runner = CliRunner()
    made = runner.invoke(get_app(), ["api-key", "new", "analyst", "--role", "admin"])
    assert made.exit_code == 0
    key = made.output.split("user): ")[1].split()[0]
    assert f'hash = "{hash_key(key)}"' in made.output
    cfg_path = tmp_path / "site.toml"
    cfg_path.write_text(
        f'[server]\naudit_db = "audit.sqlite"\n[[datasets]]\nname = "demo"\npath = "{demo_dir}"\n'
        '[datasets.protection]\nmethod = "none"\n[datasets.rules]\nmin_universe_size = 1\n'
        + made.output.split("\n", 1)[1]
    )
    with TestClient(create_app(load_site_config(cfg_path))) as c:
        assert (
            c.post(
                "/api/datasets/demo/tables",
                json={"dimensions": ["SEX"]},
                headers={"x-api-key": key},
            ).status_code
            == 200
        )
    out = runner.invoke(get_app(), ["audit", "--config", str(cfg_path), "--format", "json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert rows[0]["key_id"] == "analyst" and rows[0]["request"]["dimensions"] == ["SEX"]
