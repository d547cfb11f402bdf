"""The sliver guard at scale: its check with 100,000 stored record sets, and repeats.

Part 1 answers random tables (1 to 3 dimensions, universes of 0 to 3
conditions, some custom groupings) on the demo survey (``--records``,
200,000 by default) through the table service until the guard's store holds
``--stored`` record sets (100,000), then times the guard's transaction
(reading new rows, the check, the write) for ``--probe`` more requests:
p50 and p99, and the ratio to the baseline measured in this process, the
same requests' tables built without the guard (tabulation, protection,
record sets and their key sketches).

Part 2 answers ``--tables`` random tables (10,000) on ``--small-records``
(20,000), then asks every answered one again, in another order, after a
restart of the service, and counts the answers refused or changed.

Targets (issue 25): p99 under 50 ms with 100,000 stored sets; after 10,000
answered tables, every one answered again with the same bytes.

With ``--profile``, part 1 also prints, for its 10 slowest checks, the
thread CPU time spent in the guard's steps (the candidate search, the pairs,
the families, their folds, their atoms and counts, the exact intersections)
the privacy ledger's check and catch-up, the state store's reads and writes, and in the
collector: what docs/benchmarks.md calls profiles of the slowest checks. With
``--functions``, it prints the 10 slowest guard transactions by function (cProfile).

Usage: python benchmarks/bench_guard.py [--records 200000] [--stored 100000] [--probe 300]
       [--tables 10000] [--small-records 20000] [--part 1|2|both] [--profile] [--keep DIR]
       [--warm 1000] [--functions]

With ``--keep DIR``, part 1 copies its filled store to DIR, or, when DIR
holds one, starts from it as after a restart, asks ``--warm`` new requests
(1,000) so the families the probes touch are read in, then probes: versions
of the guard are compared on the same store and the same probes in minutes
(not the probes of a run that fills the store).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import pstats
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import tablesafe.rules._guard as guard
import tablesafe.rules._guard_families as families

import tablesafe.rules._ledger as ledger
import tablesafe.server._service as service_module
import tablesafe.state._store as store
from tablesafe._errors import RefusedError, RequestError
from tablesafe._settings import load_site_config
from tablesafe.catalog._dataset import Dataset
from tablesafe.prepare._demo import write_demo_data
from tablesafe.server._app import TableBody
from tablesafe.server._auth import Principal
from tablesafe.server._service import TableService

DATA = Path(__file__).parent / "_data"
NAMES = ["REGION", "SEX", "AGEGRP", "MARSTAT", "EDUC", "EMPSTAT", "TENURE", "HHSIZE", "OCC"]


def demo(records: int) -> Path:
    folder = DATA / f"demo_guard_{records}"
    if not (folder / "catalog.toml").exists():
        write_demo_data(folder, records, seed=2026)
    return folder


def requests(rng: np.random.Generator, count: int, codes: dict[str, list[Any]]) -> list[dict]:
    """Random tables a busy site gets; many are near each other."""
    out = []
    for _ in range(count):
        dims = [str(d) for d in rng.choice(NAMES, size=int(rng.integers(1, 4)), replace=False)]
        universe: dict[str, list[Any]] = {}
        for var in rng.choice(NAMES, size=int(rng.integers(0, 3)), replace=False):
            all_codes = codes[str(var)]
            keep = rng.choice(
                len(all_codes), size=int(rng.integers(1, len(all_codes) + 1)), replace=False
            )
            universe[str(var)] = [all_codes[int(i)] for i in sorted(keep)]
        if rng.random() < 0.5:
            a = int(rng.integers(0, 80))
            universe["AGE"] = list(range(a, min(91, a + int(rng.integers(3, 40)))))
        body: dict[str, Any] = {"dimensions": dims, "statistic": "count", "universe": universe}
        if rng.random() < 0.15 and "EDUC" not in dims:
            body["groupings"] = [
                {"name": "G", "variable": "EDUC", "other": "other", "groups": [
                    {"code": "low", "label": "low", "members": [1, 2]},
                    {"code": "high", "label": "high", "members": [5, 6]}]}
            ]  # fmt: skip
            body["dimensions"] = [*dims[:2], "G"]
        out.append(body)
    return out


def service(folder: Path, data_dir: Path) -> TableService:
    site = load_site_config(
        data={
            "base": str(folder),
            "server": {"title": "bench", "audit_db": "audit.sqlite", "cache_tables": 0},
            "datasets": [
                {
                    "name": "demo",
                    "path": str(data_dir),
                    "protection": {"method": "ckm"},
                    "rules": {"sliver_min_difference": 10, "max_cells": 20_000},
                }
            ],
        }
    )
    return TableService(site)


def ask(svc: TableService, body: dict, key: str) -> bytes | None:
    try:
        table = svc.table(Principal(key, "user", 10**9), "demo", TableBody(**body).to_request())
    except (RefusedError, RequestError):
        return None
    return table.render("csv").encode()


def copy_store(source: Path, target: Path) -> None:
    """Copy a SQLite store whole: its write-ahead log too, through SQLite's backup."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)


def stored(folder: Path) -> int:
    with sqlite3.connect(folder / "audit.sqlite") as con:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'guard_sets'").fetchone():
            return 0  # no table answered yet
        return int(con.execute("SELECT COUNT(*) FROM guard_sets").fetchone()[0])


#: The guard's steps timed by --profile: (owner, attribute).
STEPS = [
    ("service", "guard_check"),
    ("SetIndex", "_flush"),
    ("rules", "_pairs"),
    ("rules", "_families"),
    ("rules", "_joined"),
    ("SetIndex", "children_columns"),
    ("SetIndex", "near"),
    ("SetIndex", "near_many"),
    ("SetIndex", "family_state"),
    ("rules", "derive"),
    ("families", "_build"),
    ("families", "_derive"),
    ("Family", "newly_derivable"),
    ("Family", "counts"),
    ("GuardCounts", "intersection"),
    ("LedgerIndex", "check"),
    ("LedgerIndex", "add"),
    ("store", "_catch_up"),
    ("store", "_ledger_catch_up"),
    ("store", "_write_sets"),
    ("store", "_write_ledger"),
]


class StepClock:
    """Thread CPU time per guard step and in the collector, for the check under way."""

    def __init__(self) -> None:
        self.now: dict[str, float] = {}
        self.checks: list[tuple[float, dict[str, float]]] = []
        owners = {"rules": guard, "SetIndex": guard.SetIndex, "Family": guard.Family}
        owners["GuardCounts"] = guard.GuardCounts
        owners["LedgerIndex"] = ledger.LedgerIndex
        owners["store"] = store
        owners["families"] = families
        owners["service"] = service_module
        for owner, name in STEPS:
            if hasattr(owners[owner], name):  # (a step of another version of the guard)
                setattr(owners[owner], name, self._timed(name, getattr(owners[owner], name)))
        self._gc_start = 0.0
        self.depth = 0  # inside a timed step: the collector's time counts only there
        gc.callbacks.append(self._collector)

    def _timed(self, name: str, f: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            self.depth += 1
            try:
                return f(*args, **kwargs)
            finally:
                self.depth -= 1
                self.now[name] = self.now.get(name, 0.0) + time.thread_time() - start

        return timed

    def _collector(self, phase: str, info: dict[str, Any]) -> None:
        if not self.depth:
            return
        if phase == "start":
            self._gc_start = time.thread_time()
        else:
            self.now["collector"] = self.now.get("collector", 0.0) + (
                time.thread_time() - self._gc_start
            )

    def done(self, cpu: float) -> None:
        """Close the check just timed (its whole thread CPU time ``cpu``)."""
        self.checks.append((cpu, self.now))
        self.now = {}

    def report(self) -> None:
        """Print the steps of the 10 slowest checks."""
        print("the 10 slowest checks, thread CPU ms per step (steps nest in _pairs and _families):")
        for cpu, steps in sorted(self.checks, key=lambda c: -c[0])[:10]:
            parts = ", ".join(f"{k} {1000 * v:.1f}" for k, v in sorted(steps.items()))
            print(f"  {1000 * cpu:.1f}: {parts}")


def part1(
    records: int,
    target: int,
    probe: int,
    profile: bool = False,
    keep: Path | None = None,
    warm: int = 1000,
    by_function: bool = False,
) -> None:
    data_dir = demo(records)
    codes = {v.name: list(v.codes) for v in Dataset.open(data_dir).catalog.variables.values()}
    rng = np.random.default_rng(25)
    with tempfile.TemporaryDirectory() as tmp:
        kept = keep is not None and (keep / "audit.sqlite").exists()
        if kept:
            # A store filled by an earlier run with the same arguments: read back, as
            # after a restart, then warmed by the requests that filled it.
            copy_store(keep / "audit.sqlite", Path(tmp) / "audit.sqlite")
        svc = service(Path(tmp), data_dir)
        times: list[float] = []
        cpu: list[float] = []  # the thread's CPU time: what a busy machine does not inflate
        inner = svc._guard

        # With --functions: each probe's profile, kept with its CPU time.
        functions: list[tuple[float, cProfile.Profile]] | None = None

        def timed(*args: Any) -> None:
            t, c = time.perf_counter(), time.thread_time()
            profiler = None
            if functions is not None:
                profiler = cProfile.Profile(time.thread_time)
                profiler.enable()
            try:
                inner(*args)
            finally:
                if profiler is not None:
                    profiler.disable()
                times.append(time.perf_counter() - t)
                cpu.append(time.thread_time() - c)
                if functions is not None and profiler is not None:
                    functions.append((cpu[-1], profiler))

        svc._guard = timed  # type: ignore[method-assign]
        asked = 0
        start = time.perf_counter()
        while stored(Path(tmp)) < target:
            for body in requests(rng, 50, codes):
                ask(svc, body, f"k{asked % 7}")
                asked += 1
        fill = time.perf_counter() - start
        have = stored(Path(tmp))
        print(f"store filled: {have:,} record sets from {asked:,} requests in {fill:.0f} s")
        if keep is not None and not kept:
            keep.mkdir(parents=True, exist_ok=True)
            copy_store(Path(tmp) / "audit.sqlite", keep / "audit.sqlite")
            (keep / "asked").write_text(str(asked))
        if kept:
            assert keep is not None
            for _ in range(int((keep / "asked").read_text()) // 50):
                requests(rng, 50, codes)  # the fill's requests, not asked again
            start = time.perf_counter()
            for body in requests(rng, warm, codes):
                ask(svc, body, "warm")
            took = time.perf_counter() - start
            print(f"read back and warmed by {warm:,} requests in {took:.0f} s")
        probes = requests(rng, probe, codes)
        # Baseline: the same tables built without the guard (tabulation, protection,
        # record sets with their sketches), in this process.
        s = svc.served("demo")
        base = []
        for body in probes:
            try:
                req = s.builder.check(TableBody(**body).to_request())
                t = time.perf_counter()
                built = s.builder.run(req, checked=True)
                svc._record_sets(s, req, built.plan, built.aggregates)
                base.append(time.perf_counter() - t)
            except (RefusedError, RequestError):
                pass
        times.clear()
        cpu.clear()
        clock = StepClock() if profile else None
        if by_function:
            functions = []
        refused = 0
        for body in probes:
            refused += ask(svc, body, "probe") is None
            if clock is not None and len(cpu) > len(clock.checks):
                clock.done(cpu[-1])
        svc.close()
    q = statistics.quantiles(times, n=100)
    qc = statistics.quantiles(cpu, n=100)
    b50 = statistics.median(base)
    print(
        f"guard check, {len(times)} requests with {have:,} stored sets: p50 {1000 * q[49]:.1f} ms, "
        f"p99 {1000 * q[98]:.1f} ms, max {1000 * max(times):.1f} ms ({refused} refused); "
        f"CPU time p50 {1000 * qc[49]:.1f} ms, p99 {1000 * qc[98]:.1f} ms, "
        f"mean {1000 * statistics.fmean(cpu):.1f} ms"
    )
    print(
        f"baseline (building the table and its record sets, no guard): p50 {1000 * b50:.1f} ms; "
        f"guard p50 / baseline p50 = {q[49] / b50:.2f}, "
        f"guard p99 / baseline p50 = {q[98] / b50:.2f}"
    )
    if clock is not None:
        clock.report()
    if functions:
        slowest = [p for _, p in sorted(functions, key=lambda f: -f[0])[:10]]
        print("the 10 slowest guard transactions by function (cProfile, thread CPU time):")
        pstats.Stats(*slowest).sort_stats("tottime").print_stats(30)
        pstats.Stats(*slowest).sort_stats("cumulative").print_stats(30)


def part2(records: int, tables: int) -> None:
    data_dir = demo(records)
    codes = {v.name: list(v.codes) for v in Dataset.open(data_dir).catalog.variables.values()}
    rng = np.random.default_rng(26)
    bodies = requests(rng, tables, codes)
    with tempfile.TemporaryDirectory() as tmp:
        svc = service(Path(tmp), data_dir)
        t = time.perf_counter()
        first = [ask(svc, body, f"k{i % 7}") for i, body in enumerate(bodies)]
        took = time.perf_counter() - t
        svc.close()
        answered = [i for i, a in enumerate(first) if a is not None]
        print(f"{len(answered):,} of {tables:,} tables answered in {took:.0f} s; asking them again")
        svc = service(Path(tmp), data_dir)  # a restart: the store is read back
        t = time.perf_counter()
        again = {
            i: ask(svc, bodies[i], f"k{(i + 3) % 7}") for i in rng.permutation(answered).tolist()
        }
        took = time.perf_counter() - t
        sets = stored(Path(tmp))
        svc.close()
    refused = sum(a is None for a in again.values())
    changed = sum(a is not None and a != first[i] for i, a in again.items())
    digest = hashlib.sha256(b"".join(a or b"" for a in first)).hexdigest()[:12]
    print(
        f"again after a restart, another order and key: {refused} refused, {changed} changed "
        f"({len(again):,} in {took:.0f} s; {sets:,} record sets stored; answers {digest})"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--stored", type=int, default=100_000)
    p.add_argument("--probe", type=int, default=300)
    p.add_argument("--tables", type=int, default=10_000)
    p.add_argument("--small-records", type=int, default=20_000)
    p.add_argument("--part", choices=["1", "2", "both"], default="both")
    p.add_argument("--profile", action="store_true", help="time the steps of the slowest checks")
    p.add_argument(
        "--keep",
        type=Path,
        help="part 1: keep the filled store in this folder, or start from the one kept there",
    )
    p.add_argument("--warm", type=int, default=1000, help="with --keep: requests asked first")
    p.add_argument(
        "--functions", action="store_true", help="part 1: the probes' guard time by function"
    )
    args = p.parse_args()
    if args.part in ("1", "both"):
        part1(
            args.records,
            args.stored,
            args.probe,
            args.profile,
            args.keep,
            args.warm,
            args.functions,
        )
    if args.part in ("2", "both"):
        part2(args.small_records, args.tables)


if __name__ == "__main__":
    main()
