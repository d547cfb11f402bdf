"""Benchmark: a magnitude table against a plain GROUP BY with SUM (issue 17).

Sum and mean of income by area x age x sex (350 x 100 x 2 inner cells and
every margin) on a synthetic Parquet file of ``--records`` records (income
lognormal with 30% zeros and a Pareto tail). Timed in the same process, on
the same file, DuckDB with ``--threads`` threads, best of ``--repeat``:

* ``plain``: ``SELECT AREA, AGE, SEX, COUNT(*), SUM(INCOME) ... GROUP BY``
  (inner cells only, float sums: the baseline);
* ``counts only``: tablesafe's tabulation of the same table without
  magnitudes (counts and cell keys of every cell: what any table costs);
* ``query``: tablesafe's tabulation of ``count,sum:INCOME,mean:INCOME``
  (``DuckDBEngine.tabulate``: one GROUPING SETS query with counts, cell
  keys, fixed-point sums and the three largest contributions of every cell,
  assembled into the cell arrays);
* ``table``: the whole protected table (``TableBuilder.build``: the query,
  the count ptable, the cell-key method for magnitudes, rules, rounding),
  with the numeric ptable already built.

Prints each time and its ratio to ``plain`` (target for ``query`` and
``table``: within 1.5x).

Usage: python benchmarks/bench_magnitudes.py [--records 10000000] [--repeat 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tablesafe._builder import TableBuilder
from tablesafe._catalog import Catalog
from tablesafe._cli._methods import protection_from_options
from tablesafe._dataset import Dataset
from tablesafe._request import TableRequest
from tablesafe.engines import DuckDBEngine

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


def best(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    folder = make(args.records)
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
    builder = TableBuilder(ds, protection_from_options("ckm"), engine=engine)
    builder.build(request)  # warm: numeric ptable, count ptable, file cache

    plain = best(lambda: con.sql(plain_sql).fetchnumpy(), args.repeat)
    counts_plan = TableRequest(("AREA", "AGE", "SEX"), statistic="count").bind(ds.catalog)
    counts = best(lambda: engine.tabulate(ds, counts_plan), args.repeat)
    query = best(lambda: engine.tabulate(ds, plan), args.repeat)
    table = best(lambda: builder.build(request), args.repeat)
    print(f"records {args.records:,}, DuckDB threads {args.threads}, best of {args.repeat}")
    print("  area x age x sex: 70,000 inner cells, all margins; sum and mean of income")
    print(f"  plain GROUP BY with SUM  {plain:7.3f} s   1.00x")
    print(f"  tablesafe counts only    {counts:7.3f} s   {counts / plain:.2f}x")
    print(f"  tablesafe query          {query:7.3f} s   {query / plain:.2f}x")
    print(f"  protected table          {table:7.3f} s   {table / plain:.2f}x")


if __name__ == "__main__":
    main()
