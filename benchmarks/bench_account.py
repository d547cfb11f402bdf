"""Benchmark: the account of every published figure (issue 37), attacked and used honestly.

Parts (``--only``):

* ``census``: a broad workload on the census-like file with related
  variables (:mod:`_census_workload`: 128 distinct 2- and 3-way tables, all
  records or one region) asked by 16 clients at once, in 2 rounds (the
  second asks every table again); counts the tables answered, answered with
  cells withheld (and over 10% of them), refused; the second round must give
  the same bytes. ``--records`` (default 1,000,000) and ``--undeclared``
  (the catalog without the relation).
* ``session``: a researcher's session of 100 ordinary tables on the demo
  survey (:func:`session`), the recommended site.
* ``attacks``: the group-difference attack and its variants
  (:mod:`tablesafe.attacks._groups`) on the demo survey, with the account and
  without (``m = 0``), for ckm, DP and q-records.

Usage:
    python benchmarks/bench_account.py [--only census,session,attacks] [--records 1000000]
        [--demo-records 200000] [--undeclared]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _census_workload import census, workload

SECRET_ENV = "TS_BENCH_ACCOUNT_SECRET"
os.environ.setdefault(SECRET_ENV, "bench-account-secret-0123456789abcdef")
CKM = {"method": "ckm", "max_deviation": 3, "variance": 1.0, "seeds": "keyed",
       "secret_env": SECRET_ENV}  # fmt: skip


def service(folder: Path, tmp: str, protection: dict, **rules):
    from tablesafe._settings import load_site_config
    from tablesafe.service._service import TableService

    site = load_site_config(
        data={
            "base": tmp,
            "server": {"title": "bench", "audit_db": "state.sqlite", "cache_tables": 0},
            "datasets": [
                {
                    "name": "data",
                    "path": str(folder),
                    "protection": protection,
                    "rules": {
                        "min_cell_size": 3,
                        "min_universe_size": 50,
                        "max_cells": 20_000,
                        **rules,
                    },
                }
            ],
        }
    )
    return TableService(site)


def _ask(svc, who, body: dict) -> tuple[str, bytes, int, int]:
    """(outcome, the table's bytes, cells, cells withheld)."""
    from tablesafe._errors import RefusedError
    from tablesafe.service._bodies import TableBody

    try:
        table = svc.table(who, "data", TableBody(**body).to_request())
    except RefusedError as exc:
        return ("refused: " + str(exc)[:80], b"", 0, 0)
    cells = int((table.computed & ~table.structural_zero).sum())
    withheld = 0 if table.withheld is None else int(table.withheld.sum())
    return ("answered", table.to_csv().encode(), cells, withheld)


def census_part(records: int, undeclared: bool) -> dict:
    from tablesafe.service import Principal

    folder = census(records, relations=not undeclared)
    bodies = workload(128)
    out: dict = {"records": records, "relation declared": not undeclared, "tables": len(bodies)}
    with tempfile.TemporaryDirectory() as tmp:
        svc = service(folder, tmp, CKM, sliver_min_difference=10)
        try:
            rounds = []
            for _ in range(2):
                t0 = time.perf_counter()
                with ThreadPoolExecutor(max_workers=16) as pool:
                    results = list(
                        pool.map(
                            lambda ib: _ask(
                                svc, Principal(f"client{ib[0] % 16}", "user", 10**9), ib[1]
                            ),
                            enumerate(bodies),
                        )
                    )
                rounds.append((results, time.perf_counter() - t0))
        finally:
            svc.close()
    first, seconds = rounds[0]
    answered = sum(o == "answered" for o, *_ in first)
    over = sum(o == "answered" and w > 0.1 * c for o, _, c, w in first)
    out |= {
        "answered": answered,
        "answered with cells withheld": sum(o == "answered" and w > 0 for o, _, _, w in first),
        "withheld over 10%": over,
        "refused": len(first) - answered,
        "answered (a table over 10% withheld counts against)": (answered - over) / len(first),
        "cells withheld, share": sum(w for *_, w in first) / max(1, sum(c for *_, c, _ in first)),
        # Every table answered in round 1 is answered again with the same bytes.
        "answered again with the same bytes": all(
            a[:2] == b[:2] for a, b in zip(first, rounds[1][0], strict=True) if a[0] == "answered"
        ),
        "refused in round 1, answered in round 2": sum(
            a[0] != "answered" and b[0] == "answered"
            for a, b in zip(first, rounds[1][0], strict=True)
        ),
        "seconds, round 1": round(seconds, 1),
        "seconds, round 2": round(rounds[1][1], 1),
        "refusals (first 5)": [o for o, *_ in first if o != "answered"][:5],
    }
    return out


def session(count: int = 100, seed: int = 1) -> list[dict]:
    """A researcher's session on the demo survey: ordinary 1-3-way tables (request bodies)."""
    rng = random.Random(seed)
    pool = ["REGION", "ZONE", "SEX", "AGEGRP", "AGE5", "MARSTAT", "HHSIZE", "EDUC", "EMPSTAT",
            "OCC", "TENURE"]  # fmt: skip
    seen, out = set(), []
    while len(out) < count:
        universe: dict = {}
        r = rng.random()
        if r < 0.3:
            universe["REGION"] = [rng.randint(1, 8)]
        elif r < 0.4:
            universe["ZONE"] = [rng.choice(["N", "C", "S"])]
        elif r < 0.6:
            universe["REGION"] = [rng.randint(1, 8)]
            extra = rng.choice(["SEX", "AGEGRP"])
            universe[extra] = [rng.randint(1, 2)] if extra == "SEX" else [rng.randint(2, 8)]
        k = rng.choices([1, 2, 3], weights=[2, 5, 3])[0]
        geography = {"REGION", "ZONE"}
        free = [
            v
            for v in pool
            if v not in universe and not (v in geography and geography & set(universe))
        ]
        dims = rng.sample(free, k)
        if {"AGEGRP", "AGE5"} <= set(dims) or geography <= set(dims):
            continue
        stat = rng.choice(["count", "weighted", "both",
                           "weighted,percent:row" if k > 1 else "weighted,percent:total",
                           "weighted,mean:INCOME"])  # fmt: skip
        key = (tuple(dims), json.dumps(universe, sort_keys=True), stat)
        if key not in seen:
            seen.add(key)
            out.append({"dimensions": dims, "universe": universe, "statistic": stat})
    return out


def session_part(records: int) -> dict:
    from tablesafe.prepare._demo import write_demo_data
    from tablesafe.service import Principal

    folder = Path(__file__).parent / "_data" / f"demo_{records}"
    if not (folder / "catalog.toml").exists():
        write_demo_data(folder, records, seed=2026)
    bodies = session()
    with tempfile.TemporaryDirectory() as tmp:
        svc = service(folder, tmp, {**CKM, "additivity": "aggregate"}, sliver_min_difference=10,
                      max_cells=10_000)  # fmt: skip
        try:
            who = Principal("researcher", "user", 10**9)
            results = [_ask(svc, who, b) for b in bodies]
        finally:
            svc.close()
    answered = sum(o == "answered" for o, *_ in results)
    return {
        "demo records": records,
        "tables": len(bodies),
        "answered": answered,
        "answered with cells withheld": sum(o == "answered" and w > 0 for o, _, _, w in results),
        "refused": len(bodies) - answered,
        "digest": hashlib.sha256(b"".join(r[1] for r in results)).hexdigest()[:12],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="census,session")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--demo-records", type=int, default=200_000)
    parser.add_argument("--undeclared", action="store_true")
    args = parser.parse_args()
    parts = args.only.split(",")
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    if "census" in parts:
        print(json.dumps(census_part(args.records, args.undeclared), indent=1))
    if "session" in parts:
        print(json.dumps(session_part(args.demo_records), indent=1))


if __name__ == "__main__":
    main()
