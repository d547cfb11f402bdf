"""Benchmark: magnitude tables from the cube cache against the engine (issue 17).

On the magnitudes benchmark file (``bench_magnitudes.py``: area x age x sex,
income lognormal with 30% zeros and a Pareto tail; ``--records`` records),
DuckDB with ``--threads`` threads (``materialize``, as the server runs it;
``--scan`` reads the Parquet file for every query instead),
best of ``--repeat`` rounds, every variant once per round so that load
changes weigh on all alike. Each table asks for ``count,sum:INCOME,mean:INCOME``
as the table builder asks the engine: every grouping set, the two largest
contributions per cell (the default protection's ``top_k`` and p% rule).

* ``direct``: ``DuckDBEngine.tabulate`` of the table (the baseline: a scan);
* ``cube build``: a fresh ``CubeCache`` answering the table: the cube's
  query (every combination of the columns' codes, no universe) and the
  table derived from it (what the first table over a set of columns costs);
* ``from the cube``: the same table from the warm cube, in numpy;

for three tables over the same columns (one cube): area x age x sex; area x
sex in the universe age 20-39; area x age in ten-year bands (a custom
grouping) x sex. Then the whole protected table (``TableBuilder.build``:
the cell-key method for magnitudes, dominance and p% rules, rounding) with
the engine and with the warm cube. Ratios are to ``direct`` in the same
process; the cached and direct tables are checked to be the same bytes.

Usage: python benchmarks/bench_magnitude_cube.py [--records 10000000] [--repeat 5] [--threads 2]
       [--scan]
"""

from __future__ import annotations

import argparse
import os

from bench_magnitudes import best, make
from tablesafe._builder import TableBuilder
from tablesafe._cli._methods import protection_from_options
from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import CubeCache, DuckDBEngine

MAGS = ("sum:INCOME", "mean:INCOME")
BANDS = {
    "name": "AGE10",
    "variable": "AGE",
    "label": "Age in ten-year bands",
    "groups": [
        {"code": f"{lo}-{lo + 9}", "label": f"{lo}-{lo + 9}", "members": list(range(lo, lo + 10))}
        for lo in range(0, 100, 10)
    ],
}
TABLES = {
    "area x age x sex": TableRequest(("AREA", "AGE", "SEX"), statistic="count", magnitudes=MAGS),
    "area x sex, age 20-39": TableRequest(
        ("AREA", "SEX"), universe={"AGE": list(range(20, 40))}, statistic="count", magnitudes=MAGS
    ),
    "area x age bands x sex": TableRequest(
        ("AREA", "AGE10", "SEX"), groupings=[BANDS], statistic="count", magnitudes=MAGS
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--scan", action="store_true", help="DuckDB without materialize")
    args = parser.parse_args()

    load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    ds = Dataset.open(make(args.records))
    engine = DuckDBEngine(threads=args.threads, materialize=not args.scan)
    engine.ensure_valid(ds)
    protection = protection_from_options("ckm")
    direct = TableBuilder(ds, protection, engine=engine)
    warm = CubeCache(engine)
    cached = TableBuilder(ds, protection, engine=warm)
    for request in TABLES.values():
        # Warm: the materialized table, the ptables; the cube; and the same bytes.
        assert cached.build(request).render("csv") == direct.build(request).render("csv")
    assert warm.misses == 1, "the three tables share one cube"

    fns = {}
    for name, request in TABLES.items():
        plan = direct.plans(request)[1]  # what the builder asks the engine for
        fns[f"{name}|direct"] = lambda p=plan: engine.tabulate(ds, p)
        fns[f"{name}|build"] = lambda p=plan: CubeCache(engine).tabulate(ds, p)
        fns[f"{name}|cube"] = lambda p=plan: warm.tabulate(ds, p)
    first = TABLES["area x age x sex"]
    fns["protected|direct"] = lambda: direct.build(first)
    fns["protected|cube"] = lambda: cached.build(first)
    t = best(fns, args.repeat)

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    (cube,) = warm._cubes.values()
    how = "scanning the file" if args.scan else "materialized"
    print(f"records {args.records:,}, DuckDB threads {args.threads} ({how}), best of {args.repeat}")
    print(f"  load average before/after: {load_before} / {load}")
    print(
        f"  cube AREA x AGE x SEX with INCOME (sum, two largest): {cube.rows:,} rows, "
        f"{cube.nbytes / 2**20:.2f} MiB"
    )
    print(f"  {'table':24s} {'direct':>8s} {'cube build':>16s} {'from the cube':>20s}")
    for name in TABLES:
        d, b, c = (t[f"{name}|{k}"] for k in ("direct", "build", "cube"))
        print(f"  {name:24s} {d:7.3f}s {b:7.3f}s ({b / d:4.2f}x) {c * 1e3:8.1f} ms ({c / d:6.4f}x)")
    d, c = t["protected|direct"], t["protected|cube"]
    print(f"  protected area x age x sex: direct {d:.3f} s, warm cube {c:.3f} s ({c / d:.3f}x)")


if __name__ == "__main__":
    main()
