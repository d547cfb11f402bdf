"""The server's edges (issue 26, items 6 to 12): audit completeness, one error shape,
slow clients, the API pages, forwarded addresses, the key lifecycle.

In process (TestClient) where the application decides; against a real uvicorn on
127.0.0.1 (tests/test_server_live.py) where the HTTP protocol does.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tablesafe.server import AuditLog, create_app
from test_server import ADMIN_KEY, USER_KEY, error_of, site

TABLES = "/api/datasets/demo/tables"


def rows_of(tmp_path):
    log = AuditLog(tmp_path / "audit.sqlite")
    try:
        return log.query(limit=10_000)[::-1]  # oldest first
    finally:
        log.close()


@pytest.fixture
def edge_site(demo_dir, tmp_path):
    return site(demo_dir, tmp_path, server={"auth_failures_per_minute": 5})


# -- item 6: every request has one audit row, under the key that sent it ----------------


def test_every_request_has_one_audit_row_with_key_and_client(edge_site, tmp_path):
    user = {"x-api-key": USER_KEY}
    sent = []
    with TestClient(create_app(edge_site), client=("10.1.2.3", 4321)) as c:

        def go(method, path, status, **kw):
            response = c.request(method, path, **kw)
            assert response.status_code == status, (path, response.text)
            sent.append((method, path, status))
            if status >= 400:
                error_of(response)

        go("GET", "/api/health", 200)
        go("GET", "/", 200)
        go("GET", "/static/app.js", 200)
        go("GET", "/openapi.json", 200)
        go("GET", "/api/datasets", 200, headers=user)
        go("POST", TABLES, 200, json={"dimensions": ["SEX"]}, headers=user)
        go(
            "POST",
            TABLES,
            422,
            content=b"{not json",
            headers={**user, "content-type": "application/json"},
        )
        go("POST", TABLES, 413, content=b"x" * 70_000, headers=user)
        go("GET", "/api/datasets/nope", 404, headers=user)
        go("GET", "/api/datasets/", 404, headers=user)
        go("DELETE", "/api/datasets", 405, headers=user)
        go("GET", "/static/nope.js", 404)
        go("GET", "/api/datasets", 401, headers={"x-api-key": "wrong"})
        go("GET", "/api/admin/audit", 403, headers=user)
    rows = rows_of(tmp_path)
    assert [(r["endpoint"], r["status"]) for r in rows] == [(f"{m} {p}", s) for m, p, s in sent]
    assert {r["client"] for r in rows} == {"10.1.2.3"}
    by_status = {r["status"]: r for r in rows}
    # A body that does not parse, or is too large, is logged under the key that sent it.
    assert by_status[422]["key_id"] == "user1"
    assert "not valid JSON" in by_status[422]["outcome"]
    assert by_status[413]["key_id"] == "user1"
    assert by_status[413]["outcome"].startswith("PayloadTooLarge")
    assert by_status[401]["key_id"] == "unknown"
    assert rows[5]["request"]["dimensions"] == ["SEX"] and rows[5]["dataset"] == "demo"


def test_a_crash_has_its_audit_row(edge_site, tmp_path):
    app = create_app(edge_site)
    service = app.state.service

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    service.table = broken
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post(TABLES, json={"dimensions": ["SEX"]}, headers={"x-api-key": USER_KEY})
    assert r.status_code == 500 and error_of(r)["message"] == "internal error"
    rows = rows_of(tmp_path)
    assert [(r["status"], r["key_id"], r["outcome"]) for r in rows] == [
        (500, "user1", "InternalError: internal error")
    ]


def test_failed_authentications_are_rate_limited_per_address(edge_site, tmp_path):
    with TestClient(create_app(edge_site), client=("10.9.9.9", 1)) as c:
        codes = [
            c.get("/api/datasets", headers={"x-api-key": f"wrong{i}"}).status_code for i in range(8)
        ]
        missing = c.get("/api/datasets").status_code
        # A valid key from the same address is served: only failures are counted there.
        ok = c.get("/api/datasets", headers={"x-api-key": USER_KEY}).status_code
    with TestClient(create_app(edge_site), client=("10.9.9.10", 1)) as other:
        elsewhere = other.get("/api/datasets", headers={"x-api-key": "wrong"}).status_code
    assert codes == [401] * 5 + [429] * 3
    assert missing == 429 and ok == 200 and elsewhere == 401
    rows = rows_of(tmp_path)
    assert len(rows) == 11
    assert [r["status"] for r in rows[:9]] == [*codes, missing]
    assert all(r["key_id"] == "unknown" for r in rows[:9])


def test_rate_limited_requests_with_bad_bodies_are_counted(demo_dir, tmp_path):
    # The limit is counted before the body is parsed: bad bodies cannot flood past it.
    cfg = site(demo_dir, tmp_path, server={"rate_limit_per_minute": 3})
    with TestClient(create_app(cfg)) as c:
        codes = [
            c.post(
                TABLES,
                content=b"[[[",
                headers={"x-api-key": USER_KEY, "content-type": "application/json"},
            ).status_code
            for _ in range(5)
        ]
    assert codes == [422, 422, 422, 429, 429]
    assert [r["key_id"] for r in rows_of(tmp_path)] == ["user1"] * 5


def test_older_audit_database_gains_the_client_column(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE requests (id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, "
        "key_id TEXT NOT NULL, dataset TEXT, endpoint TEXT NOT NULL, request TEXT, "
        "status INTEGER NOT NULL, outcome TEXT NOT NULL)"
    )
    con.execute(
        "INSERT INTO requests (time, key_id, endpoint, status, outcome) "
        "VALUES ('2026-01-01', 'a', 'GET /', 200, 'ok')"
    )
    con.commit()
    con.close()
    log = AuditLog(path)
    log.record(key_id="b", endpoint="GET /", status=200, outcome="ok", client="10.0.0.1")
    rows = log.query()
    log.close()
    assert [(r["key_id"], r["client"]) for r in rows] == [("b", "10.0.0.1"), ("a", None)]


# -- item 7: one error shape --------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"\xff\xfe\xfa",
        b"[" * 5000 + b"]" * 5000,
        b'{"dimensions": ["SEX"]} x',
        b"\x00",
        b'{"dimensions": ["SEX"], "universe": {"AGE": [' + b"[" * 3000 + b"]",
    ],
)
def test_a_body_that_is_not_json_is_422_however_it_is_malformed(edge_site, body):
    with TestClient(create_app(edge_site)) as c:
        r = c.post(
            TABLES,
            content=body,
            headers={"x-api-key": USER_KEY, "content-type": "application/json"},
        )
    assert r.status_code == 422
    err = error_of(r)
    assert err["type"] == "ValidationError"
    assert err["message"].startswith("invalid request: body: not valid JSON")


def test_a_trailing_slash_is_not_found_not_a_redirect(edge_site):
    with TestClient(create_app(edge_site), follow_redirects=False) as c:
        c.headers["x-api-key"] = USER_KEY
        for path in ("/api/datasets/", "/api/datasets/demo/", "/api/health/"):
            r = c.get(path)
            assert r.status_code == 404, path
            assert f"paths end without a slash: {path.rstrip('/')}" in error_of(r)["message"]


def test_admin_reads_the_client_address(edge_site):
    with TestClient(create_app(edge_site), client=("192.0.2.7", 1)) as c:
        c.get("/api/datasets", headers={"x-api-key": USER_KEY})
        rows = c.get("/api/admin/audit", headers={"x-api-key": ADMIN_KEY}).json()["requests"]
    assert rows[0]["client"] == "192.0.2.7" and rows[0]["key_id"] == "user1"


# -- item 10: forwarded addresses --------------------------------------------------------


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        # No proxy named: the header is ignored, whoever sends it.
        ("127.0.0.1", "6.6.6.6", "127.0.0.1"),
        ("10.0.0.2", "6.6.6.6", "10.0.0.2"),
    ],
)
def test_x_forwarded_for_is_ignored_without_trusted_proxies(
    demo_dir, tmp_path, peer, forwarded, client
):
    cfg = site(demo_dir, tmp_path)
    with TestClient(create_app(cfg), client=(peer, 1)) as c:
        c.get("/api/datasets", headers={"x-api-key": USER_KEY, "x-forwarded-for": forwarded})
    assert [r["client"] for r in rows_of(tmp_path)] == [client]


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        ("10.0.0.2", "1.2.3.4", "1.2.3.4"),
        # Each trusted proxy appends its peer: the nearest untrusted hop is the client,
        # whatever the caller wrote before it.
        ("10.0.0.2", "6.6.6.6, 1.2.3.4, 10.0.0.3", "1.2.3.4"),
        ("10.0.0.2", "6.6.6.6", "6.6.6.6"),
        # A peer outside the named networks cannot forward.
        ("192.168.1.1", "1.2.3.4", "192.168.1.1"),
        # Not an address: the last trusted hop is the client.
        ("10.0.0.2", "nonsense", "10.0.0.2"),
        ("10.0.0.2", "1.2.3.4, nonsense", "10.0.0.2"),
        ("10.0.0.2", "", "10.0.0.2"),
        ("fd00::5", "2001:db8::7", "2001:db8::7"),
        # Every hop trusted: the farthest one.
        ("10.0.0.2", "10.0.0.9", "10.0.0.9"),
    ],
)
def test_x_forwarded_for_from_named_proxies(demo_dir, tmp_path, peer, forwarded, client):
    cfg = site(demo_dir, tmp_path, server={"trusted_proxies": ["10.0.0.0/8", "fd00::/8"]})
    with TestClient(create_app(cfg), client=(peer, 1)) as c:
        c.get("/api/datasets", headers={"x-api-key": USER_KEY, "x-forwarded-for": forwarded})
    assert [r["client"] for r in rows_of(tmp_path)] == [client]


def test_anonymous_identity_and_limits_follow_the_trusted_address(demo_dir, tmp_path):
    cfg = site(
        demo_dir,
        tmp_path,
        keys=False,
        server={"trusted_proxies": ["10.0.0.2"], "rate_limit_per_minute": 2},
    )
    with TestClient(create_app(cfg), client=("10.0.0.2", 1)) as c:
        a = [
            c.get("/api/datasets", headers={"x-forwarded-for": "1.1.1.1"}).status_code
            for _ in range(3)
        ]
        b = c.get("/api/datasets", headers={"x-forwarded-for": "2.2.2.2"}).status_code
    assert a == [200, 200, 429] and b == 200
    assert [r["key_id"] for r in rows_of(tmp_path)] == ["anonymous@1.1.1.1"] * 3 + [
        "anonymous@2.2.2.2"
    ]


def test_trusted_proxies_must_be_addresses(demo_dir, tmp_path):
    from tablesafe._errors import ConfigError

    with pytest.raises(ConfigError, match="'proxy.local' is not an IP address or network"):
        site(demo_dir, tmp_path, server={"trusted_proxies": ["proxy.local"]})


# -- item 9: the API pages and the security headers ---------------------------------------


def test_api_pages_are_off_by_default(edge_site):
    with TestClient(create_app(edge_site)) as c:
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            r = c.get(path)
            assert r.status_code == 404 and error_of(r)["type"] == "NotFound", path
        assert c.get("/openapi.json").status_code == 200


def test_api_pages_when_the_site_turns_them_on(demo_dir, tmp_path):
    cfg = site(demo_dir, tmp_path, server={"api_docs": True})
    with TestClient(create_app(cfg)) as c:
        for path in ("/docs", "/redoc"):
            r = c.get(path)
            assert r.status_code == 200 and "cdn.jsdelivr.net" in r.text
            policy = r.headers["content-security-policy"]
            assert "https://cdn.jsdelivr.net" in policy and "frame-ancestors 'none'" in policy
        # Only those pages may load from the CDN.
        assert "cdn.jsdelivr.net" not in c.get("/").headers["content-security-policy"]


def test_every_answer_carries_the_security_headers(edge_site):
    with TestClient(create_app(edge_site)) as c:
        answers = [
            c.get("/"),
            c.get("/static/app.js"),
            c.get("/api/health"),
            c.get("/openapi.json"),
            c.get("/api/datasets", headers={"x-api-key": USER_KEY}),
            c.get("/api/datasets"),
            c.get("/nothing"),
            c.post(TABLES, content=b"x" * 70_000, headers={"x-api-key": USER_KEY}),
        ]
    for r in answers:
        policy = r.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"
        assert r.headers.get_list("content-security-policy") == [policy]


def test_the_page_needs_nothing_its_policy_forbids():
    """No inline script, style or handler, nothing from another origin."""
    import re
    from importlib import resources

    static = resources.files("tablesafe.server").joinpath("static")
    html = static.joinpath("index.html").read_text()
    scripts = re.findall(r"<script\b([^>]*)>", html)
    assert scripts and all('src="/static/' in attrs for attrs in scripts)
    assert "<style" not in html and not re.search(r"\sstyle=", html)
    assert not re.search(r"\son[a-z]+=", html)
    assert not re.search(r"(src|href)=\"(https?:)?//", html)
    for name in ("app.js", "admin.js"):
        code = static.joinpath(name).read_text()
        assert "eval(" not in code and "new Function" not in code
        # Requests go to the page's own origin.
        assert not re.search(r"fetch\(\s*[\"'`]https?:", code)


# -- item 11: the key lifecycle -----------------------------------------------------------


def keyed_site(demo_dir, tmp_path, **expires):
    from tablesafe._settings import load_site_config
    from tablesafe.server import hash_key

    data = {
        "base": str(tmp_path),
        "server": {"audit_db": "audit.sqlite"},
        "datasets": [{"name": "demo", "path": str(demo_dir), "protection": {"method": "none"}}],
        "keys": [
            {"id": "user1", "hash": hash_key(USER_KEY), **expires},
            {"id": "admin1", "hash": hash_key(ADMIN_KEY), "role": "admin"},
        ],
    }
    return load_site_config(data=data)


def test_an_expired_key_is_refused_and_logged_under_its_id(demo_dir, tmp_path):
    import datetime as dt

    past = keyed_site(demo_dir, tmp_path, expires=dt.date(2000, 1, 1))
    with TestClient(create_app(past)) as c:
        r = c.get("/api/datasets", headers={"x-api-key": USER_KEY})
    err = error_of(r)
    assert (err["status"], err["type"]) == (401, "AuthError")
    assert "expired on 2000-01-01T00:00:00+00:00" in err["message"]
    [row] = rows_of(tmp_path)
    assert (row["key_id"], row["status"]) == ("user1", 401)
    future = keyed_site(demo_dir, tmp_path / "f", expires="2999-01-01T00:00:00Z")
    with TestClient(create_app(future)) as c:
        assert c.get("/api/datasets", headers={"x-api-key": USER_KEY}).status_code == 200


def test_expiry_to_the_microsecond():
    import datetime as dt

    from tablesafe._settings import ApiKeySettings
    from tablesafe.server import Authenticator, hash_key
    from tablesafe.server._auth import AuthError

    at = dt.datetime(2027, 1, 1, 12, tzinfo=dt.UTC)
    key = ApiKeySettings(id="k", hash=hash_key("secret-key"), expires="2027-01-01T12:00:00Z")
    now = [at - dt.timedelta(microseconds=1)]
    auth = Authenticator([key], 10, clock=lambda: now[0])
    assert auth.identify("secret-key").id == "k"
    now[0] = at
    with pytest.raises(AuthError, match="expired"):
        auth.identify("secret-key")
    # A date means 00:00 UTC of that day; an offset is kept.
    assert ApiKeySettings(
        id="k", hash=key.hash, expires=dt.date(2027, 1, 1)
    ).expires == dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
    later = ApiKeySettings(id="k", hash=key.hash, expires="2027-01-01T12:00:00+02:00").expires
    assert later == at - dt.timedelta(hours=2)


@pytest.mark.parametrize("value", [1700000000, 1.5, True, "soon"])
def test_expires_must_be_a_date(demo_dir, tmp_path, value):
    from tablesafe._errors import ConfigError

    with pytest.raises(ConfigError, match="keys.0.expires"):
        keyed_site(demo_dir, tmp_path, expires=value)


def _cli(*args):
    from click.testing import CliRunner

    from tablesafe._cli import get_app

    return CliRunner().invoke(get_app(), [str(a) for a in args])


def _site_file(demo_dir, tmp_path, keys_toml):
    path = tmp_path / "site.toml"
    path.write_text(
        f'[server]\naudit_db = "audit.sqlite"\n[[datasets]]\nname = "demo"\npath = "{demo_dir}"\n'
        '[datasets.protection]\nmethod = "none"\n' + keys_toml
    )
    return path


def test_revoke_without_restart_and_last_used(demo_dir, tmp_path):
    import json

    from tablesafe._settings import load_site_config

    made = _cli("api-key", "new", "analyst", "--expires", "2999-01-01")
    assert made.exit_code == 0, made.output
    key = made.output.split("user): ")[1].split()[0]
    assert "expires = 2999-01-01" in made.output
    other = _cli("api-key", "new", "other")
    other_key = other.output.split("user): ")[1].split()[0]
    cfg = _site_file(
        demo_dir, tmp_path, made.output.split("\n", 1)[1] + other.output.split("\n", 1)[1]
    )
    with TestClient(create_app(load_site_config(cfg))) as c:
        assert c.get("/api/datasets", headers={"x-api-key": key}).status_code == 200
        listed = json.loads(_cli("api-key", "list", "--config", cfg, "--format", "json").output)
        assert [(k["id"], k["revoked"]) for k in listed] == [("analyst", None), ("other", None)]
        assert listed[0]["expires"] == "2999-01-01T00:00:00+00:00"
        assert listed[0]["last_used"] is not None and listed[1]["last_used"] is None
        revoked = _cli("api-key", "revoke", "analyst", "--config", cfg, "--reason", "left")
        assert revoked.exit_code == 0 and "revoked key analyst" in revoked.output
        # The same running server refuses it from the next request; other keys still work.
        r = c.get("/api/datasets", headers={"x-api-key": key})
        assert r.status_code == 401 and "revoked" in error_of(r)["message"]
        assert c.get("/api/datasets", headers={"x-api-key": other_key}).status_code == 200
        again = _cli("api-key", "revoke", "analyst", "--config", cfg)
        assert again.exit_code == 0 and "already revoked" in again.output
    listed = json.loads(_cli("api-key", "list", "--config", cfg, "--format", "json").output)
    assert listed[0]["revoked"] is not None
    # The refused request does not count as a use.
    rows = [r for r in rows_of(tmp_path) if r["key_id"] == "analyst"]
    assert [r["status"] for r in rows] == [200, 401]
    assert listed[0]["last_used"] == rows[0]["time"]
    text = _cli("api-key", "list", "--config", cfg)
    assert text.exit_code == 0 and "analyst" in text.output and "never" in text.output


def test_key_commands_refuse_what_they_cannot_do(demo_dir, tmp_path):
    cfg = _site_file(demo_dir, tmp_path, "")
    from tablesafe._errors import UserError

    unknown = _cli("api-key", "revoke", "nobody", "--config", cfg)
    assert isinstance(unknown.exception, UserError)
    assert "no key 'nobody'" in str(unknown.exception)
    for bad in ("tomorrow", "1700000000", "2027-13-01"):
        r = _cli("api-key", "new", "k", "--expires", bad)
        assert isinstance(r.exception, UserError) and "not a date" in str(r.exception), bad
        assert "key (shown once" not in r.output


# -- item 12: serve on a busy port --------------------------------------------------------


def test_serve_on_a_busy_port_fails_before_saying_serving(demo_dir, tmp_path):
    import socket
    import subprocess
    import sys

    cfg = _site_file(demo_dir, tmp_path, "")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "tablesafe", "serve", "--config", str(cfg), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert r.returncode == 2 and r.stdout == ""
    assert f"error: cannot listen on 127.0.0.1:{port}: the port is in use" in r.stderr


# -- item 12: make demo -------------------------------------------------------------------


def _make_dry_run(target):
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    # Under `make test` the environment carries MAKELEVEL/MAKEFLAGS, and a
    # nested make then prints "Entering/Leaving directory" lines: drop both.
    env = {k: v for k, v in os.environ.items() if k not in {"MAKELEVEL", "MAKEFLAGS", "MFLAGS"}}
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", target],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.splitlines()


def test_make_demo_installs_the_agent_interface_only_and_make_test_installs_all():
    demo = _make_dry_run("demo")
    installs = [line for line in demo if "pip install" in line and "--upgrade pip" not in line]
    assert installs and all("'.[mcp]'" in line for line in installs), installs
    assert any(line.endswith("pip install --quiet -e '.[mcp]'") for line in installs)
    # Something is said before the silent install; the server is the last step.
    assert any(line.startswith("echo") and "installing" in line for line in demo)
    assert "tablesafe serve" in demo[-1] and not any("serving" in line for line in demo)
    test = _make_dry_run("test")
    assert any(
        "pip install" in line and "'.[dev,spark,postgres,server,mcp,dp]'" in line for line in test
    )
    # The state store's tests start Debian's PostgreSQL: installed when missing.
    assert any("apt-get install" in line and "postgresql" in line for line in test)


def test_the_open_file_limit_is_raised_to_fit_the_connections(monkeypatch):
    import resource

    from tablesafe.server import _protocol

    limits = {"soft": 1024, "hard": 4096}
    monkeypatch.setattr(resource, "getrlimit", lambda which: (limits["soft"], limits["hard"]))

    def setrlimit(which, value):
        assert value[1] == limits["hard"] and value[0] <= limits["hard"]
        limits["soft"] = value[0]

    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    # Raised as far as the hard limit allows; the connections limited to what fits.
    assert _protocol.open_files_for(2000) == 2000 and limits["soft"] == 2064
    assert _protocol.open_files_for(10_000) == 4096 - 64 and limits["soft"] == 4096
