"""Load test of the served table builder (loopback only, bounded in time).

Serves the demo survey (1,000,000 records by default) with the demo
protection (cell-key method, keyed seeds) in a separate process, then runs
16 concurrent clients for 60 seconds, each asking for 2-way tables (random
pairs of variables, universes: all records or one region), and reports
throughput, p50/p99 latency and errors. The baseline, measured in this
process first, is the same requests answered by the table service directly
(no HTTP), uncached; the ratio shows what HTTP, JSON and concurrency add.

Targets (issue 8): 0 errors, p99 under 500 ms, at least 50 tables per second
on 2 cores.

Usage: python benchmarks/bench_server.py [--records 1000000] [--clients 16] [--seconds 60]

``--state`` measures instead what the state store costs per request
(issue 31): PostgreSQL against SQLite, both in this process, alternating in
rounds. First the state work of one table request alone (the revoked-key
check, the rate-limit count, the sliver guard's transaction with a 2-way
table's record sets, the audit row), then whole requests through the
application in process (the gate, the table service uncached, the guard).
PostgreSQL is a throwaway cluster started as the tests start theirs
(tests/_postgres.py), or ``--postgres URL``.

``--job`` builds a 400,000-cell table (AREA x AGE x SEX x ETHNIC on the
10M-person census-like data of bench_census.py) as a job and directly, and
reports time, peak memory and whether the CSVs are the same bytes;
``--writer`` the memory the CSV writer adds for 36,000 to 1,250,000 cells;
``--replicas`` tables per second and p50/p99 of 1 and 2 replicas on one
PostgreSQL under ``--clients`` clients (benchmarks/_serving.py), with, per
round, the cores used by the replicas, PostgreSQL, the clients and the rest
of the machine, the connection pool's waits, and per table the time waiting
for the guard's lock (in the replica, then in PostgreSQL) against the time
holding it (benchmarks/_replica.py). ``--concurrent-tables N`` sets the
replicas' ``[server] concurrent_tables``; ``--pipelined-guard`` runs them with
a prototype of the guard transaction that waits for PostgreSQL twice instead
of five times (benchmarks/_replica.py; for measuring, not serving).
``--configurations 0 2 2p`` compares configurations in one run, each with
two replicas of its own, rounds alternating (``N``: concurrent_tables = N;
``Np``: and the prototype).
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from tablesafe.prepare._demo import write_demo_data

DATA = Path(__file__).parent / "_data"
VARIABLES = ["REGION", "SEX", "AGEGRP", "MARSTAT", "HHSIZE", "EDUC", "EMPSTAT", "TENURE"]


def requests_pool(seed: int = 1, size: int = 400) -> list[dict]:
    rng = random.Random(seed)
    pool = []
    for _ in range(size):
        a, b = rng.sample(VARIABLES, 2)
        universe = {} if rng.random() < 0.5 else {"REGION": [rng.randint(1, 8)]}
        if "REGION" in (a, b):
            universe = {}
        pool.append({"dimensions": [a, b], "universe": universe, "statistic": "both"})
    return pool


def site_file(folder: Path, data_dir: Path) -> Path:
    secret = folder / "secret"
    secret.write_text("0123456789abcdef" * 4)
    path = folder / "site.toml"
    path.write_text(
        f"""
[server]
audit_db = "{folder / "audit.sqlite"}"
rate_limit_per_minute = 1000000

[[datasets]]
name = "demo"
path = "{data_dir}"

[datasets.protection]
method = "ckm"
seeds = "keyed"
secret_file = "{secret}"

[datasets.rules]
min_cell_size = 3
small_cell_action = "show_less_than"
"""
    )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def baseline(config: Path, pool: list[dict]) -> float:
    from tablesafe._settings import load_site_config
    from tablesafe.server import TableBody, TableService
    from tablesafe.service import Principal

    site = load_site_config(config)
    service = TableService(
        site.model_copy(update={"server": site.server.model_copy(update={"cache_tables": 0})})
    )
    who = Principal("bench", "user", 10**9)
    for body in pool[:5]:
        service.table(who, "demo", TableBody(**body).to_request())
    t0 = time.perf_counter()
    n = 0
    for body in pool[:100]:
        service.table(who, "demo", TableBody(**body).to_request()).to_json()
        n += 1
    service.close()
    return (time.perf_counter() - t0) / n


def _state_ops(store, sets: list, rounds: int) -> list[float]:
    """Seconds of each request's state work: key check, rate count, guard, audit row."""
    out = []
    for i in range(rounds):
        t0 = time.perf_counter()
        store.revoked("sha256:" + "0" * 64)
        store.hit("bench", 10**9)
        with store.transaction("bench-identity") as tx:
            # A new table's figures each time (other digests), as a busy site writes.
            tx.publications("*", 10**12)
            salt = int.from_bytes(os.urandom(7), "little")
            tx.publish("bench", "bench", [(d ^ salt, t) for d, t in sets])
        store.record(key_id="bench", endpoint="POST /api/datasets/demo/tables", status=200,
                     outcome="ok", dataset="demo", request={"i": i})  # fmt: skip
        out.append(time.perf_counter() - t0)
    return out


def _requests_through_app(app, pool: list[dict]) -> list[float]:
    """Seconds of each table request through the application in process (gate, service, guard)."""
    from fastapi.testclient import TestClient

    out = []
    with TestClient(app) as c:
        for body in pool[:5]:
            c.post("/api/datasets/demo/tables", json=body)
        for body in pool[5:205]:
            t0 = time.perf_counter()
            c.post("/api/datasets/demo/tables", json=body)
            out.append(time.perf_counter() - t0)
    return out


def state_cost(args: argparse.Namespace, data_dir: Path, pool: list[dict]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from _postgres import Cluster, binaries
    from tablesafe._settings import load_site_config
    from tablesafe.server import create_app
    from tablesafe.state import PostgresState, SQLiteState

    cluster = None if args.postgres else Cluster(binaries()).start()
    url = args.postgres or cluster.database()
    sets = [_bench_figure(i) for i in range(27)]  # a 2-way table's cells and margins
    times: dict[str, list[float]] = {"sqlite": [], "postgresql": [], "app sqlite": [],
                                     "app postgresql": []}  # fmt: skip
    try:
        with tempfile.TemporaryDirectory() as tmp:
            stores = {"sqlite": SQLiteState(Path(tmp) / "state.sqlite"),
                      "postgresql": PostgresState(url)}  # fmt: skip
            site = load_site_config(site_file(Path(tmp), data_dir.resolve()))
            server = site.server.model_copy(update={"cache_tables": 0})
            state = site.state.model_copy(update={"url": url})
            sites = {
                "sqlite": site.model_copy(update={"server": server}),
                "postgresql": site.model_copy(update={"server": server, "state": state}),
            }
            for _ in range(args.rounds):
                for name, store in stores.items():
                    times[name] += _state_ops(store, sets, 300)
                    times["app " + name] += _requests_through_app(create_app(sites[name]), pool)
            for store in stores.values():
                store.close()
    finally:
        if cluster is not None:
            cluster.stop()
    _report_state(args, times)


def _report_state(args: argparse.Namespace, times: dict[str, list[float]]) -> None:
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"records {args.records:,}, {args.rounds} rounds alternating, medians per request")
    print(
        f"state work of one table request: SQLite {med['sqlite'] * 1e6:.0f} us, PostgreSQL "
        f"{med['postgresql'] * 1e6:.0f} us, ratio {med['postgresql'] / med['sqlite']:.2f}"
    )
    print(f"whole table request in process: SQLite {med['app sqlite'] * 1e3:.1f} ms, PostgreSQL "
          f"{med['app postgresql'] * 1e3:.1f} ms, "
          f"ratio {med['app postgresql'] / med['app sqlite']:.2f}")  # fmt: skip


def _bench_figure(i: int) -> tuple[int, str]:
    """A published figure as the state store keeps it: (digest, definition)."""
    return (i, f'[["AGEGRP",[{i % 8}]],["SEX",[{i % 2 + 1}]]]')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--state", action="store_true", help="PostgreSQL state against SQLite")
    parser.add_argument("--postgres", default=None, help="--state: a database URL to use")
    parser.add_argument("--rounds", type=int, default=5, help="--state: alternating rounds")
    parser.add_argument("--job", action="store_true", help="a 400,000-cell table as a job")
    parser.add_argument("--census", type=int, default=10_000_000, help="--job: persons")
    parser.add_argument("--writer", action="store_true", help="the CSV writer's memory")
    parser.add_argument("--replicas", action="store_true", help="1 and 2 replicas on PostgreSQL")
    parser.add_argument("--no-guard", action="store_true", help="--replicas: sliver guard off")
    parser.add_argument(
        "--concurrent-tables", type=int, default=0, help="--replicas: [server] concurrent_tables"
    )
    parser.add_argument(
        "--configurations",
        nargs="+",
        default=None,
        help="--replicas: compare these, each N (concurrent_tables) or Np (and pipelined)",
    )
    parser.add_argument(
        "--pipelined-guard",
        action="store_true",
        help="--replicas: the guard transaction's prototype of benchmarks/_replica.py",
    )
    args = parser.parse_args()
    if args.job or args.writer:
        from _serving import job_benchmark, writer_memory

        if args.job:
            job_benchmark(args.census)
        if args.writer:
            writer_memory(args.census)
        return

    data_dir = DATA / f"demo_{args.records}"
    if not (data_dir / "catalog.toml").exists():
        write_demo_data(data_dir, args.records, seed=1, replicates=0)
    pool = requests_pool()
    if args.state:
        state_cost(args, data_dir, pool)
        return
    if args.replicas:
        from _serving import replicas_benchmark

        if args.pipelined_guard:  # read by the replicas (benchmarks/_replica.py)
            os.environ["TABLESAFE_BENCH_PIPELINED"] = "1"

        with tempfile.TemporaryDirectory() as tmp:
            text = site_file(Path(tmp), data_dir.resolve()).read_text()
            server = "[server]\ncache_tables = 0\naccess_log = false"
            server += f"\nconcurrent_tables = {args.concurrent_tables}"
            text = text.replace("[server]", server, 1)
            if args.no_guard:
                rules = "[datasets.rules]"
                text = text.replace(rules, rules + "\nsliver_min_difference = 0")
            if args.configurations:
                from _serving import configurations_benchmark

                text = text.replace(f"\nconcurrent_tables = {args.concurrent_tables}", "")
                configurations_benchmark(
                    text, pool, args.clients, args.seconds, args.rounds, args.configurations
                )
                return
            replicas_benchmark(text, pool, args.clients, args.seconds, args.rounds)
        return
    with tempfile.TemporaryDirectory() as tmp:
        config = site_file(Path(tmp), data_dir.resolve())
        direct = baseline(config, pool)
        print(f"baseline: table service in process, uncached: {direct * 1000:.1f} ms per table")

        port = free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tablesafe._cli",
                "serve",
                "--config",
                str(config),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
            env={**os.environ},
        )
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                try:
                    if httpx.get(f"{url}/api/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            latencies: list[float] = []
            errors: list[str] = []
            lock = threading.Lock()
            stop = time.monotonic() + args.seconds

            def client(i: int) -> None:
                rng = random.Random(i)
                with httpx.Client(base_url=url, timeout=30) as c:
                    while time.monotonic() < stop:
                        body = rng.choice(pool)
                        t0 = time.perf_counter()
                        try:
                            r = c.post("/api/datasets/demo/tables", json=body)
                            ok = r.status_code == 200
                            msg = f"{r.status_code}: {r.text[:120]}"
                        except httpx.HTTPError as exc:
                            ok, msg = False, repr(exc)
                        dt = time.perf_counter() - t0
                        with lock:
                            latencies.append(dt)
                            if not ok:
                                errors.append(msg)

            t_start = time.perf_counter()
            threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t_start
        finally:
            server.terminate()
            server.wait(timeout=30)
    lat = sorted(latencies)
    p50 = statistics.median(lat)
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    print(f"records {args.records:,}, clients {args.clients}, {wall:.0f} s")
    print(f"requests {len(lat)}, throughput {len(lat) / wall:.1f} tables/s, errors {len(errors)}")
    print(f"latency p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
    print(f"ratio p50 / in-process baseline: {p50 / direct:.2f}")
    for e in errors[:5]:
        print("error:", e)


if __name__ == "__main__":
    main()
