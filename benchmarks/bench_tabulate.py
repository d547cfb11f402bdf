"""Benchmark: tablesafe's tabulation against a plain hand-written DuckDB GROUP BY.

For 1-, 2- and 3-way tables (inner cells and every margin, counts, weighted
counts, squared weights and cell keys) on demo data of 1,000,000 and
10,000,000 records, time ``tabulate`` and a plain ``GROUP BY`` of the inner
cells (count and sum of weights) on the same Parquet file, in the same
process, and print the ratio. Targets (issue 2): ratio <= 1.5; a 3-way table
on 10,000,000 records in under 2 s on 2 cores.

Usage: python benchmarks/bench_tabulate.py [--records 1000000 10000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import duckdb

from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import DuckDBEngine
from tablesafe.output._tabulation import tabulate
from tablesafe.prepare._demo import write_demo_data

DATA = Path(__file__).parent / "_data"
TABLES = [("REGION",), ("EDUC", "SEX"), ("REGION", "EDUC", "EMPSTAT"), ("REGION", "AGE", "OCC")]


def best_of(fn, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(
        f"{'records':>11} {'table':<26} {'plain s':>8} {'same-aggs s':>11} "
        f"{'tablesafe s':>11} {'ratio':>6} {'ratio same-aggs':>15}"
    )
    for records in args.records:
        folder = DATA / f"demo_{records}"
        if not (folder / "catalog.toml").exists():
            t0 = time.perf_counter()
            write_demo_data(folder, records, seed=1, replicates=0)
            print(f"(generated {records:,} records in {time.perf_counter() - t0:.1f} s)")
        dataset = Dataset.open(folder)
        engine = DuckDBEngine()
        engine.ensure_valid(dataset)  # once per file; not part of a query
        con = duckdb.connect()
        path = str(dataset.path.resolve()).replace("'", "''")
        for dims in TABLES:
            request = TableRequest(dims, statistic="both")
            cols = ", ".join(dims)
            plain_sql = (
                f"SELECT {cols}, COUNT(*), SUM(WEIGHT) FROM read_parquet('{path}') GROUP BY {cols}"
            )
            # The same per-record work as tablesafe (key sums, squared weights),
            # without margins: separates the cost of the extra aggregates from
            # the cost of the grouping sets and of assembling the cell arrays.
            same_sql = (
                f"SELECT {cols}, COUNT(*), SUM(WEIGHT), SUM(WEIGHT * WEIGHT), SUM(RKEY) "
                f"FROM read_parquet('{path}') GROUP BY {cols}"
            )
            con.execute(plain_sql).fetchall()  # warm the file cache
            tabulate(dataset, request, engine=engine)
            plain, _ = best_of(lambda: con.execute(plain_sql).fetchall(), args.repeat)
            same, _ = best_of(lambda: con.execute(same_sql).fetchall(), args.repeat)
            ours, _ = best_of(lambda: tabulate(dataset, request, engine=engine), args.repeat)
            print(
                f"{records:>11,} {' x '.join(dims):<26} {plain:>8.3f} {same:>11.3f} "
                f"{ours:>11.3f} {ours / plain:>6.2f} {ours / same:>15.2f}"
            )


if __name__ == "__main__":
    main()
