"""Benchmark: record-level drop/add-up-to-q and the sliver attack (issue 4 targets).

1. A 2-way drop/add-up-to-q table (AGEGRP x SEX, weighted, with the 80 JK1
   replicate weights) on 1,000,000 demo records, against the same table
   tabulated without protection (the baseline: one GROUPING SETS query),
   with DuckDB scanning Parquet and with the data materialized in memory
   (the server's default). Target: under 3 s on 2 cores.
2. The sliver attack over a universe of about 1,000 records (1,000
   differenced pairs) for each method. Target: under 1 minute.

Usage: python benchmarks/bench_records.py [--records 1000000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tablesafe._builder import Protection, TableBuilder
from tablesafe._request import TableRequest
from tablesafe.attacks import sliver_attack
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import DuckDBEngine
from tablesafe.mechanisms import drop_add_records
from tablesafe.prepare._demo import write_demo_data

DATA = Path(__file__).parent / "_data"
SECRET = b"benchmark-secret-0123456789abcdef"


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    folder = DATA / f"demo_rep80_{args.records}"
    if not (folder / "catalog.toml").exists():
        write_demo_data(folder, args.records, seed=1, replicates=80)
    dataset = Dataset.open(folder)
    request = TableRequest(("AGEGRP", "SEX"), statistic="both", replicates=True)
    protection = Protection(drop_add_records(), seeds="keyed", secret=SECRET)
    print(f"drop/add-up-to-q, AGEGRP x SEX, 80 replicate weights, {args.records:,} records")
    for materialize in (False, True):
        engine = DuckDBEngine(materialize=materialize)
        engine.ensure_valid(dataset)
        builder = TableBuilder(dataset, protection, engine=engine)
        base = timed(lambda: builder.tabulate(request))
        ours = timed(lambda: builder.build(request))
        where = "in memory" if materialize else "Parquet scan"
        print(
            f"  {where:<13} tabulate {base:6.3f} s   drop/add table {ours:6.3f} s   "
            f"ratio {ours / base:5.2f}"
        )
        engine.close()

    small = Dataset.open(folder)
    universe = {"AGE": [33, 34], "REGION": [2]}
    print("sliver attack, AGE x SEX in", universe)
    for name, prot in [
        ("none", Protection(None)),
        ("q-records", protection),
    ]:
        t0 = time.perf_counter()
        result = sliver_attack(small, universe, ("AGE", "SEX"), prot, name=name)
        dt = time.perf_counter() - t0
        print(
            f"  {name:<10} {result.pairs} pairs in {dt:5.1f} s; correct tables "
            f"{result.correct_tables:.1f}%, strategy 1 {result.strategy1:.1f}%"
        )


if __name__ == "__main__":
    main()
