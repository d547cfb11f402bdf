"""Benchmark: a served table against the DuckDB CUBE floor, stage by stage (issue 42).

The data: the census-like file of ``_census_workload.py`` (12 regions, 350
areas, AGE 0-100, SEX, MARSTAT, TENURE, ETHNIC, ECON; 1M persons by default).
The site: the demo site's protection and rules (cell-key method, keyed seeds,
small cells shown as "less than 3", the sliver guard and the account of
published figures, the ledger), DuckDB with the data in memory and the cube
cache, as ``demo/site.toml`` serves. The workload: distinct 2- and 3-way count
tables, all records or one region (``workload``).

The floor: the same tables as one plain ``GROUP BY CUBE`` each, with the count
and the record-key sum, on the same data held in memory by DuckDB, in this
process.

Parts (``--only``):

* ``cold``: a fresh table service, the data loaded at start (``load``, as
  ``tablesafe serve`` does) or by the first table (before issue 42), then the
  first three AREA x AGE x SEX tables (AGE 0-29, 30-59, 60-100): each table's
  seconds, its tabulation and its admission.
* ``stages``: one table at a time through the table service in this process
  (no HTTP), each stage timed (wall and the thread's CPU): the request checked,
  the tabulation, the protection, the rules on the table's own figures, the
  admission (the account of published figures and the ledger in one
  transaction of the state store, the figures included), the noisy figures for
  the ledger, the JSON written, the audit row. Printed as milliseconds per
  table, each stage's share, and its ratio to the floor's table (the same
  tables one at a time).
* ``served``: ``tablesafe serve`` in its own process on loopback, ``--clients``
  clients (16) each asking ``--tables`` (8) distinct tables at once; throughput
  and p50/p99 latency against the floor asked by as many threads of this
  process in the same round. Rounds alternate (floor, served); each round asks
  tables not asked before (the account grows as a site's does).

Usage:
    python benchmarks/bench_served.py [--records 1000000] [--only stages,served]
        [--rounds 3] [--clients 16] [--tables 8] (--only stages,cold,served)
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _census_workload import VARIABLES, census, workload

SECRET = "served-benchmark-secret-0123456789abcdef"
RULES = {
    "max_dimensions": 3,
    "min_universe_size": 50,
    "min_cell_size": 3,
    "small_cell_action": "show_less_than",
    "max_cells": 2000,
    "query_timeout_seconds": 60,
    "sliver_min_difference": 10,
}


def site_text(folder: Path, tmp: Path) -> str:
    """The demo site's protection and rules over the census-like file."""
    (tmp / "secret").write_text(SECRET)
    rules = "\n".join(f"{k} = {json.dumps(v)}" for k, v in RULES.items())
    return f"""
[server]
title = "served benchmark"
audit_db = "{tmp / "state.sqlite"}"
rate_limit_per_minute = 1000000

[engine]
kind = "duckdb"
materialize = true

[[datasets]]
name = "census"
path = "{folder}"

[datasets.protection]
method = "ckm"
max_deviation = 3
variance = 1.0
seeds = "keyed"
secret_file = "{tmp / "secret"}"

[datasets.rules]
{rules}
"""


# -- the floor ----------------------------------------------------------------------------


class Floor:
    """The tables as plain GROUP BY CUBE queries on the data in DuckDB's memory."""

    def __init__(self, folder: Path) -> None:
        import duckdb

        self.con = duckdb.connect()
        self.con.execute(
            f"CREATE TABLE data AS SELECT * FROM read_parquet('{folder}/microdata.parquet')"
        )

    def table(self, body: dict[str, Any]) -> int:
        """Run one table's CUBE query on a cursor of its own; the rows it gave."""
        dims = ", ".join(body["dimensions"])
        where, params = "", []
        for var, codes in body.get("universe", {}).items():
            where = f"WHERE {var} IN ({', '.join('?' * len(codes))})"
            params += list(codes)
        cur = self.con.cursor()
        try:
            rows = cur.execute(
                f"SELECT {dims}, count(*), sum(RKEY) FROM data {where} GROUP BY CUBE ({dims})",
                params,
            ).fetchall()
        finally:
            cur.close()
        return len(rows)


# -- stages -------------------------------------------------------------------------------


class Stages:
    """Wall and thread CPU time per stage (nested stages are subtracted from their parent)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self._stack: list[list[float]] = []

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as ``name`` (less the stages timed inside it)."""
        inner = [0.0, 0.0]
        self._stack.append(inner)
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            w, c = time.perf_counter() - w0, time.thread_time() - c0
            self._stack.pop()
            self.wall[name] += w - inner[0]
            self.cpu[name] += c - inner[1]
            if self._stack:
                self._stack[-1][0] += w
                self._stack[-1][1] += c

    def wrap(self, obj: Any, attr: str, name: str) -> None:
        """Time every call of ``obj.attr`` as the stage ``name``."""
        original = getattr(obj, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.stage(name):
                return original(*args, **kwargs)

        setattr(obj, attr, timed)


def _service(site: Path) -> Any:
    from tablesafe._settings import load_site_config
    from tablesafe.service._service import TableService

    return TableService(load_site_config(site))


def stages_part(folder: Path, site: Path, count: int) -> None:
    from tablesafe._errors import RefusedError
    from tablesafe.output._formats import output_format
    from tablesafe.service._bodies import TableBody
    from tablesafe.service._service import Principal

    svc = _service(site)
    served = svc.served("census")
    stages = Stages()
    builder = served.builder
    admission = builder.admission
    stages.wrap(builder, "bind", "request checked and bound")
    stages.wrap(builder, "prepare", "tabulation")
    stages.wrap(builder, "_protect", "protection")
    stages.wrap(admission, "ruled", "rules on the table alone")
    stages.wrap(admission, "_universe_size", "rules on own figures")
    stages.wrap(admission, "_risk_ceiling", "rules on own figures")
    stages.wrap(admission, "_account_and_ledger", "account and ledger (one transaction)")
    stages.wrap(admission, "figures", "noisy figures (ledger's)")
    stages.wrap(admission, "refused_before", "ceiling's stored refusals")
    stages.wrap(svc, "alternatives", "a refusal's passing alternatives")
    fmt = output_format("json", served=True)
    assert fmt.stream is not None
    bodies = workload(count + 16, seed=7)
    floor = Floor(folder)
    totals = [0.0, 0.0]

    def ask(i: int, body: dict[str, Any]) -> None:
        who = Principal(f"client{i % 16}", "user", 10**9)
        status, outcome = 200, "answered"
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            with stages.stage("service, other"):
                table = svc.table(who, "census", TableBody(**body).to_request())
            with stages.stage("JSON written"):
                b"".join(fmt.stream(table))
        except RefusedError as exc:
            status, outcome = 403, f"RefusedError: {exc}"
        with stages.stage("audit row"):
            svc.state.record(
                key_id=who.id,
                endpoint="POST /api/datasets/census/tables",
                status=status,
                outcome=outcome,
                dataset="census",
                request={**body, "format": "json"},
                client="127.0.0.1",
            )
        totals[0] += time.perf_counter() - w0
        totals[1] += time.thread_time() - c0

    for i, body in enumerate(bodies[count:]):  # the first tables of a site (cold start)
        ask(i, body)
    stages.wall.clear()
    stages.cpu.clear()
    totals[:] = [0.0, 0.0]
    load0 = os.getloadavg()[0]
    for i, body in enumerate(bodies[:count]):
        ask(i, body)
    fw, fc = 0.0, 0.0
    for body in bodies[:count]:
        w0, c0 = time.perf_counter(), time.thread_time()
        floor.table(body)
        fw += time.perf_counter() - w0
        fc += time.thread_time() - c0
    svc.close()
    total_w, total_c = totals
    print(
        f"\nstages: {count} distinct tables one at a time, load {load0:.1f} -> "
        f"{os.getloadavg()[0]:.1f}; ms per table (wall, this thread's CPU)"
    )
    print(f"{'stage':38} {'wall':>7} {'CPU':>7} {'share':>6} {'x floor':>8}")
    floor_ms = 1000 * fw / count
    for name in sorted(stages.wall, key=lambda n: -stages.wall[n]):
        w, c = 1000 * stages.wall[name] / count, 1000 * stages.cpu[name] / count
        print(f"{name:38} {w:7.2f} {c:7.2f} {w / (1000 * total_w / count):6.1%} "
              f"{w / floor_ms:8.2f}")  # fmt: skip
    table_ms = 1000 * total_w / count
    print(f"{'served table, all stages':38} {table_ms:7.2f} "
          f"{1000 * total_c / count:7.2f} {1:6.1%} {table_ms / floor_ms:8.2f}")  # fmt: skip
    print(f"{'floor: GROUP BY CUBE, in memory':38} {floor_ms:7.2f} {1000 * fc / count:7.2f}")
    print("(the floor's CPU is this thread's only: DuckDB's own threads are not counted)")


# -- cold start ---------------------------------------------------------------------------


def cold_part(folder: Path, tmp: Path) -> None:
    """The first AREA x AGE x SEX tables of a fresh site, with the data loaded at start or not."""
    from tablesafe.output._formats import output_format
    from tablesafe.service._bodies import TableBody
    from tablesafe.service._service import Principal

    fmt = output_format("json", served=True)
    assert fmt.stream is not None
    bands = [range(0, 30), range(30, 60), range(60, 101)]
    print("\ncold start: the first AREA x AGE x SEX tables (AGE 0-29, 30-59, 60-100), seconds")
    for loaded in (False, True):
        where = tmp / f"cold-{loaded}"
        where.mkdir()
        site = where / "site.toml"
        site.write_text(site_text(folder, where).replace("max_cells = 2000", "max_cells = 200000"))
        t0 = time.perf_counter()
        svc = _service(site)
        if loaded:
            svc.load()
        ready = time.perf_counter() - t0
        stages = Stages()
        builder = svc.served("census").builder
        stages.wrap(builder, "prepare", "tabulation")
        stages.wrap(builder.admission, "_account_and_ledger", "admission")
        line = []
        for ages in bands:
            stages.wall.clear()
            body = TableBody(
                dimensions=["AREA", "AGE", "SEX"], universe={"AGE": list(ages)}, statistic="count"
            )
            t = time.perf_counter()
            table = svc.table(Principal("c", "user", 10**9), "census", body.to_request())
            b"".join(fmt.stream(table))
            line.append(
                f"{time.perf_counter() - t:.2f} (tabulation {stages.wall['tabulation']:.2f}, "
                f"admission {stages.wall['admission']:.2f})"
            )
        svc.close()
        what = "loaded at start" if loaded else "loaded by the first table"
        print(f"  {what}: ready {ready:.1f}; tables {'; '.join(line)}; load "
              f"{os.getloadavg()[0]:.1f}")  # fmt: skip


# -- served -------------------------------------------------------------------------------


def _serve(site: Path, log: Path) -> tuple[subprocess.Popen[bytes], int, float]:
    """``tablesafe serve`` on a free port; its port and the seconds until it answered."""
    t0 = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "tablesafe", "serve", "--config", str(site), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=log.open("wb"),
        env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    )
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 600)
    line = process.stdout.readline() if ready else b""
    found = re.search(rb":(\d+)/", line)
    if not found:
        process.kill()
        raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")
    port = int(found.group(1))
    while True:
        con = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        con.request("GET", "/readyz")
        answer = con.getresponse()
        answer.read()
        if answer.status == 200:
            return process, port, time.perf_counter() - t0
        time.sleep(0.1)


def _round(ask: Callable[[int, dict[str, Any]], bool], bodies: list[list[dict[str, Any]]]) -> dict:
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()

    def client(c: int) -> None:
        for body in bodies[c]:
            t0 = time.perf_counter()
            ok = ask(c, body)
            with lock:
                latencies.append(time.perf_counter() - t0)
                errors[0] += not ok

    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat = sorted(latencies)
    return {
        "tables/s": len(lat) / wall,
        "p50 s": statistics.median(lat),
        "p99 s": lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "not 200": errors[0],
        "load": f"{load:.1f}->{os.getloadavg()[0]:.1f}",
    }


def _http_ask(port: int) -> Callable[[int, dict[str, Any]], bool]:
    local = threading.local()

    def ask(c: int, body: dict[str, Any]) -> bool:
        con = getattr(local, "con", None)
        if con is None:
            con = local.con = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        con.request(
            "POST",
            "/api/datasets/census/tables?format=json",
            json.dumps(body),
            {"content-type": "application/json", "x-forwarded-for": f"10.0.0.{c}"},
        )
        answer = con.getresponse()
        answer.read()
        return answer.status == 200

    return ask


def served_part(
    folder: Path, site: Path, tmp: Path, rounds: int, clients: int, tables: int
) -> None:
    floor = Floor(folder)
    process, port, started = _serve(site, tmp / "serve.log")
    print(f"\nserved: ready (/readyz) {started:.1f} s after start")
    try:
        ask = _http_ask(port)
        # The first tables of the site (cold start), then the rounds.
        first = workload(clients, seed=1000)
        cold = _round(ask, [[b] for b in first])
        print(f"  the first {clients} tables at once: p50 {cold['p50 s']:.3f} s, "
              f"p99 {cold['p99 s']:.3f} s")  # fmt: skip
        print(f"  {'round':>5} {'what':8} {'tables/s':>9} {'p50 s':>7} {'p99 s':>7} "
              f"{'not 200':>7}  load")  # fmt: skip
        results: dict[str, list[dict]] = {"floor": [], "served": []}
        for r in range(rounds):
            flat = workload(clients * tables, seed=r + 1)
            bodies = [flat[c::clients] for c in range(clients)]
            for what, fn in (("floor", lambda c, b: floor.table(b) >= 0), ("served", ask)):
                res = _round(fn, bodies)
                results[what].append(res)
                print(f"  {r + 1:5} {what:8} {res['tables/s']:9.1f} {res['p50 s']:7.3f} "
                      f"{res['p99 s']:7.3f} {res['not 200']:7}  {res['load']}")  # fmt: skip
        f, s = results["floor"], results["served"]
        tput = [b["tables/s"] / a["tables/s"] for a, b in zip(f, s, strict=True)]
        p99 = [b["p99 s"] / a["p99 s"] for a, b in zip(f, s, strict=True)]
        print(f"  served / floor, per round: throughput {', '.join(f'{x:.2f}x' for x in tput)}; "
              f"p99 {', '.join(f'{x:.1f}x' for x in p99)}")  # fmt: skip
    finally:
        process.terminate()
        process.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--only", default="stages,cold,served")
    ap.add_argument("--count", type=int, default=128, help="tables of the stages part")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--tables", type=int, default=8)
    args = ap.parse_args()
    folder = census(args.records)
    parts = set(args.only.split(","))
    print(f"{args.records:,} persons ({', '.join(VARIABLES)}, AREA); 2-3-way count tables")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if "stages" in parts:
            (tmp / "stages").mkdir()
            site = tmp / "stages" / "site.toml"
            site.write_text(site_text(folder, tmp / "stages"))
            stages_part(folder, site, args.count)
        if "cold" in parts:
            cold_part(folder, tmp)
        if "served" in parts:
            (tmp / "served").mkdir()
            site = tmp / "served" / "site.toml"
            site.write_text(site_text(folder, tmp / "served"))
            served_part(folder, site, tmp, args.rounds, args.clients, args.tables)


if __name__ == "__main__":
    main()
