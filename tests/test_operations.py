"""Operations (issue 31): metrics, health and readiness, access logs, audit failures, restarts."""

from __future__ import annotations

import json
import logging
import sqlite3

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tablesafe._settings import load_site_config
from tablesafe.server import create_app, hash_key
from test_server import ADMIN_KEY, USER_KEY, error_of, site

TABLES = "/api/datasets/demo/tables"
ROUTE = "/api/datasets/{name}/tables"
BODY = {"dimensions": ["AGEGRP", "SEX"], "universe": {"REGION": [1, 2]}}
# 92 single years x 11 occupations with margins: over max_cells = 100.
BIG = {"dimensions": ["AGE", "OCC"]}
# The sliver guard is not what these tests check (its own tests do).
RULES = {"sliver_min_difference": 0}


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of a Prometheus exposition (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def test_metrics_move_as_requests_are_made(demo_dir, tmp_path):
    app = create_app(site(demo_dir, tmp_path, rules={**RULES, "max_cells": 100}))
    with TestClient(app) as c:
        c.headers["x-api-key"] = USER_KEY
        before = c.get("/metrics")
        assert before.status_code == 200
        assert before.headers["content-type"].startswith("text/plain")
        b = before.text
        assert c.post(TABLES, json=BODY).status_code == 200
        assert c.post(TABLES, json=BODY).status_code == 200  # from the table cache
        assert error_of(c.post(TABLES, json=BIG))["type"] == "TooManyCells"
        assert c.get("/api/datasets", headers={"x-api-key": "wrong"}).status_code == 401
        assert c.get("/api/datasets/nope").status_code == 404
        a = c.get("/metrics").text

    def moved(name: str, **labels: str) -> float:
        return metric(a, name, **labels) - metric(b, name, **labels)

    ok = {"route": ROUTE, "method": "POST", "status": "200"}
    assert moved("tablesafe_requests_total", **ok) == 2
    assert moved("tablesafe_requests_total", route=ROUTE, method="POST", status="403") == 1
    assert moved("tablesafe_requests_total", route="/api/datasets", status="401") == 1
    assert moved("tablesafe_request_duration_seconds_count", **ok) == 2
    assert moved("tablesafe_request_duration_seconds_sum", **ok) > 0
    assert moved("tablesafe_refusals_total", type="TooManyCells") == 1
    assert moved("tablesafe_refusals_total", type="AuthError") == 1
    assert moved("tablesafe_refusals_total", type="NotFound") == 1
    assert moved("tablesafe_tables_built_total", dataset="demo") == 1
    assert moved("tablesafe_table_cache_hits_total", dataset="demo") == 1
    # The one table built read the microdata once (its cube), or was added up from a cube.
    cube = moved("tablesafe_cube_cache_hits_total", dataset="demo") + moved(
        "tablesafe_cube_cache_misses_total", dataset="demo"
    )
    assert cube >= 1
    # Scrapes are not requests of the API: no route of theirs is counted.
    assert metric(a, "tablesafe_requests_total", route="unmatched") == 0


def test_health_and_readiness(demo_dir, tmp_path):
    app = create_app(site(demo_dir, tmp_path, rules=RULES))
    service = app.state.service
    with TestClient(app) as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        assert c.get("/readyz").json() == {"status": "ready"}
        assert error_of(c.post("/readyz"))["type"] == "MethodNotAllowed"
        assert c.head("/healthz").status_code == 200
        rows = len(service.state.query(limit=1000))

        def broken() -> None:
            raise sqlite3.OperationalError("disk I/O error")

        service.state.ping = broken
        down = c.get("/readyz")
        assert down.status_code == 503
        err = error_of(down)
        assert err["type"] == "Unavailable"
        assert err["message"] == "not ready: the state store does not answer"
        assert c.get("/healthz").status_code == 200  # the process is up all the same
        del service.state.ping
        served = service.served("demo")
        real = served.dataset.path
        object.__setattr__(served.dataset, "path", tmp_path / "gone.parquet")
        try:
            message = error_of(c.get("/readyz"))["message"]
        finally:
            object.__setattr__(served.dataset, "path", real)
        assert message == "not ready: dataset demo: its microdata file cannot be read"
        assert c.get("/readyz").status_code == 200
        # Probes write no audit rows.
        assert len(service.state.query(limit=1000)) == rows


def test_access_log_has_one_json_line_per_request_and_no_key_body_or_query(
    demo_dir, tmp_path, caplog
):
    secret = "access-log-secret-0123456789"
    (tmp_path / "secret").write_text(secret)
    app = create_app(
        site(
            demo_dir,
            tmp_path,
            protection={"method": "ckm", "seeds": "keyed", "secret_file": "secret"},
            rules=RULES,
        )
    )
    body = {"dimensions": ["SEX"], "universe": {"REGION": [3], "AGEGRP": [4]}}
    with TestClient(app) as c, caplog.at_level(logging.INFO, logger="tablesafe.access"):
        answers = [
            c.post(TABLES + "?format=csv&labels=true", json=body, headers={"x-api-key": USER_KEY}),
            c.get("/api/datasets", headers={"x-api-key": "ts_not_a_key_at_all_0123456789"}),
            c.get("/api/admin/audit", headers={"authorization": f"Bearer {ADMIN_KEY}"}),
            c.get("/?key=" + USER_KEY),
        ]
    lines = [r.getMessage() for r in caplog.records if r.name == "tablesafe.access"]
    assert len(lines) == len(answers)
    records = [json.loads(line) for line in lines]
    assert set(records[0]) == {
        "time", "method", "path", "route", "status", "ms", "bytes", "client", "key_id",
        "dataset", "error",
    }  # fmt: skip
    assert (
        [r["status"] for r in records] == [a.status_code for a in answers] == [200, 401, 200, 200]
    )
    assert [r["key_id"] for r in records] == ["user1", "unknown", "admin1", "-"]
    assert records[0]["route"] == ROUTE and records[0]["path"] == TABLES
    assert records[0]["dataset"] == "demo" and records[0]["error"] is None
    assert records[0]["bytes"] == len(answers[0].content)
    assert records[1]["error"] == "AuthError"
    text = "\n".join(lines)
    for leak in (USER_KEY, ADMIN_KEY, "ts_not_a_key", secret, "REGION", "format=", "key="):
        assert leak not in text


def _failing(app) -> None:
    def record(**_: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    app.state.service.state.record = record


def test_an_answer_the_audit_log_cannot_record_is_withheld(demo_dir, tmp_path):
    app = create_app(site(demo_dir, tmp_path, rules=RULES))
    with TestClient(app) as c:
        c.headers["x-api-key"] = USER_KEY
        assert c.post(TABLES, json=BODY).status_code == 200
        _failing(app)
        for answer in (c.post(TABLES, json=BODY), c.get("/api/datasets"), c.post(TABLES, json=BIG)):
            assert answer.status_code == 503
            err = error_of(answer)
            assert err["type"] == "Unavailable"
            assert "audit log cannot be written" in err["message"]
            assert answer.headers["retry-after"] == "5"
            assert "cells" not in answer.text  # nothing of the table's answer
        assert c.get("/healthz").status_code == 200
        text = c.get("/metrics").text
    assert metric(text, "tablesafe_audit_failures_total") == 3
    assert metric(text, "tablesafe_refusals_total", type="Unavailable") == 3


def test_a_site_may_answer_when_the_audit_log_fails(demo_dir, tmp_path):
    app = create_app(site(demo_dir, tmp_path, rules=RULES, server={"audit_failure": "answer"}))
    with TestClient(app) as c:
        c.headers["x-api-key"] = USER_KEY
        expected = c.post(TABLES, json=BODY).content
        _failing(app)
        answer = c.post(TABLES, json=BODY)
    assert answer.status_code == 200 and answer.content == expected


def test_audit_failure_is_refuse_or_answer(demo_dir, tmp_path):
    with pytest.raises(Exception, match="audit_failure"):
        site(demo_dir, tmp_path, server={"audit_failure": "ignore"})


def test_a_postgresql_restart_costs_no_error(demo_dir, tmp_path, postgres):
    """The pool checks each connection before lending it: the one the restart cut is replaced."""
    data = {
        "base": str(tmp_path),
        "state": {"url": postgres.database(), "pool_size": 4},
        "datasets": [
            {
                "name": "demo",
                "path": str(demo_dir),
                "protection": {"method": "none"},
                "rules": {**RULES, "min_universe_size": 20},
            }
        ],
        "keys": [{"id": "user1", "hash": hash_key(USER_KEY)}],
    }
    app = create_app(load_site_config(data=data))
    with TestClient(app) as c:
        c.headers["x-api-key"] = USER_KEY
        first = [c.post(TABLES, json=BODY).status_code for _ in range(3)]
        postgres.restart()
        after = [c.post(TABLES, json=BODY).status_code for _ in range(3)]
        assert c.get("/readyz").status_code == 200
        rows = app.state.service.state.query(limit=100)
    assert first == after == [200, 200, 200]
    assert [r["status"] for r in rows[:6]] == [200] * 6


@pytest.mark.system
def test_a_request_in_flight_when_sigterm_arrives_gets_its_answer(demo_dir, tmp_path):
    """uvicorn's graceful shutdown: the listener closes, the request in flight is answered."""
    import re
    import select
    import signal
    import socket
    import subprocess
    import sys
    import time

    config = tmp_path / "site.toml"
    config.write_text(
        f'[server]\naudit_db = "audit.sqlite"\n\n[[datasets]]\nname = "demo"\n'
        f'path = "{demo_dir}"\n[datasets.protection]\nmethod = "none"\n'
        "[datasets.rules]\nmin_universe_size = 20\nsliver_min_difference = 0\n",
        encoding="utf-8",
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "tablesafe._cli", "serve", "--config", str(config),
         "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 90)
        assert ready, "the server did not start"
        port = int(re.search(rb":(\d+)/", server.stdout.readline()).group(1))
        body = json.dumps(BODY).encode()
        head = (
            f"POST {TABLES}?format=csv HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            conn.sendall(head + body[:10])  # the request is in flight: half its body sent
            time.sleep(0.5)
            server.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            assert server.poll() is None  # still waiting for the request in flight
            conn.sendall(body[10:])
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
        assert b"AGEGRP,SEX,n" in answer
        # Then it exits (uvicorn ends by the signal it caught, once its requests are done).
        assert server.wait(timeout=30) in (0, -signal.SIGTERM)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
        server.stdout.close()
