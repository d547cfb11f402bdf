"""The server's edges against a real uvicorn on 127.0.0.1 (issue 26, items 7, 8 and 10).

What the HTTP protocol decides (malformed request lines and headers, sizes, slow
clients, connection limits, the client's address) is tested here over sockets,
with the configuration ``tablesafe serve`` uses (``server_config``). Every loop is
bounded and every socket has a timeout.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import h11
import numpy as np
import pytest
import uvicorn

from tablesafe.server import AuditLog, create_app
from tablesafe.server._protocol import LINGER_SECONDS, listen, server_config
from test_server import USER_KEY, site

# Generous: a bound on how long a test waits, never an assertion about speed.
WAIT = 20.0


class Live:
    """A running server: its address, audit log and helpers to talk to it."""

    def __init__(self, port: int, audit_path: Path) -> None:
        self.port = port
        self.audit_path = audit_path

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=WAIT)
        sock.settimeout(WAIT)
        return sock

    def exchange(self, raw: bytes, *, linger: float = 0.0) -> tuple[h11.Response | None, bytes]:
        """Send ``raw`` and read one answer (None if the server closed without one)."""
        with self.connect() as sock:
            sock.sendall(raw)
            if linger:
                time.sleep(linger)
            return read_answer(sock, head=raw.startswith(b"HEAD "))

    def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[h11.Response | None, bytes]:
        head = {"host": "127.0.0.1", "connection": "close", **(headers or {})}
        if body or method == "POST":
            head.setdefault("content-length", str(len(body)))
        lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items())]
        return self.exchange(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    def rows(self) -> list[dict[str, Any]]:
        log = AuditLog(self.audit_path)
        try:
            return log.query(limit=100_000)[::-1]
        finally:
            log.close()


def read_answer(sock: socket.socket, head: bool = False) -> tuple[h11.Response | None, bytes]:
    """One HTTP answer read with h11 (as a client would), or None on a bare close."""
    conn = h11.Connection(h11.CLIENT)
    method = "HEAD" if head else "GET"
    conn.send(h11.Request(method=method, target="/", headers=[("host", "x")]))
    conn.send(h11.EndOfMessage())
    response, body = None, b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                pytest.fail("the server reset the connection instead of answering")
            conn.receive_data(data)
            if not data and response is None:
                return None, b""
            continue
        if isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            body += bytes(event.data)
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            return response, body


def error_of(response: h11.Response | None, body: bytes, head: bool = False) -> dict[str, Any]:
    """The one error shape, checked (for HEAD, only its content type)."""
    assert response is not None, "no answer"
    headers = {k.decode(): v.decode() for k, v in response.headers}
    assert headers["content-type"] == "application/json", headers
    if head:
        return {"status": response.status_code}
    doc = json.loads(body)
    assert set(doc) - {"alternatives"} == {"error"}
    assert set(doc["error"]) == {"status", "type", "message"}
    assert doc["error"]["status"] == response.status_code
    return doc["error"]


@contextmanager
def serving(cfg: Any, *, max_connections: int | None = None) -> Iterator[Live]:
    """Serve ``cfg`` on a free port of 127.0.0.1 in a thread, as ``tablesafe serve`` does."""
    sock = listen("127.0.0.1", 0)
    app = create_app(cfg)
    server = uvicorn.Server(server_config(app, max_connections=max_connections))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started, "the server did not start"
    try:
        yield Live(sock.getsockname()[1], Path(cfg.base) / "audit.sqlite")
    finally:
        server.should_exit = True
        thread.join(WAIT)
        sock.close()


FAST = {"header_timeout_seconds": 1.0, "body_timeout_seconds": 1.0, "keep_alive_seconds": 1}


@pytest.fixture
def live(demo_dir, tmp_path) -> Iterator[Live]:
    with serving(site(demo_dir, tmp_path, server=FAST)) as server:
        yield server


# -- item 7: one error shape, also from the HTTP protocol ------------------------------------


def test_a_malformed_request_line_is_json_and_logged(live):
    response, body = live.exchange(b"GARBAGE\r\n\r\n")
    err = error_of(response, body)
    assert (err["status"], err["type"]) == (400, "MalformedRequest")
    assert b"Invalid HTTP request received" not in body
    headers = dict(response.headers)
    assert b"frame-ancestors 'none'" in headers[b"content-security-policy"]
    assert headers[b"x-content-type-options"] == b"nosniff"
    [row] = live.rows()
    assert (row["status"], row["key_id"], row["client"]) == (400, "unknown", "127.0.0.1")
    assert row["endpoint"] == "-"
    assert row["outcome"].startswith("MalformedRequest")


@pytest.mark.parametrize(
    ("raw", "status", "kind"),
    [
        (b"GET /" + b"a" * 1_000_000 + b" HTTP/1.1\r\nhost: x\r\n\r\n", 414, "RequestLineTooLong"),
        (
            b"GET / HTTP/1.1\r\nhost: x\r\nx-big: " + b"b" * 1_000_000 + b"\r\n\r\n",
            431,
            "HeadersTooLarge",
        ),
        (b"GET / HTTP/1.1\r\n" + b"x-h: v\r\n" * 100_000 + b"\r\n", 431, "HeadersTooLarge"),
    ],
)
def test_a_1mb_request_line_or_header_is_answered_not_reset(live, raw, status, kind):
    response, body = live.exchange(raw)
    err = error_of(response, body)
    assert (err["status"], err["type"]) == (status, kind)
    assert "16384 bytes" in err["message"]
    [row] = live.rows()
    assert row["status"] == status and row["endpoint"].startswith("GET /")
    assert len(row["endpoint"]) < 250


def test_malformed_bodies_and_a_trailing_slash_over_http(live):
    key = {"x-api-key": USER_KEY, "content-type": "application/json"}
    for body in (b"{not json", b"[" * 5000, b"\xff\xfe\x00"):
        response, data = live.request("POST", "/api/datasets/demo/tables", body, key)
        assert error_of(response, data)["type"] == "ValidationError"
        assert response.status_code == 422
    response, data = live.request("GET", "/api/datasets/", headers={"x-api-key": USER_KEY})
    assert response.status_code == 404 and "without a slash" in error_of(response, data)["message"]
    assert [r["status"] for r in live.rows()] == [422, 422, 422, 404]
    assert {r["key_id"] for r in live.rows()} == {"user1"}


def test_a_declared_oversized_body_is_answered_not_reset(live):
    # The client sends its whole 1 MB body: the server answers 413 and lingers.
    head = (
        "POST /api/datasets/demo/tables HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"x-api-key: {USER_KEY}\r\ncontent-length: 1000000\r\n\r\n"
    ).encode()
    response, body = live.exchange(head + b" " * 1_000_000)
    err = error_of(response, body)
    assert (err["status"], err["type"]) == (413, "PayloadTooLarge")
    assert [(r["status"], r["key_id"]) for r in live.rows()] == [(413, "user1")]


def _fuzz_requests(rng: np.random.Generator, n: int) -> list[bytes]:
    """Malformed and odd requests, one request each (never two pipelined).

    Each part is well-formed most of the time, so that requests reach every layer:
    the HTTP parser, the gate (keys, sizes, JSON) and the routes.
    """

    def pick(options: list[Any]) -> Any:
        return options[int(rng.integers(len(options)))]

    def junk(low: int, high: int, printable: bool = False) -> bytes:
        alphabet = list(range(32, 127)) if printable else list(range(256))
        return bytes(rng.choice(alphabet, size=int(rng.integers(low, high))).tolist())

    good = {
        "method": [b"GET", b"POST", b"HEAD", b"DELETE", b"OPTIONS"],
        "target": [b"/", b"/api/health", b"/api/datasets", b"/api/datasets/demo",
                   b"/api/datasets/demo/tables", b"/api/datasets/demo/tables?format=csv",
                   b"/api/admin/audit", b"/static/app.js", b"/docs", b"/api/datasets/"],
        "body": [b'{"dimensions": ["SEX"]}', b'{"dimensions": ["NOPE"]}', b'{"dimensions": []}',
                 b'{"dimensions": ["SEX"], "universe": {"AGE": [30, 31]}}', b"[]", b"{}"],
    }  # fmt: skip
    bad = {
        "method": [b"get", b"G ET", b"", b"\x00", b"GET\tX"],
        "target": [b"*", b"http://x/", b"/%ff", b"/api/../etc", b"//", b"/a b"],
        "version": [b"HTTP/2", b"HTTP/1.1 extra", b"", b"HTTP/9.9", b"http/1.1"],
        "framing": [[b"content-length: -1"], [b"content-length: 1", b"content-length: 2"],
                    [b"transfer-encoding: gzip"], [b"content-length: 1x"]],
    }  # fmt: skip
    out = []
    for _ in range(n):
        method = pick(good["method"]) if rng.random() < 0.92 else pick(bad["method"])
        target = pick(good["target"]) if rng.random() < 0.92 else pick(bad["target"])
        if rng.random() < 0.05:
            target += junk(1, 20)
        version = b"HTTP/1.1" if rng.random() < 0.92 else pick(bad["version"])
        headers = [b"host: x", b"connection: close"]
        key = rng.random()
        if key < 0.6:
            headers.append(b"x-api-key: " + USER_KEY.encode())
        elif key < 0.8:
            headers.append(b"x-api-key: " + junk(1, 30, printable=True).strip())
        if rng.random() < 0.1:  # a header line of random bytes
            headers.append(junk(1, 30))
        if rng.random() < 0.15:  # a well-formed header with an odd value
            headers.append(b"x-odd: " + junk(0, 30, printable=True).strip())
        if rng.random() < 0.3:
            body = pick(good["body"])
        elif rng.random() < 0.5:
            body = junk(0, 200)
        else:
            body = b""
        if rng.random() < 0.07:
            headers += pick(bad["framing"])
        elif body or method == b"POST":
            headers.append(b"content-length: %d" % len(body))
        if body and rng.random() < 0.9:
            headers.append(b"content-type: application/json")
        out.append(
            method + b" " + target + b" " + version + b"\r\n" + b"\r\n".join(headers)
            + b"\r\n\r\n" + body
        )  # fmt: skip
    return out


def test_fuzz_gives_only_the_error_shape_and_one_row_per_request(live):
    rng = np.random.default_rng(2026)
    requests = _fuzz_requests(rng, 150)
    statuses = []
    for raw in requests:
        response, body = live.exchange(raw)
        assert response is not None, raw[:80]
        if response.status_code >= 400:
            error_of(response, body, head=raw.startswith(b"HEAD "))
        statuses.append(response.status_code)
    assert set(statuses) <= {200, 400, 401, 403, 404, 405, 408, 413, 414, 422, 431}
    assert {200, 400, 401, 404, 422} <= set(statuses)
    # Slow clients: well-formed requests cut short at a random byte, all at once.
    full = (
        "POST /api/datasets/demo/tables HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
        f"\r\nx-api-key: {USER_KEY}\r\ncontent-length: 23\r\n\r\n"
    ).encode() + b'{"dimensions": ["SEX"]}'
    cuts = [int(c) for c in rng.integers(1, len(full) - 1, size=12)]
    held = [live.connect() for _ in cuts]
    for sock, cut in zip(held, cuts, strict=True):
        sock.sendall(full[:cut])
    for sock in held:
        response, body = read_answer(sock)
        assert error_of(response, body)["status"] == 408
        statuses.append(408)
        sock.close()
    rows = live.rows()
    assert len(rows) == len(requests) + len(cuts)
    assert sorted(r["status"] for r in rows) == sorted(statuses)


def test_a_lingering_close_ends_when_the_client_stops(live):
    # The documented bound: the server drops what follows for at most LINGER_SECONDS.
    assert LINGER_SECONDS == 2.0
    with live.connect() as sock:
        sock.sendall(b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n")
        response, body = read_answer(sock)
        assert error_of(response, body)["status"] == 414
        sock.sendall(b"more bytes, dropped\r\n")  # the server still reads: no reset
        assert sock.recv(100) == b""  # and closes once the linger is over


# -- item 8: slow clients -----------------------------------------------------------------


def test_headers_too_slow_get_408_json(live):
    with live.connect() as sock:
        sock.sendall(b"GET /api/health HTTP/1.1\r\nhost: x\r\n")  # never the blank line
        response, body = read_answer(sock)
    err = error_of(response, body)
    assert (err["status"], err["type"]) == (408, "Timeout")
    assert "within 1 s" in err["message"]
    [row] = live.rows()
    assert (row["status"], row["endpoint"]) == (408, "GET /api/health")


def test_a_slow_drip_of_header_bytes_does_not_reset_the_timeout(live):
    # A byte every 0.25 s: the time counts from the request's first byte, not the last.
    with live.connect() as sock:
        sock.sendall(b"G")
        got = None
        for byte in b"ET /api/health HTTP/1.1\r\nhost: x\r\nx-slow: " + b"s" * 200:
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            sock.settimeout(0.25)
            try:
                got = sock.recv(1, socket.MSG_PEEK)
            except TimeoutError:
                continue
            if got:
                break
        sock.settimeout(WAIT)
        response, body = read_answer(sock)
    assert error_of(response, body)["status"] == 408


def test_the_header_timeout_runs_again_for_the_next_request_of_a_connection(live):
    with live.connect() as sock:
        sock.sendall(b"GET /api/health HTTP/1.1\r\nhost: x\r\n\r\n")
        response, body = read_answer(sock)
        assert response.status_code == 200
        sock.sendall(b"GET /api/health HTTP/1.1\r\n")  # the next request, cut short
        response, body = read_answer(sock)
    assert error_of(response, body)["status"] == 408
    assert [r["status"] for r in live.rows()] == [200, 408]


def test_a_pipelined_request_cut_short_gets_408(live):
    with live.connect() as sock:
        sock.sendall(b"GET /api/health HTTP/1.1\r\nhost: x\r\n\r\nGET /api/health HTTP/1.1\r\n")
        first, _ = read_answer(sock)
        response, body = read_answer(sock)
    assert first.status_code == 200
    assert error_of(response, body)["status"] == 408
    assert [r["status"] for r in live.rows()] == [200, 408]


def test_a_connection_that_sends_nothing_is_closed_without_a_row(live):
    with live.connect() as sock:
        assert sock.recv(100) == b""
    assert live.rows() == []


def test_a_short_body_gets_408_under_its_key(live):
    head = (
        "POST /api/datasets/demo/tables HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"x-api-key: {USER_KEY}\r\ncontent-length: 100\r\n\r\n"
    ).encode()
    response, body = live.exchange(head + b'{"dimensions"')
    err = error_of(response, body)
    assert (err["status"], err["type"]) == (408, "Timeout")
    assert "body not received within 1 s" in err["message"]
    assert [(r["status"], r["key_id"]) for r in live.rows()] == [(408, "user1")]


def test_a_client_leaving_before_its_body_has_a_499_row(live):
    head = (
        "POST /api/datasets/demo/tables HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"x-api-key: {USER_KEY}\r\ncontent-length: 100\r\n\r\n"
    ).encode()
    with live.connect() as sock:
        sock.sendall(head + b"{")
        time.sleep(0.2)
    deadline = time.monotonic() + WAIT
    while not live.rows() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [(r["status"], r["key_id"]) for r in live.rows()] == [(499, "user1")]


def test_an_idle_kept_alive_connection_is_closed(live):
    with live.connect() as sock:
        sock.sendall(b"GET /api/health HTTP/1.1\r\nhost: x\r\n\r\n")
        data = b""
        while b'"ok"' not in data:
            data += sock.recv(4096)
        assert sock.recv(100) == b""  # closed after keep_alive_seconds
    assert [r["status"] for r in live.rows()] == [200]


def test_connections_past_the_limit_get_503_json(demo_dir, tmp_path):
    cfg = site(demo_dir, tmp_path, server={**FAST, "header_timeout_seconds": 30.0})
    with serving(cfg, max_connections=3) as server:
        held = [server.connect() for _ in range(3)]
        time.sleep(0.2)  # the server has accepted them
        try:
            response, body = server.request("GET", "/api/health")
            err = error_of(response, body)
            assert (err["status"], err["type"]) == (503, "Unavailable")
        finally:
            for sock in held:
                sock.close()
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            response, body = server.request("GET", "/api/health")
            if response is not None and response.status_code == 200:
                break
            time.sleep(0.1)
        assert response.status_code == 200
        assert next(r["status"] for r in server.rows()) == 503


@pytest.mark.system
def test_a_slowloris_of_1000_connections_does_not_stop_service(demo_dir, tmp_path):
    """1,000 connections sending headers a byte at a time; others are served meanwhile."""
    cfg = site(demo_dir, tmp_path, server={**FAST, "header_timeout_seconds": 3.0})
    with serving(cfg) as server:
        loris = []
        for _ in range(1000):
            sock = server.connect()
            sock.sendall(b"GET /api/health HTTP/1.1\r\nhost: x\r\n")
            loris.append(sock)
        served = []
        for i in range(40):
            for sock in loris[i * 25 : (i + 1) * 25]:
                with suppress(OSError):
                    sock.sendall(b"x")
            response, body = server.request("GET", "/api/datasets", headers={"x-api-key": USER_KEY})
            served.append(response.status_code if response is not None else None)
        answers = []
        for sock in loris:
            response, body = read_answer(sock)
            answers.append(error_of(response, body)["status"])
            sock.close()
    assert served == [200] * 40
    assert answers == [408] * 1000
    rows = server.rows()
    assert sorted(r["status"] for r in rows) == [200] * 40 + [408] * 1000


# -- item 10: forwarded addresses ---------------------------------------------------------


def test_x_forwarded_for_from_loopback_is_not_trusted(demo_dir, tmp_path):
    # uvicorn's default trusts 127.0.0.1: a local caller could pick its anonymous identity.
    cfg = site(demo_dir, tmp_path, keys=False, server={**FAST, "rate_limit_per_minute": 3})
    with serving(cfg) as server:
        codes = [
            server.request("GET", "/api/datasets", headers={"x-forwarded-for": f"10.0.0.{i}"})[
                0
            ].status_code
            for i in range(5)
        ]
        rows = server.rows()
    assert codes == [200, 200, 200, 429, 429]
    assert {r["client"] for r in rows} == {"127.0.0.1"}
    assert {r["key_id"] for r in rows} == {"anonymous@127.0.0.1"}


def test_x_forwarded_for_from_a_named_proxy_is_the_client(demo_dir, tmp_path):
    cfg = site(
        demo_dir,
        tmp_path,
        keys=False,
        server={**FAST, "trusted_proxies": ["127.0.0.1"], "rate_limit_per_minute": 3},
    )
    with serving(cfg) as server:
        codes = [
            server.request("GET", "/api/datasets", headers={"x-forwarded-for": f"10.0.0.{i}"})[
                0
            ].status_code
            for i in range(5)
        ]
        rows = server.rows()
    assert codes == [200] * 5
    assert [r["client"] for r in rows] == [f"10.0.0.{i}" for i in range(5)]
