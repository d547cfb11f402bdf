"""Benchmark: a magnitude table against a plain GROUP BY with SUM (issue 17).

Sum and mean of income by area x age x sex (350 x 100 x 2 inner cells and
every margin) on a synthetic Parquet file of ``--records`` records (income
lognormal with 30% zeros and a Pareto tail). Timed in the same process, on
the same file, DuckDB with ``--threads`` threads, best of ``--repeat``
rounds (each round runs every variant once, so load changes weigh on all):

* ``plain``: ``SELECT AREA, AGE, SEX, COUNT(*), SUM(INCOME) ... GROUP BY``
  (inner cells only, float sums: the baseline);
* ``counts only``: tablesafe's tabulation of the same table without
  magnitudes (counts and cell keys of every cell: what any table costs);
* ``query``: tablesafe's tabulation of ``count,sum:INCOME,mean:INCOME``
  (``DuckDBEngine.tabulate``: one GROUPING SETS query with counts, cell
  keys, fixed-point sums and the two largest contributions of every cell,
  as many as the default protection uses, assembled into the cell arrays);
  also with one (a plain ``MAX``) and three largest (``max(x, 3)``);
* ``table``: the whole protected table (``TableBuilder.build``: the query,
  the count ptable, the cell-key method for magnitudes, rules, rounding),
  with the numeric ptable already built; the defaults use the two largest
  contributions per cell (``top_k`` 2 and the p% rule);
* ``table, one largest``: the same with ``top_k = 1`` and no p% rule (the
  dominance (1, k) rule only), where engines compute a plain ``MAX``
  instead of DuckDB's ``max(x, k)``.

Prints each time and its ratio to ``plain`` (target for ``query`` and
``table``: within 1.5x).

Usage: python benchmarks/bench_magnitudes.py [--records 10000000] [--repeat 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tablesafe._builder import TableBuilder
from tablesafe._cli._methods import protection_from_options
from tablesafe._request import TableRequest
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._dataset import Dataset
from tablesafe.cells._plan import with_top
from tablesafe.engines import DuckDBEngine
from tablesafe.mechanisms._magnitudes import MagnitudeProtection

DATA = Path(__file__).parent / "_data"


def make(records: int) -> Path:
    """Write (once) the synthetic dataset and its catalog; return its folder."""
    folder = DATA / f"magnitudes_{records}"
    if (folder / "catalog.toml").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2026)
    income = np.round(rng.lognormal(10.2, 0.7, records))
    income[rng.random(records) < 0.3] = 0.0
    tail = rng.random(records) < 0.0005
    income[tail] = np.minimum(income[tail] * (1 + rng.pareto(1.2, tail.sum())) * 8, 5e6)
    table = pa.table(
        {
            "AREA": rng.integers(0, 350, records),
            "AGE": rng.integers(0, 100, records),
            "SEX": rng.integers(1, 3, records),
            "RKEY": rng.integers(0, 2**32, records, dtype=np.uint32).astype(np.int64),
            "INCOME": income,
        }
    )
    pq.write_table(table, folder / "microdata.parquet", row_group_size=200_000)
    cat = Catalog.from_dict(
        {
            "dataset": {"title": "magnitudes benchmark", "file": "microdata.parquet"},
            "variables": [
                {"name": "AREA", "categories": [{"code": a, "label": str(a)} for a in range(350)]},
                {"name": "AGE", "categories": [{"code": a, "label": str(a)} for a in range(100)]},
                {
                    "name": "SEX",
                    "categories": [{"code": 1, "label": "m"}, {"code": 2, "label": "f"}],
                },
            ],
            "magnitudes": [{"name": "INCOME", "unit": "EUR", "lower": 0, "upper": 5_000_000}],
        }
    )
    (folder / "catalog.toml").write_text(cat.to_toml())
    return folder


def best(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best time of each function over ``repeat`` rounds, the functions interleaved.

    Each round runs every function once, so a change of the machine's load
    during the run weighs on all of them alike (the machine is shared).
    """
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: min(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    folder = make(args.records)
    load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    ds = Dataset.open(folder)
    engine = DuckDBEngine(threads=args.threads)
    engine.ensure_valid(ds)
    con = duckdb.connect(config={"threads": args.threads})
    path = str(ds.path).replace("'", "''")
    plain_sql = (
        f"SELECT AREA, AGE, SEX, COUNT(*), SUM(INCOME) FROM read_parquet('{path}') "
        "GROUP BY AREA, AGE, SEX"
    )
    request = TableRequest(
        ("AREA", "AGE", "SEX"), statistic="count", magnitudes=("sum:INCOME", "mean:INCOME")
    )
    plan = request.bind(ds.catalog)
    # As the builder asks: as many largest contributions as the default protection uses (2).
    top = MagnitudeProtection().top_needed()
    plan1, plan3 = (
        dataclasses.replace(plan, magnitudes=with_top(plan.magnitudes, k)) for k in (1, 3)
    )
    plan = dataclasses.replace(plan, magnitudes=with_top(plan.magnitudes, top))
    builder = TableBuilder(ds, protection_from_options("ckm"), engine=engine)
    builder.build(request)  # warm: numeric ptable, count ptable, file cache

    counts_plan = TableRequest(("AREA", "AGE", "SEX"), statistic="count").bind(ds.catalog)
    one = TableBuilder(
        ds,
        protection_from_options("ckm"),
        engine=engine,
        magnitudes=MagnitudeProtection(top_k=1, p_percent=None),
    )
    one.build(request)
    t = best(
        {
            "plain": lambda: con.sql(plain_sql).fetchnumpy(),
            "counts": lambda: engine.tabulate(ds, counts_plan),
            "query1": lambda: engine.tabulate(ds, plan1),
            "query": lambda: engine.tabulate(ds, plan),
            "query3": lambda: engine.tabulate(ds, plan3),
            "table": lambda: builder.build(request),
            "table1": lambda: one.build(request),
        },
        args.repeat,
    )
    plain, counts, query, table, table1 = (
        t[k] for k in ("plain", "counts", "query", "table", "table1")
    )
    query1, query3 = t["query1"], t["query3"]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"records {args.records:,}, DuckDB threads {args.threads}, best of {args.repeat}")
    print(f"  load average before/after: {load_before} / {load}")
    print("  area x age x sex: 70,000 inner cells, all margins; sum and mean of income")
    print(f"  plain GROUP BY with SUM  {plain:7.3f} s   1.00x")
    print(f"  tablesafe counts only    {counts:7.3f} s   {counts / plain:.2f}x")
    print(f"  query, one largest       {query1:7.3f} s   {query1 / plain:.2f}x")
    print(f"  tablesafe query          {query:7.3f} s   {query / plain:.2f}x")
    print(f"  query, three largest     {query3:7.3f} s   {query3 / plain:.2f}x")
    print(f"  protected table          {table:7.3f} s   {table / plain:.2f}x")
    print(f"  table, one largest       {table1:7.3f} s   {table1 / plain:.2f}x")


if __name__ == "__main__":
    main()
