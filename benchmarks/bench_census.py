"""Benchmark: every method at census scale (the census-scale issue).

Makes a census-like dataset (12 regions, 350 local areas nested in them,
single-year age 0-100, sex, marital status, tenure and ethnic group; one
record per person, no weights, as a census; 10M records by default) and
prints, for each method, the time of a protected table against a plain
DuckDB GROUP BY of the same cells run in the same process, for a small
table (REGION x SEX) and a 70k-cell one (AREA x AGE x SEX, 107k cells with
margins), and each method's peak memory in a fresh process against that of
tabulation alone. Then the cost of a command-line call (process start,
imports, a second call on an unchanged file), the time to write the
107k-cell table as CSV and JSON, and the served latency (p50, p99) of 16
clients asking area-level tables of the table builder's HTTP API: over age
bands with the server's cube cache on (one scan, then every table from
memory) and off, and over marital status and tenure (a cube too large for
the cache: every table is a query). Times are the best of ``--repeat`` runs.

Usage:
    python benchmarks/bench_census.py [--records 10000000] [--repeat 3]
        [--skip-methods] [--skip-memory] [--skip-cli] [--skip-server]
        [--methods none,ckm,...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DATA = Path(__file__).parent / "_data"
SECRET = "census-benchmark-secret-0123456789abcdef"
AREAS, REGIONS = 350, 12
METHODS = {
    # name: (method, extra options of protection_from_options)
    "none": ("none", {}),
    "ckm": ("ckm", {}),
    "ckm-keyed": ("ckm", {"seeds": "keyed"}),
    "dp": ("dp", {}),
    "pram": ("pram", {}),
    "q": ("q", {}),
    "q-records": ("q-records", {"seeds": "keyed"}),
    # Counts alone do not depend on which records drop/add-up-to-q drops or
    # duplicates, so the census's count tables ask for no record choice; this
    # row is what a weighted table pays for it: the same data with a weight
    # column, statistic "both", against a GROUP BY that also sums the weight.
    "q-records-weighted": ("q-records", {"seeds": "keyed"}),
}
#: Methods run on the weighted copy of the data (make_weighted), statistic "both".
WEIGHTED = {"q-records-weighted"}
TABLES = {"small": ("REGION", "SEX"), "large": ("AREA", "AGE", "SEX")}


# -- the data ---------------------------------------------------------------------------------


def catalog(records: int) -> str:
    def cats(codes: range | list[int], label: str) -> list[dict[str, object]]:
        return [{"code": c, "label": f"{label} {c}"} for c in codes]

    from tablesafe.catalog._catalog import Catalog

    raw = {
        "dataset": {
            "title": f"census-like benchmark data, {records:,} persons",
            "file": "microdata.parquet",
            "record_key": "RKEY",
        },
        "variables": [
            {"name": "REGION", "categories": cats(range(1, REGIONS + 1), "Region")},
            {"name": "AREA", "categories": cats(range(1, AREAS + 1), "Area")},
            {"name": "AGE", "categories": cats(range(0, 101), "Age")},
            {"name": "SEX", "categories": cats([1, 2], "Sex")},
            {"name": "MARSTAT", "categories": cats(range(1, 6), "Marital status")},
            {"name": "TENURE", "categories": cats(range(1, 5), "Tenure")},
            {"name": "ETHNIC", "categories": cats(range(1, 7), "Ethnic group")},
        ],
    }
    return Catalog.from_dict(raw).to_toml()


def make_census(records: int) -> Path:
    """Write (once) the census-like dataset of ``records`` persons; return its folder."""
    folder = DATA / f"census_{records}"
    if (folder / "catalog.toml").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2026)
    # Area sizes vary (a few large towns, many small areas), as in a census.
    area_p = rng.lognormal(0.0, 0.8, AREAS)
    area_p /= area_p.sum()
    age_p = np.exp(-np.arange(101) / 60.0) * (1 - 1 / (1 + np.exp(-(np.arange(101) - 85) / 4)))
    age_p /= age_p.sum()
    tmp = folder / "microdata.parquet.tmp"
    writer = None
    chunk = 2_000_000
    for start in range(0, records, chunk):
        m = min(chunk, records - start)
        area = rng.choice(AREAS, m, p=area_p) + 1
        age = rng.choice(101, m, p=age_p)
        cols = {
            "REGION": ((area - 1) * REGIONS // AREAS + 1).astype(np.int16),
            "AREA": area.astype(np.int16),
            "AGE": age.astype(np.int16),
            "SEX": rng.integers(1, 3, m).astype(np.int8),
            "MARSTAT": np.where(age < 16, 1, rng.integers(1, 6, m)).astype(np.int8),
            "TENURE": rng.integers(1, 5, m).astype(np.int8),
            "ETHNIC": rng.choice(6, m, p=[0.8, 0.07, 0.05, 0.04, 0.02, 0.02]).astype(np.int8) + 1,
            "RKEY": rng.integers(0, 2**32, m, dtype=np.uint32).astype(np.int64),
        }
        table = pa.table(cols)
        if writer is None:
            writer = pq.ParquetWriter(tmp, table.schema)
        writer.write_table(table, row_group_size=500_000)
    assert writer is not None
    writer.close()
    tmp.replace(folder / "microdata.parquet")
    (folder / "catalog.toml").write_text(catalog(records))
    return folder


def make_weighted(folder: Path) -> Path:
    """Write (once) a copy of a census-like dataset with a survey-like weight column."""
    out = folder.with_name(folder.name + "_weighted")
    if (out / "catalog.toml").exists():
        return out
    import duckdb

    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "microdata.parquet.tmp"
    # A weight between 1 and 2.4 from the record key: deterministic, varies by record.
    duckdb.connect().execute(
        f"COPY (SELECT *, 1.0 + (RKEY % 15) / 10.0 AS WEIGHT FROM "
        f"read_parquet('{folder}/microdata.parquet')) TO '{tmp}' "
        "(FORMAT parquet, ROW_GROUP_SIZE 500000)"
    )
    tmp.replace(out / "microdata.parquet")
    text = (folder / "catalog.toml").read_text()
    (out / "catalog.toml").write_text(
        text.replace('record_key = "RKEY"', 'record_key = "RKEY"\nweight = "WEIGHT"', 1)
    )
    return out


def dataset_for(folder: Path, name: str) -> tuple[Path, str]:
    """The folder and statistic a method is timed on (weighted rows: the weighted copy)."""
    if name in WEIGHTED:
        return make_weighted(folder), "both"
    return folder, "count"


# -- in-process timings -----------------------------------------------------------------------


def best_time(fn, repeat: int) -> float:
    """The fastest of ``repeat`` runs: on a shared machine, the least disturbed one."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def plain_group_by(con, folder: Path, dims: tuple[str, ...]) -> None:
    cols = ", ".join(dims)
    weight = ", SUM(WEIGHT)" if folder.name.endswith("_weighted") else ""
    con.execute(
        f"SELECT {cols}, COUNT(*), SUM(RKEY){weight} "
        f"FROM read_parquet('{folder}/microdata.parquet') GROUP BY {cols}"
    ).fetchall()


def builder_for(folder: Path, name: str):
    from tablesafe._builder import TableBuilder
    from tablesafe._cli._methods import protection_from_options
    from tablesafe.catalog._dataset import Dataset
    from tablesafe.engines import DuckDBEngine

    method, extra = METHODS[name]
    os.environ["TS_BENCH_SECRET"] = SECRET
    secret = {"secret_env": "TS_BENCH_SECRET"} if extra.get("seeds") == "keyed" else {}
    protection = protection_from_options(method, **extra, **secret)
    return TableBuilder(Dataset.open(folder), protection, engine=DuckDBEngine())


def time_methods(folder: Path, methods: list[str], repeat: int) -> list[dict[str, object]]:
    import duckdb

    from tablesafe._request import TableRequest

    con = duckdb.connect()
    rows = []
    for table, dims in TABLES.items():
        for name in methods:
            data, statistic = dataset_for(folder, name)
            request = TableRequest(dims, statistic=statistic)
            builder = builder_for(data, name)
            builder.build(request)  # validation (remembered) and warm caches
            base = best_time(lambda d=dims, f=data: plain_group_by(con, f, d), repeat)
            ours = best_time(lambda b=builder: b.build(request), repeat)
            rows.append(
                {
                    "table": table,
                    "method": name,
                    "group_by_s": base,
                    "method_s": ours,
                    "ratio": ours / base,
                }
            )
            print(
                f"  {table:<5} {'*'.join(dims):<14} {name:<18} GROUP BY {base:6.3f} s   "
                f"method {ours:6.3f} s   ratio {ours / base:5.2f}",
                flush=True,
            )
    return rows


# -- peak memory, each in a fresh process -----------------------------------------------------

_MEMORY_CHILD = """
import sys
sys.path.insert(0, {bench!r})
from bench_census import builder_for
from tablesafe._request import TableRequest
from pathlib import Path

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) // 1024

builder = builder_for(Path({folder!r}), {method!r})
request = TableRequest({dims!r}, statistic={statistic!r})
builder.engine.ensure_valid(builder.dataset)
builder.tabulate(TableRequest(("SEX",), statistic="count"))  # load DuckDB's reader once
# Reset the peak resident set size (Linux), so VmHWM is the peak of the table alone.
open("/proc/self/clear_refs", "w").write("5")
before = status("VmRSS:")
if {tabulate_only!r}:
    builder.tabulate(request)
else:
    builder.build(request)
print(before, status("VmHWM:"))
"""


def peak_mib(
    folder: Path, method: str, dims: tuple[str, ...], tabulate_only: bool
) -> tuple[int, int]:
    """Resident memory (MiB) before the table and its peak while building it (fresh process)."""
    data, statistic = dataset_for(folder, method)
    code = _MEMORY_CHILD.format(
        bench=str(Path(__file__).parent),
        folder=str(data),
        method=method,
        dims=dims,
        statistic=statistic,
        tabulate_only=tabulate_only,
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    before, after = out.split()[-2:]
    return int(before), int(after)


# -- command line, output ---------------------------------------------------------------------


def wall(cmd: list[str], env: dict[str, str] | None = None) -> float:
    # As on a user's machine: compiled modules cached (.pyc), which some
    # sandboxes turn off with PYTHONDONTWRITEBYTECODE.
    env = {k: v for k, v in (env or os.environ).items() if k != "PYTHONDONTWRITEBYTECODE"}
    t0 = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True, env=env)
    return time.perf_counter() - t0


def cli_costs(folder: Path) -> dict[str, float]:
    """Wall times of command-line calls (best of 5), with the import floor of the same run.

    The floor is a process importing numpy, DuckDB and click, which every
    ``tablesafe table`` call needs; the ratios printed are against it.
    """
    exe = str(Path(sys.executable).with_name("tablesafe"))
    table = [
        exe,
        "table",
        str(folder),
        "--rows",
        "REGION",
        "--cols",
        "SEX",
        "--format",
        "csv",
        "--statistic",
        "count",
    ]
    wall([exe, "--help"])  # writes the .pyc files
    out = {
        "python_start_s": min(wall([sys.executable, "-c", "pass"]) for _ in range(5)),
        "help_s": min(wall([exe, "--help"]) for _ in range(5)),
        "import_tablesafe_s": min(
            wall([sys.executable, "-c", "import tablesafe"]) for _ in range(5)
        ),
    }
    wall(table)  # first call validates (or finds the validation remembered)
    out["table_second_call_s"] = min(wall(table) for _ in range(5))
    # A small file: what a command costs beyond reading data.
    small = [*table]
    small[2] = str(make_census(10_000))
    wall(small)
    out["table_small_file_s"] = min(wall(small) for _ in range(5))
    out["floor_numpy_duckdb_click_s"] = min(
        wall([sys.executable, "-c", "import numpy, duckdb, click"]) for _ in range(5)
    )
    floor = out["floor_numpy_duckdb_click_s"]
    print(
        f"  against the floor: --help {out['help_s'] / floor:.2f}x, small table "
        f"{out['table_small_file_s'] / floor:.2f}x, 10M table second call "
        f"{out['table_second_call_s'] / floor:.2f}x"
    )
    return out


def output_costs(folder: Path, repeat: int) -> dict[str, float]:
    from tablesafe._request import TableRequest

    builder = builder_for(folder, "ckm")
    table = builder.build(TableRequest(TABLES["large"], statistic="count"))
    cells = len(table.to_frame())
    return {
        "cells": cells,
        "csv_s": best_time(lambda: table.to_csv(), repeat),
        "json_s": best_time(lambda: table.to_json(), repeat),
        "xlsx_s": best_time(lambda: table.to_xlsx_bytes(), repeat),
    }


# -- served latency ---------------------------------------------------------------------------


def served_body(mix: str, i: int) -> dict[str, object]:
    """Request ``i`` of a client mix of area-level tables.

    ``age-bands``: universes over age bands, which the server's cube of AREA x
    AGE x SEX answers after its first scan. ``other``: universes over one
    marital status and one tenure, whose cube (3.2 million cells) is over the
    cache's limit, so every table is a query of the microdata.
    """
    if mix == "age-bands":
        lo = i % 90
        universe: dict[str, list[int]] = {"AGE": list(range(lo, lo + 11))}
    else:
        universe = {"MARSTAT": [1 + i % 5], "TENURE": [1 + (i // 5) % 4]}
    return {"dimensions": ["AREA", "AGE", "SEX"], "universe": universe, "statistic": "count"}


def served_latency(
    folder: Path,
    clients: int = 16,
    requests_each: int = 8,
    *,
    mix: str = "age-bands",
    cube_cache: bool = True,
) -> dict[str, object]:
    import httpx

    tmp = Path(tempfile.mkdtemp(prefix="ts-census-"))
    (tmp / "secret").write_text(SECRET)
    (tmp / "site.toml").write_text(
        textwrap.dedent(
            f"""
            [server]
            title = "census benchmark"
            audit_db = "{tmp}/audit.sqlite"
            [engine]
            kind = "duckdb"
            materialize = true
            cube_cache = {"true" if cube_cache else "false"}
            [[datasets]]
            name = "census"
            path = "{folder}"
            [datasets.protection]
            method = "ckm"
            seeds = "keyed"
            secret_file = "{tmp}/secret"
            [datasets.rules]
            max_dimensions = 3
            max_cells = 200000
            min_universe_size = 50
            query_timeout_seconds = 60
            sliver_min_difference = 0
            """
        )
    )
    exe = str(Path(sys.executable).with_name("tablesafe"))
    port = "8765"
    server = subprocess.Popen(
        [exe, "serve", "--config", str(tmp / "site.toml"), "--port", port],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{base}/api/datasets", timeout=1).status_code < 500:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        # Warm: materialize the dataset once.
        url = f"{base}/api/datasets/census/tables"
        body = {"dimensions": ["AREA", "AGE", "SEX"], "statistic": "count"}
        r = httpx.post(url, json=body, timeout=600)
        r.raise_for_status()
        latencies: list[float] = []
        lock = threading.Lock()

        def client(c: int) -> None:
            with httpx.Client(timeout=600) as http:
                for j in range(requests_each):
                    body = served_body(mix, c * requests_each + j)
                    t0 = time.perf_counter()
                    http.post(url, json=body).raise_for_status()
                    with lock:
                        latencies.append(time.perf_counter() - t0)

        threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        q = np.quantile(latencies, [0.5, 0.99])
        return {
            "mix": mix,
            "cube_cache": cube_cache,
            "clients": clients,
            "requests": len(latencies),
            "p50_s": q[0],
            "p99_s": q[1],
            "max_s": max(latencies),
        }
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-server", action="store_true")
    ap.add_argument("--skip-methods", action="store_true")
    ap.add_argument("--skip-cli", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the results to this file")
    args = ap.parse_args()
    methods = args.methods.split(",")
    t0 = time.perf_counter()
    folder = make_census(args.records)
    print(
        f"census-like data, {args.records:,} records: {folder} ({time.perf_counter() - t0:.0f} s)"
    )
    results: dict[str, object] = {"records": args.records}
    if not args.skip_methods:
        print("time against a plain GROUP BY of the same cells (DuckDB, Parquet, best of N):")
        results["methods"] = time_methods(folder, methods, args.repeat)
    if not args.skip_memory:
        print("resident memory (MiB), fresh process: before, peak of tabulation, peak of method:")
        mem = []
        for table, dims in TABLES.items():
            for name in methods:
                # The tabulation alone of the same data and statistic, in its own process.
                start, base = peak_mib(folder, name, dims, tabulate_only=True)
                _, peak = peak_mib(folder, name, dims, tabulate_only=False)
                mem.append(
                    {
                        "table": table,
                        "method": name,
                        "start_mib": start,
                        "tabulate_mib": base,
                        "peak_mib": peak,
                    }
                )
                print(
                    f"  {table:<5} {name:<18} before {start:6d}   tabulation peak {base:6d}   "
                    f"method peak {peak:6d}   (+{peak - base} MiB over the tabulation)",
                    flush=True,
                )
        results["memory"] = mem
    if not args.skip_cli:
        print("command line (wall time, best of 3):")
        results["cli"] = cli_costs(folder)
        for k, v in results["cli"].items():
            print(f"  {k:<22} {v:6.3f} s")
        print("writing the 107k-cell AREA x AGE x SEX table (CSV, JSON, XLSX):")
        results["output"] = output_costs(folder, args.repeat)
        print(f"  {results['output']}")
    if not args.skip_server:
        print("served AREA x AGE x SEX tables, 16 clients x 8 requests (seconds):")
        served = []
        for mix, cube in (("age-bands", True), ("age-bands", False), ("other", True)):
            r = served_latency(folder, mix=mix, cube_cache=cube)
            served.append(r)
            print(
                f"  {mix:<10} cube cache {'on ' if cube else 'off'}   p50 {r['p50_s']:6.2f}   "
                f"p99 {r['p99_s']:6.2f}   max {r['max_s']:6.2f}",
                flush=True,
            )
        results["served"] = served
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
