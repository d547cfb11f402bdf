"""Benchmark: what standard errors cost a weighted table (issue 29).

The demo survey (``--records`` records, ``--replicates`` replicate weights,
written once under ``benchmarks/_data``), the cell-key method, DuckDB
(materialized, as the server runs it) behind the cube cache or not
(``--engine direct``). Each table is built with and without standard errors
(``se``: the request's ``replicates``), best of ``--repeat`` rounds with
every variant once per round, so that the shared machine's load weighs on
all alike; the ratio is to the same table without standard errors, in the
same process. A site with ``max_rse`` pays the standard errors on every
weighted table (the precision rule decides on them), asked for or not.

Tables: region x age group x sex weighted; the same with row percentages;
the same with the weighted mean of income; the same with its weighted median.

Usage: python benchmarks/bench_precision.py [--records 20000] [--replicates 80] [--repeat 7]
       [--engine cube|direct] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

from tablesafe import Protection
from tablesafe._builder import TableBuilder
from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import CubeCache, DuckDBEngine
from tablesafe.mechanisms import destatis
from tablesafe.prepare._demo import write_demo_data

DIMS = ("REGION", "AGEGRP", "SEX")
TABLES = {
    "weighted": "weighted",
    "weighted, row %": "weighted,percent:row",
    "weighted, mean income": "weighted,mean:INCOME",
    # Woodruff's intervals (issue 38): the engine lists each record's replicate weights.
    "weighted, median income": "weighted,median:INCOME",
}


def best(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best time of each function over ``repeat`` interleaved rounds."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: min(ts) for name, ts in times.items()}


def dataset(records: int, replicates: int) -> Dataset:
    """The demo survey of this size, written once."""
    folder = Path(__file__).parent / "_data" / f"precision-{records}-{replicates}"
    if not (folder / "catalog.toml").exists():
        write_demo_data(folder, records, seed=2026, replicates=replicates)
    return Dataset.open(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--replicates", type=int, default=80)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--engine", choices=("cube", "direct"), default="cube")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    ds = dataset(args.records, args.replicates)
    load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    engine = DuckDBEngine(threads=args.threads, materialize=True)
    builder = TableBuilder(
        ds,
        Protection(destatis(3, 1.0)),
        engine=CubeCache(engine) if args.engine == "cube" else engine,
    )
    fns: dict[str, Callable[[], object]] = {}
    for name, statistic in TABLES.items():
        for se in (False, True):
            request = TableRequest(DIMS, statistic=statistic, replicates=se)
            builder.build(request)  # warm: the materialized table, the cube, the ptables
            fns[f"{name}|{se}"] = lambda r=request: builder.build(r)
    t = best(fns, args.repeat)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"records {args.records:,}, {args.replicates} replicate weights, DuckDB threads "
        f"{args.threads} ({args.engine}), best of {args.repeat}"
    )
    print(f"  load average before/after: {load_before} / {load}")
    print(f"  {'table':24s} {'no SEs':>9s} {'with SEs':>9s} {'ratio':>7s}")
    for name in TABLES:
        a, b = t[f"{name}|False"], t[f"{name}|True"]
        print(f"  {name:24s} {a * 1e3:7.1f}ms {b * 1e3:7.1f}ms {b / a:6.2f}x")


if __name__ == "__main__":
    main()
