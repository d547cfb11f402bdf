"""Reconstruction attack: shares pinned and time, unprotected versus each method.

Three setups (each printed as a Markdown table for docs/attacks.md):

* the small census-like file (``_census_like.py``, 400 records; AGE bands x
  SEX x AREA x TENURE): every 2-way and every 3-way table of the 4 variables;
* the demo survey (``tablesafe demo-data``, 10,000 records): every 2-way and
  every 3-way table of REGION, SEX, AGEGRP, MARSTAT, TENURE;
* the target of issue 15: 10,000 demo records, every 2-way table of 6
  variables (REGION, SEX, AGEGRP, MARSTAT, EDUC, TENURE), timed.

Times are printed with their ratio to the unprotected attack on the same
tables, measured in the same process.

Run: ``.venv/bin/python benchmarks/bench_reconstruct.py [--time-limit 30] [--only SETUP]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _census_like import write_census_like
from tablesafe._cli._methods import protection_from_options
from tablesafe.attacks import all_k_way_requests, reconstruction_attack
from tablesafe.catalog._dataset import Dataset
from tablesafe.prepare._demo import write_demo_data

METHODS = ("none", "ckm", "dp", "pram", "q", "q-records")


def _pct(low: float, high: float, complete: bool) -> str:
    return f"{100 * low:.1f}" if complete else f"{100 * low:.1f}-{100 * high:.1f}"


def run(dataset: Dataset, variables: list[str], k: int, time_limit: float, title: str) -> None:
    requests = all_k_way_requests(dataset.catalog, variables, k)
    print(f"\n### {title}: all {k}-way tables of {', '.join(variables)} ({len(requests)} tables)\n")
    print(
        "| method | cells | cells pinned % | records in pinned cells % | sample uniques "
        "re-identified % | seconds | time / unprotected |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = None
    for method in METHODS:
        protection = protection_from_options(method)
        start = time.perf_counter()
        r = reconstruction_attack(
            dataset, requests, protection, time_limit=time_limit, name=method, putative=False
        )
        seconds = time.perf_counter() - start
        base = base or seconds
        print(
            f"| {method} | {r.cells:,} | "
            f"{_pct(r.cells_exact_share, r.cells_exact_share_upper, r.complete)} | "
            f"{_pct(r.records_exact_share, r.records_exact_share_upper, r.complete)} | "
            f"{_pct(r.uniques_exact_share, r.uniques_exact_share_upper, r.complete)} | "
            f"{seconds:.1f} | {seconds / base:.2f} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--only", choices=("census", "demo", "target"), default=None)
    args = parser.parse_args()
    # A fixed stand-in secret for the dynamic seeds of q-records (a benchmark, not a site).
    os.environ.setdefault("TABLESAFE_SECRET", "benchmark-secret-not-for-production-0000")
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "census"):
            census = write_census_like(Path(tmp) / "census", 400, seed=0)
            for k in (2, 3):
                run(
                    census,
                    ["AGE", "SEX", "AREA", "TENURE"],
                    k,
                    args.time_limit,
                    "Census-like, 400 records",
                )
        if args.only in (None, "demo", "target"):
            demo = Dataset.open(
                write_demo_data(Path(tmp) / "demo", 10_000, seed=2026, replicates=4)
            )
        if args.only in (None, "demo"):
            for k in (2, 3):
                run(
                    demo,
                    ["REGION", "SEX", "AGEGRP", "MARSTAT", "TENURE"],
                    k,
                    args.time_limit,
                    "Demo survey, 10,000 records",
                )
        if args.only in (None, "target"):
            run(
                demo,
                ["REGION", "SEX", "AGEGRP", "MARSTAT", "EDUC", "TENURE"],
                2,
                min(args.time_limit, 50.0),
                "Demo survey, 10,000 records (issue 15's target)",
            )


if __name__ == "__main__":
    main()
