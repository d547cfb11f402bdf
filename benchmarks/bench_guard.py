"""The account of every published figure at scale: its check with a million recorded figures.

Part 1 answers random tables (1 to 3 dimensions, universes of 0 to 2
conditions, some custom groupings) on the demo survey (``--records``,
200,000 by default) through the table service until the account holds
``--stored`` figures (1,000,000), then times the admission's transaction
(reading the rows committed since, the decision, the writes, the ledger)
for ``--probe`` more requests: p50 and p99, and the ratio to the baseline
measured in this process, the same requests' tables built (tabulation,
protection) without it.

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

import tablesafe.server._service as service_module
from tablesafe._errors import RefusedError, RequestError
from tablesafe._settings import load_site_config
from tablesafe.catalog._dataset import Dataset
from tablesafe.server._auth import Principal
from tablesafe.server._bodies import TableBody

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


def part1(args: argparse.Namespace) -> None:
    folder = demo(args.records)
    rng = np.random.default_rng(37)
    times: list[float] = []
    original = service_module.TableService._admit

    def timed(self: Any, *a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(self, *a, **k)
        finally:
            times.append(time.perf_counter() - t0)

    with tempfile.TemporaryDirectory() as tmp:
        service = service_module.TableService(site(folder, Path(tmp)))
        who = Principal("bench", "user", 10**9)
        service_module.TableService._admit = timed  # type: ignore[method-assign]
        try:
            t0, asked = time.perf_counter(), 0
            while _stored(service) < args.stored:
                for body in random_requests(folder, rng, 200):
                    _ask(service, who, body)
                    asked += 1
                print(f"  {asked:,} tables, {_stored(service):,} figures recorded, "
                      f"{time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip
            probes = random_requests(folder, rng, args.probe)
            times.clear()
            for body in probes:
                _ask(service, who, body)
            checks = list(times)
        finally:
            service_module.TableService._admit = original  # type: ignore[method-assign]
        base = []
        builder = service.served("demo").builder
        for body in probes:
            t0 = time.perf_counter()
            with contextlib.suppress(RefusedError, RequestError):
                builder.run(builder.check(TableBody(**body).to_request()))
            base.append(time.perf_counter() - t0)
        stored = _stored(service)
        service.close()
    p50, p99 = np.percentile(checks, 50) * 1e3, np.percentile(checks, 99) * 1e3
    b50 = statistics.median(base) * 1e3
    print(f"demo {args.records:,} records; {stored:,} figures recorded; {len(checks)} probes")
    print(f"admission (catch-up, decision, writes, ledger): p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
          f"max {max(checks) * 1e3:.1f} ms")  # fmt: skip
    print(f"baseline (the table built, no admission): p50 {b50:.1f} ms; p99 / baseline p50 "
          f"{p99 / b50:.2f}")  # fmt: skip


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
