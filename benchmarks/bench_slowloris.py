"""A slowloris against `tablesafe serve` on loopback (issue 26, item 8): does service go on?

Serves a small demo survey with `tablesafe serve` in its own process on
127.0.0.1, then measures, from this process, the latency of a small table
request (one at a time) twice: first alone (the baseline, measured here in the
same run), then for 90% of the header timeout while ``--connections`` slow
connections are open, each having sent part of a request line and headers,
then one more byte now and then (a tenth of them before each measured
request), as a slowloris does. It reports the latency ratio, how many
requests were served during the attack, and what the slow connections got
(408 in the one error shape once ``header_timeout_seconds`` passed) and when.

Bounded: the attack lasts about ``--timeout`` seconds plus the linger; nothing
leaves 127.0.0.1.

Usage: python benchmarks/bench_slowloris.py [--connections 1000] [--timeout 10] [--requests 200]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tablesafe.prepare._demo import write_demo_data

REQUEST = (
    b"POST /api/datasets/demo/tables HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    b'content-length: 23\r\n\r\n{"dimensions": ["SEX"]}'
)


def site_file(folder: Path, data_dir: Path, timeout: float) -> Path:
    path = folder / "site.toml"
    path.write_text(
        f"""
[server]
audit_db = "{folder / "audit.sqlite"}"
rate_limit_per_minute = 1000000
header_timeout_seconds = {timeout}

[[datasets]]
name = "demo"
path = "{data_dir}"

[datasets.protection]
method = "ckm"

[datasets.rules]
min_universe_size = 1
"""
    )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_table(port: int) -> float:
    """Seconds for one table request on a new connection (an answer must be 200)."""
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(REQUEST.replace(b"host: x", b"host: x\r\nconnection: close"))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
    return time.perf_counter() - t0


def latencies(
    port: int, n: int, drip: list[socket.socket] | None = None, until: float = 0.0
) -> list[float]:
    """``n`` table requests one at a time (and more until ``until``, a perf_counter time)."""
    out: list[float] = []
    i = 0
    while i < n or time.perf_counter() < until:
        i += 1
        if drip:  # keep the slow connections dripping while we measure
            for sock in drip[i % 10 :: 10]:
                with contextlib.suppress(OSError):
                    sock.sendall(b"x")
        out.append(one_table(port))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=10.0, help="header_timeout_seconds")
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data_dir = write_demo_data(folder / "demo", 20_000, seed=1, replicates=0)
        config = site_file(folder, data_dir, args.timeout)
        port = free_port()
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "tablesafe._cli", "serve", "--config", str(config)),
                *("--host", "127.0.0.1", "--port", str(port)),
            ],
            stdout=subprocess.PIPE,
            env={**os.environ},
        )
        try:
            assert server.stdout is not None
            server.stdout.readline()  # "serving ..." once listening and loaded
            latencies(port, 20)  # warm up: the data loaded, the cube built
            base = latencies(port, args.requests)

            t_attack = time.perf_counter()
            loris = []
            for _ in range(args.connections):
                sock = socket.create_connection(("127.0.0.1", port), timeout=60)
                sock.sendall(b"GET /api/health HTTP/1.1\r\nhost: x\r\n")
                loris.append(sock)
            opened = time.perf_counter() - t_attack
            # Measured for most of the attack: until shortly before the timeout ends it.
            under = latencies(port, args.requests, loris, t_attack + 0.9 * args.timeout)
            during = time.perf_counter() - t_attack

            answers: dict[str, int] = {}
            for sock in loris:
                data = b""
                try:
                    while chunk := sock.recv(65536):
                        data += chunk
                except OSError as exc:
                    data = repr(exc).encode()
                head, _, body = data.partition(b"\r\n\r\n")
                status = head.split(b" ", 2)[1].decode() if head.startswith(b"HTTP/") else "none"
                kind = json.loads(body)["error"]["type"] if body.startswith(b"{") else "-"
                answers[f"{status} {kind}"] = answers.get(f"{status} {kind}", 0) + 1
                sock.close()
            closed = time.perf_counter() - t_attack
        finally:
            server.terminate()
            server.wait(timeout=30)

    def p(values: list[float], q: float) -> float:
        s = sorted(values)
        return s[min(len(s) - 1, int(q * len(s)))] * 1000

    print(f"slow connections {args.connections}, header_timeout_seconds {args.timeout:g}")
    print(f"opened in {opened:.2f} s; {len(under)} tables measured within {during:.2f} s")
    print(f"baseline (no attack): p50 {p(base, 0.5):.1f} ms, p99 {p(base, 0.99):.1f} ms")
    print(f"under attack:         p50 {p(under, 0.5):.1f} ms, p99 {p(under, 0.99):.1f} ms")
    ratio = statistics.median(under) / statistics.median(base)
    print(f"ratio p50 under attack / baseline: {ratio:.2f}")
    print(f"slow connections' answers: {answers}; all closed {closed:.1f} s after the attack began")


if __name__ == "__main__":
    main()
