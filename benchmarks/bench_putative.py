"""The putative (best-guess) reconstruction: its scores per method, and how far its solve scales.

Two parts, each printed as a Markdown table for docs/attacks.md:

* the 300-record latent-class file (``_latent_class.py``: 4 variables of 3, 4,
  2 and 5 categories, 120 cells), all four 3-way tables published: provable
  pins beside the best guess (cells, records, sample uniques exactly right;
  precision of the claimed uniques; the ranked precision over 20 re-solves)
  and the one-way baseline, for none, ckm, dp and q;
* scaling: the census-like file (``_census_like.py``) and the demo survey at
  growing sizes, every 3-way table; the seconds of the provable attack alone
  and with the best guess, and their ratio, measured in the same process;
* target: issue 15's target (10,000 demo records, every 2-way table of
  REGION, SEX, AGEGRP, MARSTAT, EDUC, TENURE: 15 tables, 9,216 cells), ckm:
  wall seconds of the whole attack and of its best-guess stage, whether the
  guess was proven optimal or stopped by the time limit, and its figures
  beside the one-way baseline's;
* files: the best guess's objectives (the most probable table under the
  ptable, with and without its prior; the L1-closest table) on latent-class
  files of other seeds, ckm and dp, mean shares;
* gate: the putative-risk ceiling's cost per request: tables of the demo
  survey asked one after the other, the seconds of each table's own build
  and of the gate's measure as the server runs it (``RiskGate.measure``:
  the share with the table until it cannot exceed ``--ceiling``, the share
  without it only for a refusal; a refused table is not published), their
  ratio and the solves it took, in the same process; with ``--exact`` also
  the seconds of the exact measure (every solve, no ceiling, no cell limit).

Run: ``.venv/bin/python benchmarks/bench_putative.py [--time-limit 120]
[--only scores|scale|target|files|gate] [--ceiling 0.02] [--max-cells 600] [--exact]``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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


def target(folder: Path, time_limit: float) -> None:
    variables = ["REGION", "SEX", "AGEGRP", "MARSTAT", "EDUC", "TENURE"]
    print(
        f"\n### Issue 15's target: every 2-way table of {', '.join(variables)}, "
        f"10,000 demo records, ckm, time limit {time_limit:g} s\n"
    )
    demo = Dataset.open(write_demo_data(folder / "demo", 10_000, seed=2026, replicates=4))
    requests = all_k_way_requests(demo.catalog, variables, 2)
    stage: dict[str, float] = {}

    def progress(name: str, done: int, total: int) -> None:
        stage.setdefault(name, time.perf_counter())

    start = time.perf_counter()
    r = reconstruction_attack(
        demo, requests, protection_from_options("ckm"), time_limit=time_limit, progress=progress
    )
    total = time.perf_counter() - start
    guess_s = time.perf_counter() - stage.get("best-guess reconstruction", start)
    g = r.putative
    print(
        "| tables | cells | figures | whole attack s | best guess s | proven optimal | "
        "objective | cells % | records % | uniques % | claimed | precision % | L1 to truth |"
    )
    print("|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
    rows = [(g.get("objective", ""), g), ("one-way baseline", g["baseline"])]
    for i, (name, s) in enumerate(rows):
        head = (
            f"| {len(requests)} | {r.cells:,} | {g['figures']:,} | {total:.1f} | {guess_s:.1f} | "
            f"{g['optimal']} "
            if i == 0
            else "| | | | | | "
        )
        if "cells_exact_share" not in s:
            print(f"{head}| {name} | no table found | | | | | |", flush=True)
            continue
        print(
            f"{head}| {name} | {100 * s['cells_exact_share']:.1f} | "
            f"{100 * s['records_exact_share']:.1f} | {100 * s['uniques_exact_share']:.1f} | "
            f"{s['uniques_claimed']} | {100 * s['uniques_precision']:.1f} | "
            f"{s['l1_distance']:,} |",
            flush=True,
        )
    print(f"\nCells holding one record: {100 * g['base_rate']:.1f}%.")


def files(folder: Path, seeds: list[int]) -> None:
    from tablesafe._builder import TableBuilder
    from tablesafe.attacks._reconstruct import _audit
    from tablesafe.attacks._reconstruct._putative import score
    from tablesafe.attacks._reconstruct._truth import read_truth
    from tablesafe.rules._ceiling._closest import closest_table
    from tablesafe.rules._ceiling._constraints import constraint_system, figures
    from tablesafe.rules._ceiling._cross import atoms_of, columns_of
    from tablesafe.rules._ceiling._likely import likeliest_table, ptable_likelihood

    print(f"\n### Objectives on latent-class files, seeds {seeds[0]}..{seeds[-1]} (means)\n")
    print("| method | objective | cells % | uniques % | precision % |")
    print("|---|---|---:|---:|---:|")
    for method in ("ckm", "dp"):
        prot = protection_from_options(method)
        rows: dict[str, list[dict[str, float]]] = {"L1": [], "likelihood": [], "posterior": []}
        for seed in seeds:
            data = write_latent_class(folder / f"latent{seed}", 300, seed=seed)
            cat = data.catalog
            bound = _audit._count_requests(cat, all_k_way_requests(cat, list(SIZES), 3))
            cols = columns_of(cat, bound)
            cross = read_truth(data, cols, atoms_of(cat, [r.bind(cat) for r in bound], cols))
            tables, intervals = _audit._publish(
                TableBuilder(data, prot), bound, prot, min_cell_size=0,
                small_cell_action="suppress", progress=None,
            )  # fmt: skip
            system, ub0 = constraint_system(cat, cross, tables, intervals)
            members, values = figures(cat, cross, tables, intervals, system)
            lik = ptable_likelihood(prot.mechanism, int(values.max()))
            guesses = {
                "L1": closest_table(system, ub0, members, values, time_limit=60)[0],
                "likelihood": likeliest_table(
                    system, ub0, members, values, lik, time_limit=60, prior_weight=0
                )[0],
                "posterior": likeliest_table(system, ub0, members, values, lik, time_limit=60)[0],
            }
            for name, guess in guesses.items():
                assert guess is not None
                rows[name].append(score(guess, cross.truth))
        for name, got in rows.items():
            mean = {k: sum(r[k] for r in got) / len(got) for k in got[0]}
            print(
                f"| {method} | {name} | {_p(mean['cells_exact_share'])} | "
                f"{_p(mean['uniques_exact_share'])} | {_p(mean['uniques_precision'])} |",
                flush=True,
            )


def gate(folder: Path, records: int, ceiling: float, exact: bool, max_cells: int) -> None:
    import tablesafe as ts
    from tablesafe._errors import RiskCeilingExceeded
    from tablesafe.rules._ceiling import _likely
    from tablesafe.rules._ceiling._measure import putative_risk
    from tablesafe.rules._ceiling._nearest import Nearest
    from tablesafe.service._risk_gate import RiskGate

    print(
        f"\n### The putative-risk ceiling's cost per request, demo survey, {records:,} records, "
        f"ceiling {100 * ceiling:g}%, putative_max_cells {max_cells:,}\n"
    )
    data = Dataset.open(write_demo_data(folder / "gate", records, seed=2026, replicates=4))
    prot = protection_from_options("ckm")
    builder = ts.TableBuilder(data, prot)
    variables = ["REGION", "SEX", "AGEGRP", "MARSTAT", "TENURE"]
    asked = [ts.TableRequest((v,), statistic="count") for v in variables]
    asked += all_k_way_requests(data.catalog, variables, 2)
    asked += all_k_way_requests(data.catalog, variables, 3)[:4]
    builder.build(asked[0])  # warm the engine's first query
    # Solves per measure, counted around the posterior's solve.
    solves = [0]
    solve = _likely.Posterior.solve

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        solves[0] += 1
        return solve(self, *args, **kwargs)

    _likely.Posterior.solve = counted  # type: ignore[method-assign]
    print(
        "| # | table | tables measured | table ms | gate ms | ratio | solves | share % | "
        + ("exact ms | exact share % | " if exact else "")
        + "decision |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if exact else "") + "---|")
    memory = RiskGate()
    nearest = Nearest(data.catalog, prot, 0, max_cells)
    ratios = []
    for i, request in enumerate(asked, 1):
        start = time.perf_counter()
        table = builder.build(request)
        t_table = time.perf_counter() - start
        published = list(memory.tables.values())
        solves[0] = 0
        start = time.perf_counter()
        # The gate's measure, as the server runs it (the share without the table only for
        # a refusal).
        measured: dict[str, Any] = {}
        try:
            risk = memory.measure(nearest, table, published, ceiling, measured)
            decision, share = ("answered", f"{100 * risk.share:.2f}")
            share += "" if risk.exact else " (at most)"
        except RiskCeilingExceeded as e:
            decision, share = ("refused: " + str(e)[27:60] + "...", "")
        t_gate = time.perf_counter() - start
        n_solves = solves[0]
        members = measured.get("tables", [])
        more = ""
        if exact:
            start = time.perf_counter()
            chosen = [t for t in published if repr(t.request) in members]
            try:
                full = putative_risk(data.catalog, [*chosen, table], prot, max_cells=10**6)
                more = f"{1000 * (time.perf_counter() - start):.0f} | {100 * full.share:.2f} | "
            except RiskCeilingExceeded:
                more = "- | - | "
        if decision == "answered":
            memory.tables[request] = table
        ratios.append(t_gate / t_table)
        print(
            f"| {i} | {' x '.join(request.dimensions)} | {len(members) + 1} | "
            f"{1000 * t_table:.0f} | {1000 * t_gate:.0f} | {t_gate / t_table:.1f} | "
            f"{n_solves} | {share} | {more}{decision} |",
            flush=True,
        )
    ratios.sort()
    print(f"\nRatio gate / table: median {ratios[len(ratios) // 2]:.1f}, largest {ratios[-1]:.1f}.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument(
        "--only", choices=("scores", "scale", "target", "files", "gate"), default=None
    )
    parser.add_argument("--records", type=int, default=10_000, help="gate: demo records")
    parser.add_argument("--ceiling", type=float, default=0.02, help="gate: the ceiling")
    parser.add_argument(
        "--max-cells", type=int, default=600, help="gate: putative_max_cells (the default)"
    )
    parser.add_argument(
        "--exact", action="store_true", help="gate: also time the exact measure (every solve)"
    )
    args = parser.parse_args()
    # A fixed stand-in secret (a benchmark, not a site).
    os.environ.setdefault("TABLESAFE_SECRET", "benchmark-secret-not-for-production-0000")
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "scores"):
            scores(Path(tmp), args.time_limit)
        if args.only in (None, "scale"):
            scale(Path(tmp), args.time_limit)
        if args.only in (None, "target"):
            target(Path(tmp), args.time_limit)
        if args.only in (None, "files"):
            files(Path(tmp), list(range(1, 12)))
        if args.only in (None, "gate"):
            gate(Path(tmp), args.records, args.ceiling, args.exact, args.max_cells)


if __name__ == "__main__":
    main()
