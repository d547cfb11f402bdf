"""DP within one fixed budget against per-query DP, on a researcher's session (issue 40).

A session of ordinary tables (``_sessions.research_session``: 1 to 3
variables of the demo survey, common universes, counts, weighted figures,
percentages, weighted means of INCOME) is asked, in order, of three sites
built from the same demo data, each through ``TableService`` (the one path):

* ``per-query``: ``method = "dp"`` at epsilon 1 a figure with
  ``privacy_budget_epsilon = 4`` (the per-query accounting of the ledger);
* ``per-query, all answered``: ``method = "dp"`` at the epsilon a figure for
  which the whole session's ledger loss is 4 (the session is first asked at
  epsilon 1 without a budget: its loss L; then at 4 / L, cap wide enough
  that the ptable's delta is below 1e-9);
* ``dp-marginals``: the whole budget (epsilon 4, delta 1e-9) spent once.

For each it prints the tables answered and refused, the ledger's largest
loss of any record after the session, and the error of every answered
table's figures against the unprotected ones: the mean absolute error per
count (inner cells and margins), the median relative error of weighted
counts of at least 1,000 (thousands of people), and the median relative
error of means, with the share of counts inside their stated 95% margin.

    python benchmarks/bench_dp_marginals.py [--records 200000] [--tables 100]
        [--session-seed 1] [--epsilon 4] [--iterations 1000] [--data DIR]

Data: ``tablesafe demo-data DIR --records N --seed 2026`` (written once to a
temporary folder, or ``--data DIR``). Making the release (measure and fit)
is timed; it is made once per microdata and kept in the state store.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from _sessions import as_request, research_session  # noqa: E402

SECRET = "dp-marginals-benchmark-secret-0123456789"

#: The delta of the site's total (the release's, and the one the ledgers state epsilon at).
DELTA = 1e-9

#: The demo's bins: hours and income at their bins' midpoints (public edges).
BINS = {
    "HOURS": [0, 1, 10, 20, 30, 35, 40, 45, 50, 60, 70],
    "INCOME": [0, 1, 2500, 5000, 7500, 10000, 15000, 20000, 25000, 30000, 35000, 40000,
               50000, 60000, 80000, 100000, 150000, 200000],
}  # fmt: skip


def _data(folder: Path | None, records: int) -> Path:
    from tablesafe.prepare._demo import write_demo_data

    folder = folder or Path(tempfile.gettempdir()) / f"tablesafe-bench-demo-{records}"
    if not (folder / "catalog.toml").exists():
        write_demo_data(folder, records, seed=2026)
    return folder


def _settings(
    data: Path, state: Path, protection: dict[str, Any], rules: dict[str, Any]
) -> dict[str, Any]:
    """A site's settings, as its TOML file would hold them (absolute paths)."""
    return {
        "server": {"title": "bench", "audit_db": str(state), "cache_tables": 0},
        "datasets": [
            {
                "name": "demo",
                "path": str(data),
                "protection": {**protection, "secret_env": "TABLESAFE_BENCH_SECRET"},
                "rules": {"min_universe_size": 0, "sliver_min_difference": 0, **rules},
                "magnitudes": {"method": "dp", "epsilon": protection.get("epsilon", 1.0)},
            }
        ],
    }


def _site(data: Path, state: Path, protection: dict[str, Any], rules: dict[str, Any]) -> Any:
    from tablesafe._settings import load_site_config

    os.environ["TABLESAFE_BENCH_SECRET"] = SECRET
    settings = _settings(data, state, protection, rules)
    return load_site_config(data={"base": str(state.parent), **settings})


def _per_query(epsilon: float, cap: int) -> dict[str, Any]:
    return {"method": "dp", "epsilon": epsilon, "cap": cap, "seeds": "keyed"}


def _dp_marginals(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "method": "dp-marginals",
        "epsilon": args.epsilon,
        "delta": DELTA,
        "marginals": {
            "weight_range": [20, 500],
            "bins": BINS,
            "iterations": args.iterations,
            "max_model_mib": args.max_model_mib,
            "workload": args.workload,
        },
    }


def _cap(epsilon: float, delta: float = 1e-9) -> int:
    """A cap at which the dp ptable's delta is below ``delta`` (its tail past the cap)."""
    return min(1000, math.ceil(math.log(2 / delta) / epsilon) + 1)


#: Releases made by earlier runs (one per microdata and parameters): a run reuses them
#: unless ``--fresh``, as a site's restart does (making one fits for minutes).
RELEASES = Path(tempfile.gettempdir()) / "tablesafe-bench-dp-marginals-releases.sqlite"


def _share_releases(state: Path, into_state: bool) -> None:
    """Copy the kept releases into the site's state store, or its releases back."""
    import sqlite3

    from tablesafe.state import SQLiteState

    for path in (state, RELEASES):
        SQLiteState(path).close()  # created and migrated
    con = sqlite3.connect(RELEASES if into_state else state)  # the source
    with con:
        con.execute("ATTACH DATABASE ? AS other", (str(state if into_state else RELEASES),))
        con.execute("INSERT OR IGNORE INTO other.releases SELECT * FROM main.releases")
    con.close()


def _per_figure(k: int, total: float) -> tuple[float, int]:
    """The largest epsilon a figure (to 0.1%) at which ``k`` DP figures spend ``total``.

    Composed by the ledger's own accountant at :data:`DELTA`, each with a cap
    whose tail leaves the ``k`` figures' deltas a tenth of it.
    """
    from tablesafe.mechanisms import dp_geometric
    from tablesafe.rules._ledger_pld import epsilon_at, ptable_descriptor

    low, high = 0.0, total
    while high - low > 1e-3 * high:
        mid = (low + high) / 2
        table = dp_geometric(mid, cap=_cap(mid, DELTA / (10 * k)))
        if epsilon_at({ptable_descriptor(table): k}, DELTA) <= total:
            low = mid
        else:
            high = mid
    return low, _cap(low, DELTA / (10 * k))


def _run(site: Any, requests: list[Any]) -> dict[str, Any]:
    """Ask the session of one site: tables, refusals, the ledger's largest loss, times."""
    from tablesafe._errors import UserError
    from tablesafe.rules._ledger import summary
    from tablesafe.service import Principal
    from tablesafe.service._service import TableService

    service = TableService(site)
    who = Principal("researcher", "user", 10**9)
    out: dict[str, Any] = {"tables": [], "refused": {}, "seconds": []}
    try:
        for request in requests:
            start = time.perf_counter()
            try:
                out["tables"].append((request, service.table(who, "demo", request)))
            except UserError as exc:
                kind = type(exc).__name__
                out["refused"][kind] = out["refused"].get(kind, 0) + 1
                out["tables"].append((request, None))
            out["seconds"].append(time.perf_counter() - start)
        with service.state.transaction(service.identity("demo")) as tx:
            out["ledger"] = summary(tx.ledger.dataset, DELTA)
    finally:
        service.close()
    return out


def _errors(run: dict[str, Any], truth: Any) -> dict[str, float]:
    """Errors of the answered tables' figures against the unprotected ones."""
    counts, rel_w, rel_mean, inside, covered = [], [], [], 0, 0
    for request, table in run["tables"]:
        if table is None:
            continue
        true = truth.build(request)
        cells = table.computed
        if table.counts is not None and true.counts is not None:
            counts.extend(np.abs(table.counts - true.counts)[cells].tolist())
        if table.weighted is not None and true.weighted is not None:
            big = cells & (true.weighted >= 1000)
            rel_w.extend(
                (np.abs(table.weighted - true.weighted)[big] / true.weighted[big]).tolist()
            )
        for col, values in (table.magnitudes or {}).items():
            tv = true.magnitudes[col]
            ok = cells & np.isfinite(values) & (np.abs(tv) > 0)
            rel_mean.extend((np.abs(values - tv) / np.abs(tv))[ok].tolist())
        margin = table.metadata.get("release", {}).get("count_margin_of_error")
        if margin is not None and table.counts is not None:
            m = np.array(margin, dtype=float)
            has = cells & ~np.isnan(m)
            covered += int(has.sum())
            inside += int((np.abs(table.counts - true.counts)[has] <= m[has] + 0.5).sum())
    med = statistics.median
    return {
        "count_mae": float(np.mean(counts)) if counts else math.nan,
        "count_median": float(np.median(counts)) if counts else math.nan,
        "counts": len(counts),
        "weighted_median_rel": med(rel_w) if rel_w else math.nan,
        "mean_median_rel": med(rel_mean) if rel_mean else math.nan,
        "margin_covered": covered,
        "margin_inside": inside / covered if covered else math.nan,
    }


#: The averaging attack's target (docs/attacks.md): AGE 77-83 by SEX in REGION 4, EMPSTAT 1.
AVERAGING = ["--variable", "AGE", "--targets", "77..83", "--pad", "20..60", "--second", "SEX",
             "--universe", "REGION=4", "--universe", "EMPSTAT=1", "--grouping-of", "EDUC",
             "--magnitude", "HOURS"]  # fmt: skip


def _attacks(name: str, data: Path, settings: dict[str, Any], tables: int, zeros: str) -> None:
    """``tablesafe attack averaging`` and ``zeros`` against the site's settings (``--config``)."""
    import json
    import subprocess

    import tomli_w

    config = Path(settings["server"]["audit_db"]).with_suffix(".toml")
    config.write_text(tomli_w.dumps(settings))
    env = {**os.environ, "TABLESAFE_BENCH_SECRET": SECRET}

    def attack(*argv: str) -> dict[str, Any]:
        cmd = [sys.executable, "-m", "tablesafe", "attack", *argv, str(data), "--config",
               str(config), "--format", "json"]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)}: {done.stderr}")
        return json.loads(done.stdout)[0]  # type: ignore[no-any-return]

    a = attack("averaging", *AVERAGING, "--tables", str(tables))
    sums = max((c.get("sum_distinct", 0) for c in a["cells"]), default=0)
    print(
        f"  {name}, averaging ({' '.join(AVERAGING[:8])} ...): {a['tables']} tables, "
        f"{a['refused']} refused; of {a['target_cells']} target cells "
        f"{a['exact_after_one_table']} exact from the first table, "
        f"{a['exact_after_all_tables']} from all; at most {a['most_distinct_values']} distinct "
        f"counts and {sums} distinct HOURS sums per cell"
    )
    z = attack("zeros", "--variables", zeros)
    print(
        f"  {name}, zeros (3-way tables of {zeros}): {z['empty_published_nonzero']} of "
        f"{z['empty_cells']} empty and {z['one_record_published_nonzero']} of "
        f"{z['one_record_cells']} one-record cells published non-zero; stated epsilon "
        f"{z['epsilon']:g}, delta {z['delta']:g}: "
        f"{'hold' if z['stated_figures_hold'] else 'DO NOT hold'}"
    )


def _report(name: str, run: dict[str, Any], errors: dict[str, float], args: Any) -> None:
    answered = sum(t is not None for _, t in run["tables"])
    secs = sorted(run["seconds"])
    spent = run["ledger"]["epsilon_spent"]
    print(
        f"{name}: {answered} of {len(run['tables'])} answered, refused {run['refused'] or 0}; "
        f"ledger epsilon {spent:.4g} at delta {run['ledger']['delta']:.3g} "
        f"({run['ledger']['figures_per_record']} figures a record; "
        f"{'at most' if spent <= args.epsilon else 'ABOVE'} the site's {args.epsilon:g}); "
        f"count MAE {errors['count_mae']:.2f} (median {errors['count_median']:g}) over "
        f"{errors['counts']} counts; weighted >= 1,000 median rel. error "
        f"{errors['weighted_median_rel']:.4f}; means median rel. error "
        f"{errors['mean_median_rel']:.4f}; a margin stated for {errors['margin_covered']} "
        f"counts, covering {errors['margin_inside']:.3f} of them; table time median "
        f"{statistics.median(secs):.3f} s, "
        f"first {run['seconds'][0]:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--data", type=Path)
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--session-seed", type=int, default=1)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--max-model-mib", type=float, default=16.0)
    parser.add_argument(
        "--workload", type=lambda s: [m.split("*") for m in s.split(",")], default=[]
    )
    parser.add_argument("--only", choices=["per-query", "dp-marginals"])
    parser.add_argument("--fresh", action="store_true", help="make the release again")
    parser.add_argument("--attack-tables", type=int, default=60, help="0: no attacks")
    parser.add_argument("--zeros", default="AGE,REGION,SEX,EDUC,TENURE")
    args = parser.parse_args()

    from tablesafe import Dataset, TableBuilder
    from tablesafe._protection import Protection

    data = _data(args.data, args.records)
    truth = TableBuilder(Dataset.open(data), Protection(None))
    requests = [as_request(b) for b in research_session(args.tables, seed=args.session_seed)]
    print(
        f"{len(requests)} tables of the session (seed {args.session_seed}), {args.records} records"
    )
    # Every ledger states epsilon at the release's delta: the sites' totals are one (4, 1e-9).
    delta = {"privacy_budget_delta": DELTA}
    budget = {"privacy_budget_epsilon": args.epsilon, **delta}
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        if args.only != "dp-marginals":
            one = _per_query(1.0, _cap(1.0))
            run = _run(_site(data, state / "a.sqlite", one, budget), requests)
            name = f"per-query dp, epsilon 1 a figure (cap {_cap(1.0)}), budget {args.epsilon:g}"
            _report(name, run, _errors(run, truth), args)
            loss = _run(_site(data, state / "b.sqlite", one, delta), requests)
            k = loss["ledger"]["figures_per_record"]
            eps, cap = _per_figure(k, args.epsilon)
            print(
                f"the session without a budget: {k} figures a record; {k} figures compose to "
                f"{args.epsilon:g} at delta {DELTA:g} at epsilon {eps:.4g} a figure (cap {cap})"
            )
            settings = _settings(data, state / "c.sqlite", _per_query(eps, cap), budget)
            run = _run(_site(data, state / "c.sqlite", _per_query(eps, cap), budget), requests)
            name = f"per-query dp, epsilon {eps:.4g} a figure (cap {cap})"
            _report(name, run, _errors(run, truth), args)
            if args.attack_tables:
                _attacks("per-query dp", data, settings, args.attack_tables, args.zeros)
        if args.only != "per-query":
            settings = _settings(data, state / "d.sqlite", _dp_marginals(args), budget)
            if not args.fresh:
                _share_releases(state / "d.sqlite", into_state=True)
            start = time.perf_counter()
            try:
                run = _run(_site(data, state / "d.sqlite", _dp_marginals(args), budget), requests)
            finally:  # kept even if a table fails
                _share_releases(state / "d.sqlite", into_state=False)
            name = f"dp-marginals, epsilon {args.epsilon:g} once"
            _report(name, run, _errors(run, truth), args)
            print(f"  the session, the release opened or made: {time.perf_counter() - start:.0f} s")
            if args.attack_tables:
                _attacks("dp-marginals", data, settings, args.attack_tables, args.zeros)


if __name__ == "__main__":
    main()
