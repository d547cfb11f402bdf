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


def _site(data: Path, state: Path, protection: dict[str, Any], rules: dict[str, Any]) -> Any:
    from tablesafe._settings import load_site_config

    os.environ["TABLESAFE_BENCH_SECRET"] = SECRET
    return load_site_config(
        data={
            "base": str(state.parent),
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
    )


def _per_query(epsilon: float, cap: int) -> dict[str, Any]:
    return {"method": "dp", "epsilon": epsilon, "cap": cap, "seeds": "keyed"}


def _dp_marginals(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "method": "dp-marginals",
        "epsilon": args.epsilon,
        "delta": 1e-9,
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
            out["ledger"] = summary(tx.ledger.dataset)
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
            rel_w.extend((np.abs(table.weighted - true.weighted) / true.weighted)[big].tolist())
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
        "counts": len(counts),
        "weighted_median_rel": med(rel_w) if rel_w else math.nan,
        "mean_median_rel": med(rel_mean) if rel_mean else math.nan,
        "margin_covered": covered,
        "margin_inside": inside / covered if covered else math.nan,
    }


def _report(name: str, run: dict[str, Any], errors: dict[str, float]) -> None:
    answered = sum(t is not None for _, t in run["tables"])
    secs = sorted(run["seconds"])
    print(
        f"{name}: {answered} of {len(run['tables'])} answered, refused {run['refused'] or 0}; "
        f"ledger epsilon {run['ledger']['epsilon_spent']:.4g} (delta "
        f"{run['ledger']['delta_spent']:.3g}); count MAE {errors['count_mae']:.2f} over "
        f"{errors['counts']} counts; weighted >= 1,000 median rel. error "
        f"{errors['weighted_median_rel']:.4f}; means median rel. error "
        f"{errors['mean_median_rel']:.4f}; margins cover {errors['margin_inside']:.3f} of "
        f"{errors['margin_covered']}; table time median {statistics.median(secs):.3f} s, "
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
    args = parser.parse_args()

    from tablesafe import Dataset, TableBuilder
    from tablesafe._protection import Protection

    data = _data(args.data, args.records)
    truth = TableBuilder(Dataset.open(data), Protection(None))
    requests = [as_request(b) for b in research_session(args.tables, seed=args.session_seed)]
    print(
        f"{len(requests)} tables of the session (seed {args.session_seed}), {args.records} records"
    )
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        if args.only != "dp-marginals":
            site = _site(
                data,
                state / "a.sqlite",
                _per_query(1.0, 7),
                {"privacy_budget_epsilon": args.epsilon},
            )
            run = _run(site, requests)
            _report("per-query dp, epsilon 1 a figure, budget 4", run, _errors(run, truth))
            loss = _run(_site(data, state / "b.sqlite", _per_query(1.0, 7), {}), requests)
            total = loss["ledger"]["epsilon_spent"]
            eps = args.epsilon / total
            print(
                f"the session at epsilon 1 a figure: ledger epsilon {total:.4g}; "
                f"a figure's for 4: {eps:.4g}"
            )
            site = _site(
                data,
                state / "c.sqlite",
                _per_query(eps, _cap(eps)),
                {"privacy_budget_epsilon": args.epsilon},
            )
            run = _run(site, requests)
            _report(
                f"per-query dp, epsilon {eps:.4g} a figure (cap {_cap(eps)})",
                run,
                _errors(run, truth),
            )
        if args.only != "per-query":
            site = _site(
                data,
                state / "d.sqlite",
                _dp_marginals(args),
                {"privacy_budget_epsilon": args.epsilon},
            )
            run = _run(site, requests)
            _report(f"dp-marginals, epsilon {args.epsilon:g} once", run, _errors(run, truth))


if __name__ == "__main__":
    main()
