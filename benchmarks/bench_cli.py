"""Benchmark: the command line's ``table`` against the CUBE floor, each in a whole process.

On the census-like file of issue 42 (``_census_workload.py``: 12 regions, 350
areas, AGE 0-100, SEX, ...; 10M persons by default), AREA x AGE x SEX with every
margin (107,406 cells) written as JSON to a file, in a fresh process each time:

- ``tablesafe table ... --format json`` with the cell-key method (the default),
  and with ``--method q-records --seeds keyed``;
- the floor: a Python process that imports DuckDB and runs the same cells as one
  plain ``GROUP BY CUBE (AREA, AGE, SEX)`` with the count and the key sum,
  written by DuckDB's own JSON writer (``COPY ... TO``): what the engine alone
  costs for these figures, start-up and output included;
- ``python -X importtime``'s account of the ``table`` process (its imports).

The runs alternate (floor, ckm, q-records, floor, ...); each figure is the
best of ``--repeat`` wall times and the median CPU time (user + system of the
process and its threads), with the load average before and after, since the
machine is shared. Compiled modules are cached (.pyc) as on a user's machine.

Usage:
    python benchmarks/bench_cli.py [--records 10000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _census_workload import census

SECRET = "cli-benchmark-secret-0123456789abcdef"
TABLE = ["--rows", "AREA", "--cols", "AGE", "--layers", "SEX", "--statistic", "count"]

FLOOR = """
import sys
import duckdb
data, out = sys.argv[1], sys.argv[2]
duckdb.connect().execute(
    "COPY (SELECT AREA, AGE, SEX, count(*) AS n, sum(RKEY) AS k "
    f"FROM read_parquet('{data}/microdata.parquet') GROUP BY CUBE (AREA, AGE, SEX)) "
    f"TO '{out}' (FORMAT json)"
)
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["TABLESAFE_SECRET"] = SECRET
    return env


def timed(cmd: list[str], out: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, threads included) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with out.open("wb") as f:
        subprocess.run(cmd, stdout=f, check=True, env=_env())
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def imports(folder: Path) -> tuple[float, float, list[tuple[int, str]]]:
    """Seconds importing (all, tablesafe's own modules) and the largest top-level imports."""
    cmd = [sys.executable, "-X", "importtime", "-m", "tablesafe", "table", str(folder), *TABLE]
    err = subprocess.run(
        [*cmd, "--format", "json"], capture_output=True, text=True, check=True, env=_env()
    ).stderr
    rows = re.findall(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", err)
    total = sum(int(s) for s, _, _, _ in rows) / 1e6
    own = sum(int(s) for s, _, _, name in rows if name.startswith("tablesafe")) / 1e6
    top = sorted(((int(c), n) for _, c, ind, n in rows if len(ind) <= 2), reverse=True)
    return total, own, top[:8]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    folder = census(args.records)
    exe = [sys.executable, "-m", "tablesafe", "table", str(folder), *TABLE, "--format", "json"]
    runs = {
        "floor (CUBE, DuckDB's JSON)": [sys.executable, "-c", FLOOR, str(folder)],
        "tablesafe table, ckm": exe,
        "tablesafe table, q-records": [*exe, "--method", "q-records", "--seeds", "keyed"],
    }
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        for name, cmd in runs.items():  # warm: .pyc files, the validation remembered
            subprocess.run(
                [*cmd, str(out)] if name.startswith("floor") else cmd,
                stdout=subprocess.DEVNULL,
                check=True,
                env=_env(),
            )
        times: dict[str, list[tuple[float, float]]] = {n: [] for n in runs}
        for _ in range(args.repeat):
            for name, cmd in runs.items():
                if name.startswith("floor"):
                    times[name].append(timed([*cmd, str(out)], Path(os.devnull)))
                else:
                    times[name].append(timed(cmd, out))
    total, own, top = imports(folder)
    load1 = os.getloadavg()[0]
    floor = next(iter(times.values()))
    best_floor = min(w for w, _ in floor)
    cpu_floor = statistics.median(c for _, c in floor)
    print(f"{args.records:,} records, AREA x AGE x SEX as JSON, best of {args.repeat} wall, "
          f"median CPU; load {load0:.1f} -> {load1:.1f}")  # fmt: skip
    print(f"{'':30} {'wall s':>8} {'ratio':>6} {'CPU s':>7} {'ratio':>6}")
    for name, ts in times.items():
        wall, cpu = min(w for w, _ in ts), statistics.median(c for _, c in ts)
        print(f"{name:30} {wall:8.3f} {wall / best_floor:6.2f} {cpu:7.3f} {cpu / cpu_floor:6.2f}")
    print(f"imports of `tablesafe table`: {total:.3f} s, tablesafe's own modules {own:.3f} s")
    print("  largest: " + ", ".join(f"{n} {c / 1e3:.0f} ms" for c, n in top))


if __name__ == "__main__":
    main()
