"""The state store (issue 31): every test on SQLite and on a real PostgreSQL.

Two stores on one database stand for two processes or replicas: what one
writes, the other reads; the guard's transactions and the rate-limit counters
are serialised across them.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tablesafe._errors import ConfigError, RefusedError
from tablesafe._settings import load_site_config
from tablesafe.server import create_app, hash_key
from tablesafe.state import MemoryRates, PostgresState, SQLiteState, open_state
from test_guard import _full_frame, _sliver_pairs
from test_server import ADMIN_KEY, USER_KEY, error_of

BACKENDS = ["sqlite", "postgresql"]


# -- the audit log, keys, reconstructions ------------------------------------------------------


def test_the_audit_log_reads_back_what_was_written(backend):
    a, b = backend(), backend()
    tables = "POST /api/datasets/demo/tables"
    rows = [
        ("k1", tables, 200, "demo", {"dimensions": ["SEX"], "format": "csv"}),
        ("k2", tables, 403, "demo", {"dimensions": ["AGE"]}),
        ("k1", "GET /api/datasets", 200, None, None),
        ("k3", "GET /api/datasets", 401, None, None),
        ("k2", tables, 200, "other", {"dimensions": ["EDUC"]}),
        ("k2", tables, 200, "demo", {"dimensions": ["REGION"], "universe": {"SEX": [1]}}),
    ]
    for i, (key, endpoint, status, dataset, body) in enumerate(rows):
        (a if i % 2 else b).record(key_id=key, endpoint=endpoint, status=status, outcome="ok",
                                   dataset=dataset, request=body, client=f"10.0.0.{i}")  # fmt: skip
    got = b.query(limit=100)
    assert [(r["key_id"], r["endpoint"], r["status"], r["dataset"], r["request"], r["client"])
            for r in got[::-1]] == [(*row[:2], row[2], row[3], row[4], f"10.0.0.{i}")
                                    for i, row in enumerate(rows)]  # fmt: skip
    assert [r["id"] for r in got] == sorted((r["id"] for r in got), reverse=True)
    assert [r["status"] for r in a.query(key_id="k2")] == [200, 200, 403]
    assert len(a.query(dataset="demo")) == 3 and len(a.query(limit=2)) == 2
    assert a.query(since=got[0]["time"])[0]["id"] == got[0]["id"]
    # Served tables: answered table requests of one dataset, oldest first, format dropped.
    assert [body for _, body in a.served_tables("demo")] == [
        {"dimensions": ["SEX"]},
        {"dimensions": ["REGION"], "universe": {"SEX": [1]}},
    ]
    used = a.last_used()
    assert set(used) == {"k1", "k2"}  # k3's only request failed authentication
    assert used["k1"] == max(r["time"] for r in got if r["key_id"] == "k1")


def test_a_revocation_is_seen_by_every_store(backend):
    a, b = backend(), backend()
    assert b.revoked("sha256:ab") is None
    assert a.revoke_key("analyst", "sha256:ab", "left") is True
    when = b.revoked("sha256:ab")
    assert when is not None and when == a.revoked("sha256:ab")
    assert b.revoke_key("analyst", "sha256:ab") is False
    assert b.revoked("sha256:cd") is None


def test_reconstructions_come_back_oldest_first(store):
    for i in range(5):
        store.record_reconstruction("demo", f"t{i}", i + 1, {"cells": i})
    store.record_reconstruction("other", None, 9, {"cells": 9})
    history = store.reconstructions("demo")
    assert [(h["served_until"], h["tables"], h["cells"]) for h in history] == [
        (f"t{i}", i + 1, i) for i in range(5)
    ]
    assert [h["cells"] for h in store.reconstructions("demo", limit=2)] == [3, 4]


# -- rate limits -------------------------------------------------------------------------------


def _rule(times: list[float], limit: int) -> list[bool]:
    """The rate limit's rule, written from its docstring over the allowed requests' times."""
    allowed: list[int] = []  # in milliseconds
    out = []
    for t in times:
        ms = math.floor(t * 1000)
        minute = ms // 60_000
        current = sum(s // 60_000 == minute for s in allowed)
        previous = sum(s // 60_000 == minute - 1 for s in allowed)
        left = 60_000 - ms % 60_000  # of this minute
        ok = -(-previous * left // 60_000) + current < limit  # the previous, weighted, rounded up
        out.append(ok)
        if ok:
            allowed.append(ms)
    return out


def test_rate_limit_decisions_follow_the_rule_across_stores(backend):
    a, b = backend(), backend()
    rng = np.random.default_rng(31)
    # Bursts and gaps over ten minutes, for two buckets; requests alternate between stores.
    times = np.sort(60_000 + np.concatenate([rng.uniform(0, 600, 150), rng.uniform(115, 125, 40)]))
    limit = 12
    for bucket in ("key:a", "unknown@10.0.0.1"):
        got = [(a if i % 2 else b).hit(bucket, limit, now=float(t)) for i, t in enumerate(times)]
        assert got == _rule([float(t) for t in times], limit)
        memory = MemoryRates()
        assert [memory.hit(bucket, limit, now=float(t)) for t in times] == got
        allowed = times[np.array(got)]
        # Never more than the limit in one minute, nor twice it in any 60 seconds.
        assert np.bincount((allowed // 60).astype(int)).max() <= limit
        assert max(np.searchsorted(allowed, t + 60) - i for i, t in enumerate(allowed)) <= 2 * limit
        assert 0 < len(allowed) < len(times)
    # A short burst is counted exactly, also across a minute's end.
    assert [a.hit("burst", 3, now=60_119.9 + i * 0.05) for i in range(5)] == [True] * 3 + [
        False
    ] * 2


def test_concurrent_hits_on_two_stores_allow_exactly_the_limit(backend):
    stores = [backend(), backend()]
    now = 90_030.0  # the middle of a minute; no earlier requests

    def hits(i: int) -> list[bool]:
        return [stores[i % 2].hit("shared", 60, now=now) for _ in range(25)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = [ok for chunk in pool.map(hits, range(8)) for ok in chunk]
    assert sum(results) == 60 and len(results) == 200


# -- the account of published figures -------------------------------------------------------------


def _row(i: int) -> tuple[int, str]:
    """A published figure as the store keeps it: (digest, definition), never a count."""
    return (1000 + i, f'[["AGE",[{i}]]]')


def test_two_stores_see_each_others_publications_and_serialise(backend):
    """A transaction waits for another process's lock of the identity, then reads what it
    committed; a refusal writes nothing; another identity is apart; decisions are kept."""
    a, b = backend(), backend()
    inside, seen = threading.Event(), []

    def first() -> None:
        with a.transaction("micro") as tx:
            inside.set()
            threading.Event().wait(0.3)  # hold the lock while the other asks for it
            tx.publish("*", "k1", [_row(1)])
            tx.decide("*", 11, b"\x01")

    def second() -> None:
        inside.wait()
        with b.transaction("micro") as tx:
            seen.append(len(tx.publications("*", 0)))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [1]
    with pytest.raises(RefusedError), b.transaction("micro") as tx:
        tx.publish("*", "k2", [_row(2)])
        raise RefusedError("refused")
    with a.transaction("micro") as tx:
        ((row_id, row),) = tx.publications("*", 0)
        assert row == _row(1)
        assert tx.publications("*", row_id) == []
        assert tx.decision("*", 11) == b"\x01" and tx.decision("*", 12) is None
        tx.publish("*", "k3", [_row(1)])  # published again: kept as it was
    with a.transaction("other") as tx:
        assert tx.publications("*", 0) == []
    with b.transaction("micro") as tx:
        assert len(tx.publications("*", 0)) == 1


def test_transactions_on_two_stores_are_one_after_another(backend):
    """40 transactions on 8 threads over two stores, each reading how many figures are
    published and adding one: serial, each saw 0, 1, ..., 39 figures."""
    stores = [backend(), backend()]

    def one(i: int) -> int:
        with stores[i % 2].transaction("micro") as tx:
            seen = len(tx.publications("*", 0))
            tx.publish("*", f"k{i}", [_row(i)])
            return seen

    with ThreadPoolExecutor(max_workers=8) as pool:
        seen = list(pool.map(one, range(40)))
    assert sorted(seen) == list(range(40))
    fresh = backend()  # a replica started later reads them all
    with fresh.transaction("micro") as tx:
        assert len(tx.publications("*", 0)) == 40


# -- schemas and configuration -------------------------------------------------------------------


def test_a_sqlite_audit_database_from_before_the_store_keeps_working(tmp_path):
    path = tmp_path / "audit.sqlite"
    con = sqlite3.connect(path)
    # The request log's first schema (no client column) and the revoked keys.
    con.executescript(
        "CREATE TABLE requests (id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, "
        "key_id TEXT NOT NULL, dataset TEXT, endpoint TEXT NOT NULL, request TEXT, "
        "status INTEGER NOT NULL, outcome TEXT NOT NULL);"
        "CREATE TABLE revoked_keys (hash TEXT PRIMARY KEY, key_id TEXT NOT NULL, "
        "time TEXT NOT NULL, reason TEXT);"
        "INSERT INTO requests (time, key_id, endpoint, status, outcome) VALUES "
        "('2025-01-01T00:00:00.000+00:00', 'old', 'GET /api/datasets', 200, 'ok');"
        "INSERT INTO revoked_keys VALUES ('sha256:ab', 'gone', '2025-01-02T00:00:00.000+00:00', "
        "NULL);"
    )
    con.commit()
    con.close()
    store = SQLiteState(path)
    try:
        assert [(r["key_id"], r["client"]) for r in store.query()] == [("old", None)]
        assert store.revoked("sha256:ab") == "2025-01-02T00:00:00.000+00:00"
        store.record(key_id="new", endpoint="GET /x", status=200, outcome="ok", client="::1")
        assert [r["client"] for r in store.query()] == ["::1", None]
        assert store.hit("k", 1, now=0.0) and not store.hit("k", 1, now=1.0)
    finally:
        store.close()
    con = sqlite3.connect(path)
    # the ledger 2, the jobs 3, fair jobs 4, the account of published figures 5, the
    # ceiling's refusals 6, dp-marginals releases 7, the account without counts 8
    assert con.execute("PRAGMA user_version").fetchone()[0] == 8
    columns = {r[1] for r in con.execute("PRAGMA table_info(publications)")}
    assert columns.isdisjoint({"n", "cell_key"})  # the state store holds no true count
    con.close()


def test_a_newer_sqlite_schema_is_refused(tmp_path):
    path = tmp_path / "state.sqlite"
    SQLiteState(path).close()
    con = sqlite3.connect(path)
    con.execute("PRAGMA user_version = 99")
    con.close()
    with pytest.raises(ConfigError, match="schema version 99, newer than this tablesafe knows"):
        SQLiteState(path)


def test_a_newer_postgres_schema_is_refused(postgres):
    import psycopg

    url = postgres.database()
    PostgresState(url).close()
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("INSERT INTO schema_version VALUES (99, 'later')")
    with pytest.raises(ConfigError, match="schema version 99, newer than this tablesafe knows"):
        PostgresState(url)


def test_postgres_replicas_starting_together_migrate_once(postgres):
    import psycopg

    url = postgres.database()
    with ThreadPoolExecutor(max_workers=4) as pool:
        stores = list(pool.map(lambda _: PostgresState(url, pool_size=1), range(4)))
    for s in stores:
        s.close()
    with psycopg.connect(url) as con:
        versions = con.execute("SELECT version FROM schema_version").fetchall()
    assert versions == [(1,), (2,), (3,), (4,), (5,), (6,), (7,), (8,)]


def _site(tmp_path, demo_dir, state=None, **server):
    # No alternatives: their dry runs count against the key's rate limit, which the
    # tests here count request by request (tests/test_alternatives.py counts those).
    rules = {"min_universe_size": 20, "sliver_min_difference": 10, "alternatives_max_dry_runs": 0}
    data = {
        "base": str(tmp_path),
        "server": {"audit_db": "audit.sqlite", **server},
        "datasets": [{"name": "demo", "path": str(demo_dir), "protection": {"method": "none"},
                      "rules": rules}],
        "keys": [{"id": "user1", "hash": hash_key(USER_KEY), "role": "user"},
                 {"id": "admin1", "hash": hash_key(ADMIN_KEY), "role": "admin"}],
    }  # fmt: skip
    if state is not None:
        data["state"] = state
    return load_site_config(data=data)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://db/tablesafe", "a mysql URL; the state store's url is a PostgreSQL one"),
        ("db.example/tablesafe", "a schemeless URL"),
        ("postgresql://u:secret@db/tablesafe", "the URL holds a password"),
        ("postgresql://u@db/tablesafe?password=secret", "the URL holds a password"),
        ("postgresql://u@[db/tablesafe", "not a URL"),
    ],
)
def test_the_state_url_is_validated(tmp_path, demo_dir, url, message):
    with pytest.raises(ConfigError, match=r"state\.url") as caught:
        _site(tmp_path, demo_dir, {"url": url})
    assert message in str(caught.value) and "secret" not in str(caught.value).replace(
        "holds no secret", ""
    )


def test_the_site_opens_the_store_it_names(tmp_path, demo_dir, postgres):
    sqlite_store = open_state(_site(tmp_path, demo_dir))
    assert isinstance(sqlite_store, SQLiteState)
    assert sqlite_store.location == str(tmp_path / "audit.sqlite")
    sqlite_store.close()
    url = postgres.database()
    pg = open_state(_site(tmp_path, demo_dir, {"url": url, "pool_size": 2}))
    assert isinstance(pg, PostgresState) and pg.location == url
    pg.close()
    closed = f"postgresql://tablesafe@127.0.0.1:{_closed_port()}/nothing"
    with pytest.raises(ConfigError, match="cannot use the state store at postgresql://"):
        open_state(_site(tmp_path, demo_dir, {"url": closed, "connect_timeout_seconds": 2}))
    # postgres:// is the same scheme to libpq.
    pg = open_state(_site(tmp_path, demo_dir, {"url": url.replace("postgresql:", "postgres:")}))
    pg.close()


def test_the_password_comes_from_libpq_s_environment(tmp_path, demo_dir, postgres, monkeypatch):
    """The test cluster asks TCP connections for a password (SCRAM); the session gives it
    in PGPASSWORD. Without it the store is refused, and the message holds no password."""
    site = _site(tmp_path, demo_dir, {"url": postgres.database()})
    open_state(site).close()
    monkeypatch.setenv("PGPASSWORD", "not-" + postgres.password)
    with pytest.raises(ConfigError, match="password authentication failed") as caught:
        open_state(site)
    assert postgres.password not in str(caught.value)


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when this returns


# -- the server on each backend ------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_server_keeps_its_state_in_the_store(kind, tmp_path, demo_dir, request):
    state = None if kind == "sqlite" else {"url": request.getfixturevalue("postgres").database()}
    site = _site(tmp_path, demo_dir, state, rate_limit_per_minute=4)
    tables = "/api/datasets/demo/tables"
    body = {"dimensions": ["SEX"], "statistic": "count"}
    ((u, v),) = _sliver_pairs(_full_frame(demo_dir), 10, 1)  # v: u less 1 to 9 records
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        assert c.post(tables, json={**body, "universe": u}).status_code == 200
        sliver = c.post(tables, json={**body, "universe": v})
        assert sliver.status_code == 403 and "fewer than 10 records" in error_of(sliver)["message"]
        codes = [c.get("/api/datasets").status_code for _ in range(4)]
        assert codes[-1] == 429 and codes.count(200) == 2
        assert c.get("/api/datasets", headers={"x-api-key": ADMIN_KEY}).status_code == 200
    store = open_state(site)
    try:
        rows = store.query(limit=100)[::-1]
        assert [r["status"] for r in rows] == [200, 403, 200, 200, 429, 429, 200]
        assert rows[-1]["key_id"] == "admin1" and rows[0]["request"]["universe"] == u
        assert store.revoke_key("user1", hash_key(USER_KEY), "test")
    finally:
        store.close()
    with TestClient(create_app(site)) as c:  # restarted: the revocation holds
        r = c.get("/api/datasets", headers={"x-api-key": USER_KEY})
        assert r.status_code == 401 and "revoked" in error_of(r)["message"]


def test_serve_stops_when_the_state_store_cannot_be_reached(tmp_path, demo_dir):
    import subprocess
    import sys

    config = tmp_path / "site.toml"
    config.write_text(
        f'[state]\nurl = "postgresql://tablesafe@127.0.0.1:{_closed_port()}/gone"\n'
        f'connect_timeout_seconds = 2\n[[datasets]]\nname = "demo"\npath = "{demo_dir}"\n'
        '[datasets.protection]\nmethod = "none"\n',
        encoding="utf-8",
    )
    r = subprocess.run(
        [sys.executable, "-m", "tablesafe", "serve", "--config", str(config), "--port", "0"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode != 0 and "serving" not in r.stdout
    assert "cannot use the state store at postgresql://tablesafe@127.0.0.1:" in r.stderr
    assert "Connection refused" in r.stderr  # the reason
    assert "Traceback" not in r.stderr


def test_the_commands_read_and_write_the_sites_postgres_store(tmp_path, demo_dir, postgres):
    """tablesafe audit, api-key revoke and list, audit reconstruct on [state] url's database."""
    from click.testing import CliRunner

    from tablesafe._cli import get_app

    url = postgres.database()
    config = tmp_path / "site.toml"
    config.write_text(
        f'[state]\nurl = "{url}"\n[[datasets]]\nname = "demo"\npath = "{demo_dir}"\n'
        '[datasets.protection]\nmethod = "none"\n[datasets.rules]\nmin_universe_size = 1\n'
        f'[[keys]]\nid = "user1"\nhash = "{hash_key(USER_KEY)}"\n',
        encoding="utf-8",
    )
    with TestClient(create_app(load_site_config(config))) as c:
        body = {"dimensions": ["SEX", "REGION"], "statistic": "count"}
        r = c.post("/api/datasets/demo/tables", json=body, headers={"x-api-key": USER_KEY})
        assert r.status_code == 200, r.text

    def run(*args: str) -> str:
        out = CliRunner().invoke(get_app(), [*args, "--config", str(config)])
        assert out.exit_code == 0, out.output
        return out.output

    rows = json.loads(run("audit", "--format", "json"))
    assert [(row["key_id"], row["status"]) for row in rows] == [("user1", 200)]
    assert "revoked key user1" in run("api-key", "revoke", "user1")
    listed = json.loads(run("api-key", "list", "--format", "json"))
    assert listed[0]["revoked"] is not None and listed[0]["last_used"] == rows[0]["time"]
    attack = json.loads(run("audit", "reconstruct", "--dataset", "demo", "--format", "json"))
    assert attack["tables"] == 1
    store = PostgresState(url)
    try:
        assert store.revoked(hash_key(USER_KEY)) is not None
        assert [h["tables"] for h in store.reconstructions("demo")] == [1]
    finally:
        store.close()


def test_a_statement_with_a_literal_percent_is_refused_before_postgresql_reads_it():
    """psycopg reads % as a placeholder: the shared statements pass LIKE patterns as parameters."""
    from tablesafe.state._postgres import _placeholders

    assert _placeholders("SELECT id FROM jobs WHERE key_id = ? AND dataset = ?") == (
        "SELECT id FROM jobs WHERE key_id = %s AND dataset = %s"
    )
    with pytest.raises(ValueError, match="literal %"):
        _placeholders("SELECT id FROM requests WHERE endpoint LIKE 'POST %'")
