"""The account of every published figure at scale: its check with a million recorded figures.

Part 1 writes random tables' figures (1 to 3 dimensions, universes of 0
to 2 conditions, some custom groupings; the demo survey, ``--records``,
200,000 by default) into the account until it holds ``--stored`` distinct
figures (1,000,000), restarts the service (which reads the account once),
then times the admission's transaction (reading the rows committed since,
the decision, the writes, the ledger) for ``--probe`` more requests through
the table service: wall and CPU time, p50 and p99, and the ratio to the
baseline measured in this process, the same requests' tables built
(tabulation, protection) without it.

Part 2 answers ``--tables`` random tables (2,000) on ``--small-records``
(20,000), then asks every answered one again, in another order, after a
restart of the service, and counts the answers refused or changed.

Targets (issue 37): p99 under 50 ms with 1,000,000 recorded figures; every
answered table answered again with the same bytes.

Usage: python benchmarks/bench_guard.py [--records 200000] [--stored 1000000] [--probe 300]
       [--tables 2000] [--small-records 20000] [--part 1|2|both]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import tablesafe.service._service as service_module
from tablesafe._errors import RefusedError, RequestError
from tablesafe._settings import load_site_config
from tablesafe.catalog._dataset import Dataset
from tablesafe.rules._admit import Admission
from tablesafe.service import Principal
from tablesafe.service._bodies import TableBody

DATA = Path(__file__).parent / "_data"
SECRET_ENV = "TS_BENCH_GUARD_SECRET"
os.environ.setdefault(SECRET_ENV, "bench-guard-secret-0123456789abcdef")


def demo(records: int) -> Path:
    from tablesafe.prepare._demo import write_demo_data

    folder = DATA / f"demo_{records}"
    if not (folder / "catalog.toml").exists():
        write_demo_data(folder, records, seed=2026)
    return folder


def site(folder: Path, tmp: Path) -> Any:
    return load_site_config(
        data={
            "base": str(tmp),
            "server": {"title": "bench", "audit_db": "state.sqlite", "cache_tables": 0},
            "datasets": [
                {
                    "name": "demo",
                    "path": str(folder),
                    "protection": {"method": "ckm", "seeds": "keyed", "secret_env": SECRET_ENV},
                    "rules": {
                        "min_universe_size": 20,
                        "sliver_min_difference": 10,
                        # The admission alone: a refusal's alternatives are dry runs
                        # of other tables (benchmarks/bench_alternatives.py).
                        "alternatives_max_dry_runs": 0,
                        "max_cells": 20_000,
                    },
                }
            ],
        }
    )


def random_requests(folder: Path, rng: np.random.Generator, count: int) -> list[dict]:
    """Tables a busy site gets: 1 to 3 dimensions, 0 to 2 conditions, some custom groupings."""
    catalog = Dataset.open(folder).catalog
    names = ["REGION", "SEX", "AGEGRP", "AGE5", "MARSTAT", "EDUC", "EMPSTAT", "TENURE", "HHSIZE",
             "OCC"]  # fmt: skip
    out = []
    for _ in range(count):
        dims = [str(d) for d in rng.choice(names, size=int(rng.integers(1, 4)), replace=False)]
        if {"AGEGRP", "AGE5"} <= set(dims):
            continue
        body: dict = {"dimensions": dims, "statistic": "count"}
        universe = {}
        for var in rng.choice([n for n in names if n not in dims], size=int(rng.integers(0, 3)),
                              replace=False):  # fmt: skip
            codes = list(catalog.variable(str(var)).codes)
            keep = rng.choice(len(codes), size=int(rng.integers(1, len(codes) + 1)), replace=False)
            universe[str(var)] = [codes[int(i)] for i in sorted(keep)]
        if universe:
            body["universe"] = universe
        if rng.random() < 0.1 and "EDUC" not in dims and "EDUC" not in universe:
            groups = [
                {"code": "low", "label": "low", "members": [1, 2]},
                {"code": "high", "label": "high", "members": [5, 6]},
            ]
            body["groupings"] = [
                {"name": "G", "variable": "EDUC", "groups": groups, "other": "other"}
            ]
            body["dimensions"] = [*dims[:2], "G"]
        out.append(body)
    return out


def _ask(service: Any, who: Principal, body: dict) -> tuple[int, bytes]:
    try:
        return 200, service.table(who, "demo", TableBody(**body).to_request()).to_csv().encode()
    except RefusedError:
        return 403, b""
    except RequestError:
        return 400, b""


def fill(service: Any, folder: Path, rng: np.random.Generator, target: int) -> int:
    """Publish random tables' figures straight into the account until it holds ``target``.

    Each table is built as the service builds it (its plan, exact aggregates
    and figures) and its figures are written to the state store's account in
    one transaction, without the check: a site's history, reached in minutes
    rather than hours. Returns the tables written.
    """
    from tablesafe.rules._account import table_figures

    served = service.served("demo")
    builder = served.builder
    identity = service.identity("demo")
    written, t0 = 0, time.perf_counter()
    while _distinct(service) < target:
        for body in random_requests(folder, rng, 200):
            try:
                prepared = builder.prepare(TableBody(**body).to_request())
            except (RefusedError, RequestError):
                continue
            computed, zero = builder.cells(prepared)
            figures = table_figures(
                prepared.plan, prepared.aggregates, builder.definition_space, computed & ~zero
            )
            with service.guard.transaction(identity) as tx:
                rows = [(f.digest, f.text) for f in figures]
                tx.publish("*", "history", rows)
            written += 1
        print(f"  {written:,} tables written, {_distinct(service):,} figures, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip
    return written


def part1(args: argparse.Namespace) -> None:
    folder = demo(args.records)
    rng = np.random.default_rng(37)
    times: list[tuple[float, float]] = []
    # The account and the ledger in their transaction: the admission's step 6.
    original = Admission._account_and_ledger

    def timed(self: Any, *a: Any, **k: Any) -> Any:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return original(self, *a, **k)
        finally:
            times.append((time.perf_counter() - t0, time.process_time() - c0))

    with tempfile.TemporaryDirectory() as tmp:
        config = site(folder, Path(tmp))
        service = service_module.TableService(config)
        fill(service, folder, rng, args.stored)
        service.close()
        # A restart, as a server's: the account read once before the first table.
        service = service_module.TableService(config)
        t0, c0 = time.perf_counter(), time.process_time()
        held = service.warm_accounts()
        warm = (time.perf_counter() - t0, time.process_time() - c0)
        who = Principal("bench", "user", 10**9)
        probes = random_requests(folder, rng, args.probe)
        Admission._account_and_ledger = timed  # type: ignore[method-assign]
        try:
            for body in probes:
                _ask(service, who, body)
        finally:
            Admission._account_and_ledger = original  # type: ignore[method-assign]
        checks = list(times)
        base = []
        builder = service.served("demo").builder
        for body in probes:
            t0, c0 = time.perf_counter(), time.process_time()
            with contextlib.suppress(RefusedError, RequestError):
                # The table's path without what was published (no state store).
                builder.replay(TableBody(**body).to_request())
            base.append((time.perf_counter() - t0, time.process_time() - c0))
        service.close()
    print(f"demo {args.records:,} records; {held:,} figures recorded (read at start: "
          f"{warm[0]:.1f} s, CPU {warm[1]:.1f} s); {len(checks)} probes")  # fmt: skip
    for name, at in (("wall", 0), ("CPU", 1)):
        check = np.array([c[at] for c in checks]) * 1e3
        b50 = statistics.median(b[at] for b in base) * 1e3
        p50, p99 = np.percentile(check, 50), np.percentile(check, 99)
        print(f"{name}: admission (catch-up, decision, writes, ledger) p50 {p50:.1f} ms, "
              f"p99 {p99:.1f} ms, max {check.max():.1f} ms; the table built without it "
              f"p50 {b50:.1f} ms; p99 / built p50 {p99 / b50:.2f}")  # fmt: skip


def _distinct(service: Any) -> int:
    with service.state._connection() as sql:
        return int(sql.execute("SELECT COUNT(DISTINCT digest) FROM publications").fetchone()[0])


def _stored(service: Any) -> int:
    with service.state._connection() as sql:
        return int(sql.execute("SELECT COUNT(*) FROM publications").fetchone()[0])


def part2(args: argparse.Namespace) -> None:
    folder = demo(args.small_records)
    rng = np.random.default_rng(26)
    bodies = random_requests(folder, rng, args.tables)
    with tempfile.TemporaryDirectory() as tmp:
        config = site(folder, Path(tmp))
        service = service_module.TableService(config)
        keys = [Principal(f"k{i % 3}", "user", 10**9) for i in range(len(bodies))]
        first = [_ask(service, k, b) for k, b in zip(keys, bodies, strict=True)]
        service.close()
        answered = [i for i, (status, _) in enumerate(first) if status == 200]
        service = service_module.TableService(config)  # a restart: the same store
        order = list(rng.permutation(answered))
        again = {i: _ask(service, keys[(i + 1) % len(keys)], bodies[i]) for i in order}
        service.close()
    changed = sum(again[i] != first[i] for i in answered)
    digest = hashlib.sha256(b"".join(first[i][1] for i in answered)).hexdigest()[:12]
    print(f"demo {args.small_records:,} records; {len(bodies):,} tables: {len(answered):,} "
          f"answered; asked again after a restart, another key, another order: "
          f"{changed} changed or refused; digest {digest}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--stored", type=int, default=1_000_000)
    parser.add_argument("--probe", type=int, default=300)
    parser.add_argument("--tables", type=int, default=2_000)
    parser.add_argument("--small-records", type=int, default=20_000)
    parser.add_argument("--part", default="both", choices=["1", "2", "both"])
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    if args.part in ("1", "both"):
        part1(args)
    if args.part in ("2", "both"):
        part2(args)


if __name__ == "__main__":
    main()
