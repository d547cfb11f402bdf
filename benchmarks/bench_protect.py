"""Benchmark: the cost of protection over tabulation (issue 3 target: under 20% more).

A 3-way table (REGION x EDUC x EMPSTAT, all margins, counts and weighted
counts) from 10,000,000 demo records: tabulated alone (the baseline, in the
same process) and built as a protected table with several protections.

Usage: python benchmarks/bench_protect.py [--records 10000000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tablesafe._builder import Protection, TableBuilder
from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import DuckDBEngine
from tablesafe.mechanisms import destatis, dp_geometric
from tablesafe.prepare._demo import write_demo_data

DATA = Path(__file__).parent / "_data"


def best(fn, repeat: int = 5) -> float:
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
    engine = DuckDBEngine()
    engine.ensure_valid(dataset)
    request = TableRequest(("REGION", "EDUC", "EMPSTAT"), statistic="both")
    secret = b"benchmark-secret-0123456789abcdef"
    plain = TableBuilder(dataset, Protection(None), engine=engine)
    plain.build(request)
    base = best(lambda: plain.tabulate(request))
    print(f"{args.records:,} records, {' x '.join(request.dimensions)}")
    print(f"  tabulation alone: {base:.3f} s")
    for name, prot in [
        ("ckm, cell keys, aggregate", Protection(destatis(3, 1.0))),
        ("dp, cell keys, independent", Protection(dp_geometric(1.0), additivity="independent")),
        ("ckm, dynamic seeds", Protection(destatis(3, 1.0), seeds="dynamic", secret=secret)),
        ("ckm, keyed seeds", Protection(destatis(3, 1.0), seeds="keyed", secret=secret)),
        ("dp, ipf + controlled rounding", Protection(dp_geometric(1.0), additivity="ipf")),
    ]:
        builder = TableBuilder(dataset, prot, engine=engine)
        builder.build(request)
        t = best(lambda builder=builder: builder.build(request))
        print(f"  {name:<30} {t:.3f} s   +{100 * (t / base - 1):.0f}%")


if __name__ == "__main__":
    main()
