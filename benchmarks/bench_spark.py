"""Benchmark: DuckDB against Spark local mode on 10,000,000 records, 1- to 4-way tables.

Both engines scan the same Parquet file; each table is timed best of 3
after a warm-up, in the same process.

Usage: python benchmarks/bench_spark.py [--records 10000000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import DuckDBEngine, SparkEngine
from tablesafe.prepare._demo import write_demo_data

DATA = Path(__file__).parent / "_data"
TABLES = [
    ("REGION",),
    ("EDUC", "SEX"),
    ("REGION", "EDUC", "EMPSTAT"),
    ("REGION", "AGEGRP", "SEX", "TENURE"),
]


def best(fn, repeat: int = 3) -> float:
    out = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=10_000_000)
    args = parser.parse_args()
    folder = DATA / f"demo_{args.records}"
    if not (folder / "catalog.toml").exists():
        write_demo_data(folder, args.records, seed=1, replicates=0)
    dataset = Dataset.open(folder)
    duck = DuckDBEngine()
    t0 = time.perf_counter()
    spark = SparkEngine(master="local[2]")
    start = time.perf_counter() - t0
    duck.ensure_valid(dataset)
    t0 = time.perf_counter()
    spark.ensure_valid(dataset)
    valid = time.perf_counter() - t0
    print(f"{args.records:,} records; Spark session start {start:.1f} s, validation {valid:.1f} s")
    print(f"{'table':<34} {'duckdb s':>9} {'spark s':>9} {'ratio':>7}")
    for dims in TABLES:
        plan = TableRequest(dims, statistic="both").bind(dataset.catalog)
        duck.tabulate(dataset, plan)
        spark.tabulate(dataset, plan)
        d = best(lambda plan=plan: duck.tabulate(dataset, plan))
        s = best(lambda plan=plan: spark.tabulate(dataset, plan))
        print(f"{' x '.join(dims):<34} {d:>9.3f} {s:>9.3f} {s / d:>7.1f}")
    spark.close()


if __name__ == "__main__":
    main()
