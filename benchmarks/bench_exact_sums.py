"""Benchmark: exact fixed-point weight sums against float sums (the weighted-figures issue).

tablesafe sums weights as fixed-point integers (tablesafe.cells._fixed) so that
weighted figures have the same bits in every engine, thread count and row
order. This script times the tabulation query DuckDB runs (one GROUP BY
GROUPING SETS over a CTE of inner cells, with the weight and 10 replicate
weights) twice on the same Parquet file, in the same process: once with
tablesafe's fixed-point sums, once with plain DOUBLE sums, and prints the
ratio (target: within 10%). It also checks that the float sums differ
between 1 and 2 threads or a shuffled file while the fixed-point sums do not.

With ``--tables`` it also builds protected tables end to end (weight, 10
replicate weights, standard errors; methods none, ckm and q-records) and
compares their CSV and JSON bytes across DuckDB with 2 and 1 threads, the
shuffled file, and the in-memory engine.

Usage: python benchmarks/bench_exact_sums.py [--records 10000000] [--repeat 5] [--tables]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tablesafe.cells._fixed import fixed_sql

DATA = Path(__file__).parent / "_data"
TABLES = [("REGION",), ("AREA", "SEX"), ("AREA", "AGE", "SEX")]
REPLICATES = 10


def make(records: int, path: Path, shuffle: bool = False) -> Path:
    if path.exists():
        return path
    rng = np.random.default_rng(2026)
    area = rng.integers(0, 350, records)
    cols = {
        "REGION": area // 30,
        "AREA": area,
        "AGE": rng.integers(0, 100, records),
        "SEX": rng.integers(1, 3, records),
        "RKEY": rng.integers(0, 2**32, records, dtype=np.uint32).astype(np.int64),
        "W": rng.lognormal(5.0, 0.6, records),
    }
    for r in range(REPLICATES):
        cols[f"R{r}"] = cols["W"] * rng.uniform(0.9, 1.1, records)
    table = pa.table(cols)
    if shuffle:
        table = table.take(rng.permutation(records))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=200_000)
    return path


def query(path: Path, dims: tuple[str, ...], exact: bool) -> str:
    weights = ["W", *[f"R{r}" for r in range(REPLICATES)]]
    if exact:
        inner = [f"SUM({fixed_sql(w)}) AS s_{w}" for w in weights]
        outer = [f"CAST(SUM(s_{w}) AS BIGINT) AS s_{w}" for w in weights]
    else:
        inner = [f"SUM(CAST({w} AS DOUBLE)) AS s_{w}" for w in weights]
        outer = [f"SUM(s_{w}) AS s_{w}" for w in weights]
    d = ", ".join(dims)
    sets = ", ".join(
        "(" + ", ".join(c) + ")" for c in [dims, *[tuple(x for x in dims if x != y) for y in dims]]
    )
    return (
        f"WITH c AS (SELECT {d}, COUNT(*) AS n, SUM(RKEY) AS k, {', '.join(inner)} "
        f"FROM read_parquet('{path}') GROUP BY {d}) "
        f"SELECT GROUPING({d}) AS g, {d}, SUM(n), CAST(SUM(k) % 4294967296 AS BIGINT), "
        f"{', '.join(outer)} FROM c GROUP BY GROUPING SETS ({sets}) ORDER BY ALL"
    )


def run(path: Path, dims: tuple[str, ...], exact: bool, threads: int = 2) -> list:
    con = duckdb.connect(config={"threads": threads})
    try:
        return con.execute(query(path, dims, exact)).fetchall()
    finally:
        con.close()


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def dataset_folder(path: Path) -> Path:
    """A dataset folder (catalog + link to the Parquet file) for the builder."""
    from tablesafe.catalog._catalog import Catalog

    folder = path.with_suffix("")
    folder.mkdir(exist_ok=True)
    link = folder / "microdata.parquet"
    if not link.exists():
        link.symlink_to(path.resolve())
    raw = {
        "dataset": {
            "title": "exact sums benchmark",
            "record_key": "RKEY",
            "weight": "W",
            "replicate_weights": [f"R{r}" for r in range(REPLICATES)],
            "replicate_method": "JK1",
        },
        "variables": [
            {"name": "REGION", "categories": [{"code": c, "label": str(c)} for c in range(12)]},
            {"name": "AREA", "categories": [{"code": c, "label": str(c)} for c in range(350)]},
            {"name": "AGE", "categories": [{"code": c, "label": str(c)} for c in range(100)]},
            {"name": "SEX", "categories": [{"code": c, "label": str(c)} for c in (1, 2)]},
        ],
    }
    (folder / "catalog.toml").write_text(Catalog.from_dict(raw).to_toml())
    return folder


def compare_tables(path: Path, shuffled: Path) -> None:
    """Same CSV and JSON bytes across threads, row order and engines, per method."""
    import os

    from tablesafe._builder import TableBuilder
    from tablesafe._cli._methods import protection_from_options
    from tablesafe._request import TableRequest
    from tablesafe.catalog._dataset import Dataset
    from tablesafe.engines import DuckDBEngine, MemoryEngine

    os.environ["TS_EXACT_SECRET"] = "exact-sums-benchmark-secret-0123456789"
    folders = {"file": dataset_folder(path), "shuffled": dataset_folder(shuffled)}
    request = TableRequest(("AREA", "SEX"), statistic="both", replicates=True)
    print("protected AREA x SEX tables with SEs: identical CSV and JSON bytes?")
    for method, extra in (
        ("none", {}),
        ("ckm", {}),
        ("q-records", {"seeds": "keyed", "secret_env": "TS_EXACT_SECRET"}),
    ):
        protection = protection_from_options(method, **extra)
        outputs = {}
        for name, folder, engine in (
            ("duckdb 2 threads", folders["file"], DuckDBEngine(threads=2)),
            ("duckdb 1 thread", folders["file"], DuckDBEngine(threads=1)),
            ("shuffled file", folders["shuffled"], DuckDBEngine(threads=2)),
            ("memory engine", folders["file"], MemoryEngine()),
        ):
            # One dataset name: the folder names differ, the data does not.
            dataset = Dataset.open(folder, name="exact")
            builder = TableBuilder(dataset, protection, engine=engine)
            table = builder.build(request)
            outputs[name] = (table.to_csv(), table.to_json())
        ref = outputs["duckdb 2 threads"]
        same = {k: v == ref for k, v in outputs.items() if k != "duckdb 2 threads"}
        print(f"  {method:<10} " + "  ".join(f"{k}: {v}" for k, v in same.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tables", action="store_true", help="also compare protected tables")
    args = ap.parse_args()
    path = make(args.records, DATA / f"exact_{args.records}.parquet")
    shuffled = make(args.records, DATA / f"exact_{args.records}_shuffled.parquet", shuffle=True)
    print(f"{args.records:,} records, weight + {REPLICATES} replicate weights, DuckDB 2 threads")
    print(f"{'table':<16} {'float s':>8} {'exact s':>8} {'ratio':>6}  float same?  exact same?")
    for dims in TABLES:
        f = timed(lambda d=dims: run(path, d, False), args.repeat)
        e = timed(lambda d=dims: run(path, d, True), args.repeat)
        variants = [run(path, dims, False, 1), run(shuffled, dims, False, 2)]
        float_same = all(v == run(path, dims, False, 2) for v in variants)
        exact_ref = run(path, dims, True, 2)
        exact_same = all(
            v == exact_ref for v in (run(path, dims, True, 1), run(shuffled, dims, True))
        )
        print(
            f"{'*'.join(dims):<16} {f:8.3f} {e:8.3f} {e / f:6.2f}  {float_same!s:>11}  "
            f"{exact_same!s:>11}"
        )

    if args.tables:
        compare_tables(path, shuffled)


if __name__ == "__main__":
    main()
