"""Benchmark: the privacy ledger's cost per served table, against the table's own time.

On the census-like data of ``bench_census.py`` (10M records by default), a
DP site (epsilon 1, keyed seeds, aggregate additivity) serves a sequence of
distinct tables. For each, in the same process, it times the table (the
builder's path on DuckDB: tabulation, protection, rules) and the ledger's
work for it (the table's figures and their digests, then the state store's
transaction on SQLite: the catch-up, the budget check, the row written and
committed). Two sites:

* **fast path**: a budget far above what is spent: each check is the cheap
  bound (what is spent plus the most the table adds);
* **exact**: tables inside disjoint universes (one age each) under a budget
  of 3: after three tables the bound says "maybe" and every check runs the
  exact search over every possible record (all of them are answered: each
  record is in one universe, parallel composition).

Then the ledger alone (no microdata: its cost does not depend on the records)
with a longer history: checks after 1,000 to ``--history`` tables, and the
replay of the stored rows by a process that starts.

Usage:
    python benchmarks/bench_ledger.py [--records 10000000] [--tables 40] [--history 10000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_census import make_census

SECRET = b"ledger-benchmark-secret-0123456789"
#: The dp ptable's cap: an outcome only one neighbour gives has a chance of about e^-40 a
#: figure, far below the ledger's delta, so budgets in epsilon mean what they say.
CAP = 40


def requests(count: int, *, disjoint: bool) -> list[Any]:
    """Distinct census tables: 2- and 3-way, in age bands, regions or single ages."""
    import numpy as np

    from tablesafe._request import TableRequest

    if disjoint:
        dims = [("AREA", "SEX"), ("REGION", "MARSTAT"), ("ETHNIC", "TENURE")]
        return [
            TableRequest(dims[i % 3], universe={"AGE": [i]}, statistic="count")
            for i in range(count)
        ]
    rng = np.random.default_rng(28)
    shapes = [
        ("AREA", "SEX"),
        ("REGION", "AGE"),
        ("AGE", "SEX", "TENURE"),
        ("REGION", "MARSTAT", "SEX"),
        ("ETHNIC", "AGE"),
        ("AREA", "TENURE"),
    ]
    out, seen = [], set()
    while len(out) < count:
        shape = shapes[int(rng.integers(len(shapes)))]
        lo = int(rng.integers(0, 90))
        universe: dict[str, list[int]] = {}
        if "AGE" not in shape:
            universe["AGE"] = list(range(lo, lo + int(rng.integers(1, 12))))
        if "REGION" not in shape and rng.random() < 0.5:
            universe["REGION"] = [int(rng.integers(1, 13))]
        key = (shape, tuple(sorted((k, tuple(v)) for k, v in universe.items())))
        if key not in seen:
            seen.add(key)
            out.append(TableRequest(shape, universe=universe, statistic="count"))
    return out


def site(folder: Path):
    from tablesafe._builder import TableBuilder
    from tablesafe._protection import Protection
    from tablesafe.catalog._dataset import Dataset
    from tablesafe.engines import DuckDBEngine
    from tablesafe.mechanisms import dp_geometric

    prot = Protection(dp_geometric(1.0, cap=CAP), seeds="keyed", secret=SECRET)
    data = Dataset.open(folder)
    return TableBuilder(data, prot, engine=DuckDBEngine()), prot, data


def serve(folder: Path, reqs: list[Any], budget: float, where: Path) -> dict[str, Any]:
    """Each table's time and the ledger's for it, in one process."""
    from tablesafe.rules._admission import dataset_identity
    from tablesafe.rules._ledger import Budgets, table_figures
    from tablesafe.state import SQLiteState

    builder, prot, data = site(folder)
    identity = dataset_identity(builder.engine, data)
    store = SQLiteState(where)
    tables, ledgers, exact = [], [], 0
    try:
        for req in reqs:
            t0 = time.perf_counter()
            built = builder.run(req)
            t1 = time.perf_counter()
            figures = table_figures(built.plan, built.table, prot, data.catalog)
            with store.transaction(identity) as tx:
                bound = max(tx.ledger.dataset.bound.values(), default=0.0)
                if tx.ledger.check("bench", figures, Budgets(epsilon=budget)):
                    tx.spend("bench", figures, "census")
                    exact += bound + 1 > budget
            t2 = time.perf_counter()
            tables.append(t1 - t0)
            ledgers.append(t2 - t1)
    finally:
        store.close()
    ratios = [b / a for a, b in zip(tables, ledgers, strict=True)]
    return {
        "tables": len(reqs),
        "exact_checks": exact,
        "table_median_ms": 1e3 * statistics.median(tables),
        "ledger_median_ms": 1e3 * statistics.median(ledgers),
        "ledger_max_ms": 1e3 * max(ledgers),
        "ratio_median": statistics.median(ratios),
        "ratio_max": max(ratios),
        "ratio_total": sum(ledgers) / sum(tables),
    }


def history(folder: Path, sizes: list[int], where: Path) -> list[dict[str, Any]]:
    """The ledger alone after long histories: a check, fast and exact, and a restart's replay."""
    from tablesafe.rules._ledger import Budgets, LedgerIndex, table_figures, worst_counts
    from tablesafe.rules._ledger_pld import within
    from tablesafe.state import SQLiteState

    builder, prot, data = site(folder)
    reqs = requests(max(sizes) + 20, disjoint=False)
    store = SQLiteState(where)
    out, done = [], 0
    try:
        for size in sizes:
            while done < size:
                built = builder.run(reqs[done])
                figures = table_figures(built.plan, built.table, prot, data.catalog)
                with store.transaction("history") as tx:
                    if tx.ledger.check("bench", figures, Budgets()):
                        tx.spend("bench", figures, "census")
                done += 1
            probe = [builder.run(r) for r in reqs[size : size + 20]]
            probes = [table_figures(b.plan, b.table, prot, data.catalog) for b in probe]
            with store.transaction("history") as tx:
                ledger = tx.ledger
                t0 = time.perf_counter()
                for f in probes:
                    ledger.check("bench", f, Budgets(epsilon=1e9))
                fast = (time.perf_counter() - t0) / len(probes)
                t0 = time.perf_counter()
                for f in probes:
                    new = ledger.dataset.families_for(f, ledger.dataset.fresh(f), new=True)
                    reach = worst_counts(ledger.dataset.families + new, touched_only=True)
                    within(reach.counts, 3.0, 1e-6)
                slow = (time.perf_counter() - t0) / len(probes)
                families = len(ledger.dataset.families)
                figures_n = ledger.dataset.figures
            t0 = time.perf_counter()
            fresh = LedgerIndex()
            for _, key, _, f in store.ledger_rows("history"):
                fresh.add(key, f)
            replay = time.perf_counter() - t0
            out.append(
                {
                    "tables": size,
                    "figures": figures_n,
                    "families": families,
                    "check_fast_ms": 1e3 * fast,
                    "check_exact_ms": 1e3 * slow,
                    "replay_s": replay,
                }
            )
            print(out[-1], flush=True)
    finally:
        store.close()
    return out


def accountant() -> None:
    """The accountant alone: its first use, a budget's allowed count, compositions by count."""
    from tablesafe.mechanisms import dp_geometric
    from tablesafe.rules import _ledger_pld as pld

    d = pld.ptable_descriptor(dp_geometric(1.0, cap=CAP))
    t0 = time.perf_counter()
    pld.within({d: 3}, 3.0, 1e-6)
    print(
        f"accountant: first check (imports dp-accounting, builds the PLD) "
        f"{time.perf_counter() - t0:.2f} s"
    )
    for budget in (3.0, 10.0, 30.0, 100.0):
        t0 = time.perf_counter()
        n = pld.allowed(d, budget, 1e-6)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(1000):
            pld.within({d: n}, budget, 1e-6)
        again = (time.perf_counter() - t0) / 1000
        print(
            f"  budget {budget:g}: allows {n} figures a record; found in {first * 1e3:.1f} ms, "
            f"then a check {again * 1e6:.1f} us"
        )
    for n in (10, 100, 1000, 10000):
        t0 = time.perf_counter()
        eps = pld.epsilon_at({d: n}, 1e-6)
        print(
            f"  {n} figures composed: epsilon {eps:.4g} at 1e-6 in "
            f"{(time.perf_counter() - t0) * 1e3:.1f} ms (basic composition: {n:g})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--tables", type=int, default=40)
    ap.add_argument("--history", type=int, default=10_000)
    ap.add_argument("--history-records", type=int, default=100_000)
    args = ap.parse_args()
    accountant()
    folder = make_census(args.records)
    with tempfile.TemporaryDirectory() as tmp:
        for name, reqs, budget in (
            ("fast path", requests(args.tables, disjoint=False), 1e9),
            ("exact", requests(args.tables, disjoint=True), 3.0),
        ):
            got = serve(folder, reqs, budget, Path(tmp) / f"{name}.sqlite")
            print(
                f"{args.records:,} records, {name}: "
                + ", ".join(
                    f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in got.items()
                ),
                flush=True,
            )
        sizes = [s for s in (1_000, 5_000, 10_000, 20_000) if s <= args.history]
        history(make_census(args.history_records), sizes, Path(tmp) / "history.sqlite")


if __name__ == "__main__":
    main()
