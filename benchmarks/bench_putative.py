"""The putative (best-guess) reconstruction: its scores per method, and how far its solve scales.

Two parts, each printed as a Markdown table for docs/attacks.md:

* the 300-record latent-class file (``_latent_class.py``: 4 variables of 3, 4,
  2 and 5 categories, 120 cells), all four 3-way tables published: provable
  pins beside the best guess (cells, records, sample uniques exactly right;
  precision of the claimed uniques; the ranked precision over 20 re-solves)
  and the one-way baseline, for none, ckm, dp and q;
* scaling: the census-like file (``_census_like.py``) and the demo survey at
  growing sizes, every 3-way table; the seconds of the provable attack alone
  and with the best guess, and their ratio, measured in the same process.

Run: ``.venv/bin/python benchmarks/bench_putative.py [--time-limit 120] [--only scores|scale]``
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
from _latent_class import SIZES, write_latent_class
from tablesafe._cli._methods import protection_from_options
from tablesafe.attacks import all_k_way_requests, reconstruction_attack
from tablesafe.catalog._dataset import Dataset
from tablesafe.prepare._demo import write_demo_data


def _p(x: float) -> str:
    return f"{100 * x:.0f}"


def scores(folder: Path, time_limit: float) -> None:
    dataset = write_latent_class(folder / "latent", 300, seed=28)
    requests = all_k_way_requests(dataset.catalog, list(SIZES), 3)
    print("\n### 300 records, 120 cells, all four 3-way tables\n")
    print(
        "| method | provable: uniques % | best guess: cells % | records % | uniques % | "
        "claimed | precision % | ranked precision top 10% / all | baseline: cells % | "
        "uniques % | precision % |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for method in ("none", "ckm", "dp", "q"):
        r = reconstruction_attack(
            dataset, requests, protection_from_options(method), time_limit=time_limit, ranked=20
        )
        g, b = r.putative, r.putative["baseline"]
        rk = g["ranked_precision"]
        print(
            f"| {method} | {_p(r.uniques_exact_share)} | {_p(g['cells_exact_share'])} | "
            f"{_p(g['records_exact_share'])} | {_p(g['uniques_exact_share'])} | "
            f"{g['uniques_claimed']} | {_p(g['uniques_precision'])} | "
            f"{_p(rk['top_10'])} / {_p(rk['all'])} | {_p(b['cells_exact_share'])} | "
            f"{_p(b['uniques_exact_share'])} | {_p(b['uniques_precision'])} |",
            flush=True,
        )
    print(f"\nCells holding one record: {_p(r.putative['base_rate'])}% ({r.uniques} of {r.cells}).")


def scale(folder: Path, time_limit: float) -> None:
    print("\n### Scaling: every 3-way table, ckm\n")
    print(
        "| file | records | cells | figures | provable s | with best guess s | "
        "best guess s | ratio | proven closest |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    setups: list[tuple[str, Dataset, list[str]]] = []
    for n in (400, 2_000, 10_000):
        census = write_census_like(folder / f"census{n}", n, seed=0)
        setups.append(("census-like", census, ["AGE", "SEX", "AREA", "TENURE"]))
    demo = Dataset.open(write_demo_data(folder / "demo", 10_000, seed=2026, replicates=4))
    setups.append(("demo survey", demo, ["REGION", "SEX", "AGEGRP", "MARSTAT", "TENURE"]))
    protection = protection_from_options("ckm")
    for title, dataset, variables in setups:
        requests = all_k_way_requests(dataset.catalog, variables, 3)
        start = time.perf_counter()
        bare = reconstruction_attack(
            dataset, requests, protection, time_limit=time_limit, putative=False
        )
        t0 = time.perf_counter() - start
        start = time.perf_counter()
        full = reconstruction_attack(dataset, requests, protection, time_limit=time_limit)
        t1 = time.perf_counter() - start
        g = full.putative
        print(
            f"| {title} | {bare.records:,} | {bare.cells:,} | {g['figures']:,} | {t0:.1f} | "
            f"{t1:.1f} | {t1 - t0:.1f} | {t1 / t0:.2f} | {g['optimal']} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--only", choices=("scores", "scale"), default=None)
    args = parser.parse_args()
    # A fixed stand-in secret (a benchmark, not a site).
    os.environ.setdefault("TABLESAFE_SECRET", "benchmark-secret-not-for-production-0000")
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "scores"):
            scores(Path(tmp), args.time_limit)
        if args.only in (None, "scale"):
            scale(Path(tmp), args.time_limit)


if __name__ == "__main__":
    main()
