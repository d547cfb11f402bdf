"""The pre-flight check and the nearest passing alternatives on a researcher's session (issue 40).

A session of ordinary tables (``_sessions.research_session``: 1 to 3
variables, common universes, counts, weighted figures, percentages, means)
is asked, in order, of one ``TableService`` with demo/site.toml's protection
and rules (optionally the putative-risk ceiling docs/choosing.md recommends,
or a DP site with a budget). Before each table a dry run (``service.check``,
what ``POST .../tables:check`` runs) is timed; then the table is asked for
real (its audit row written as the HTTP gate writes it, so the ceiling sees
what was served), and a refused or partly withheld table's alternatives are
searched and timed, and its nearest alternative asked for real of a new
service on a copy of the state store as it then is (the session's own state
goes on unchanged). The benchmark prints how many tables were answered in
full, answered with cells withheld, refused (by kind), how many of the
refused and withheld got at least one alternative, how many nearest
alternatives were answered in full, the dry runs per search, and the times.

    python benchmarks/bench_alternatives.py [--records 200000] [--tables 100]
        [--session-seed 1] [--sessions 1] [--ceiling 0.005] [--dp-budget 4]
        [--max-dry-runs 12]

Data: ``tablesafe demo-data DIR --records N --seed 2026``, written once to a
temporary folder (shared with bench_ceiling.py) or ``--data DIR``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from _sessions import as_request, research_session  # noqa: E402

SECRET = "alternatives-benchmark-secret-0123456789abcdef"


def _data(folder: Path | None, records: int) -> Path:
    folder = folder or Path(tempfile.gettempdir()) / f"tablesafe-bench-demo-{records}"
    if not (folder / "catalog.toml").exists():
        from tablesafe.prepare._demo import write_demo_data

        write_demo_data(folder, records, seed=2026)
    return folder


def _site(data: Path, state: Path, args: argparse.Namespace) -> Any:
    from tablesafe._settings import load_site_config

    demo = tomllib.loads((BENCH.parent / "demo" / "site.toml").read_text())["datasets"][0]
    protection = {k: v for k, v in demo["protection"].items() if k != "secret_file"}
    rules = dict(demo["rules"])
    if args.ceiling:
        rules["putative_uniques_ceiling"] = args.ceiling
    if args.max_dry_runs is not None:
        rules["alternatives_max_dry_runs"] = args.max_dry_runs
    if args.dp_budget:
        protection = {"method": "dp", "epsilon": 1.0, "cap": 40, "seeds": "keyed"}
        rules["privacy_budget_epsilon"] = args.dp_budget
    os.environ["TABLESAFE_BENCH_SECRET"] = SECRET
    protection["secret_env"] = "TABLESAFE_BENCH_SECRET"
    return load_site_config(
        data={
            "base": str(state.parent),
            "server": {"title": "bench", "audit_db": state.name},
            "datasets": [
                {"name": "demo", "path": str(data), "protection": protection, "rules": rules}
            ],
        }
    )


def _counting(site: Any) -> Any:
    """A TableService that counts its dry runs (the search's cost in dry runs)."""
    from tablesafe.service._service import TableService

    class Counting(TableService):
        runs = 0

        def check(self, who: Any, name: str, request: Any) -> Any:
            self.runs += 1
            return super().check(who, name, request)

    return Counting(site)


def _ms(seconds: list[float]) -> str:
    if not seconds:
        return "-"
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return (
        f"p50 {1000 * statistics.median(ordered):.0f} ms, p99 {1000 * p99:.0f} ms, "
        f"max {1000 * ordered[-1]:.0f} ms (of {len(ordered)})"
    )


def _on_a_copy(site: Any, state: Path, who: Any, request: Any) -> bool:
    """Whether ``request`` is answered in full by a new service on a copy of the state now.

    The session's own state store is left as it is.
    """
    import sqlite3

    from tablesafe._errors import UserError
    from tablesafe.service._service import TableService

    copy = state.with_name("copy.sqlite")
    for path in state.parent.glob("copy.sqlite*"):
        path.unlink()
    with sqlite3.connect(state) as source, sqlite3.connect(copy) as target:
        source.backup(target)
    other = TableService(site.model_copy(update={"server": site.server.model_copy(
        update={"audit_db": copy.name})}))  # fmt: skip
    try:
        table = other.table(who, "demo", request)
    except UserError:
        return False
    finally:
        other.close()
    return table.withheld is None or not bool(table.withheld.any())


def _session(
    service: Any, who: Any, bodies: list[dict[str, Any]], site: Any, state: Path
) -> dict[str, Any]:
    """Each table: a timed dry run, the real request, then a refusal's search.

    A refused or partly withheld table's alternatives are searched and timed,
    and the nearest one asked on a copy of the state store as it then is.
    """
    from tablesafe._errors import UserError

    out: dict[str, Any] = {"kinds": Counter(), "checks": [], "searches": [], "runs": []}
    out["offered"], out["helped"], out["full"] = [], 0, 0
    for body in bodies:
        request = as_request(body)
        started = time.perf_counter()
        service.check(who, "demo", request)
        out["checks"].append(time.perf_counter() - started)
        service.runs = 0
        started = time.perf_counter()
        try:
            table = service.table(who, "demo", request)
        except UserError as exc:
            out["kinds"][type(exc).__name__] += 1
            found = exc.alternatives
        else:
            service.state.record(
                key_id=who.id, endpoint="POST /api/datasets/demo/tables", status=200,
                outcome="ok", client="bench", dataset="demo", request=body,
            )  # fmt: skip
            if table.withheld is None or not table.withheld.any():
                out["kinds"]["answered in full"] += 1
                continue
            out["kinds"]["answered with cells withheld"] += 1
            service.runs = 0
            started = time.perf_counter()
            found = service.alternatives(who, "demo", request)
        out["searches"].append(time.perf_counter() - started)
        out["runs"].append(service.runs)
        out["helped"] += bool(found)
        out["offered"].append(found)
        if found:
            out["full"] += _on_a_copy(site, state, who, found[0].request)
    return out


def _merge(total: dict[str, Any], out: dict[str, Any]) -> None:
    """Add one session's counts and times to ``total`` (its first check kept apart: cold)."""
    total["kinds"].update(out["kinds"])
    total["cold"].append(out["checks"][0])
    total["checks"] += out["checks"][1:]
    for name in ("searches", "runs", "offered"):
        total[name] += out[name]
    total["helped"] += out["helped"]
    total["full"] += out["full"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--session-seed", type=int, default=1)
    parser.add_argument("--sessions", type=int, default=1, help="seeds from --session-seed on")
    parser.add_argument("--ceiling", type=float, default=None)
    parser.add_argument("--dp-budget", type=float, default=None)
    parser.add_argument("--max-dry-runs", type=int, default=None, help="default: the site's")
    parser.add_argument("--data", type=Path, default=None)
    args = parser.parse_args()
    from tablesafe.service import Principal

    data = _data(args.data, args.records)
    total: dict[str, Any] = {"kinds": Counter(), "cold": [], "checks": [], "searches": [],
                             "runs": [], "offered": [], "helped": 0, "full": 0}  # fmt: skip
    seeds = range(args.session_seed, args.session_seed + args.sessions)
    for seed in seeds:
        # Each session a researcher's own site: a new state store.
        with tempfile.TemporaryDirectory() as tmp:
            state = Path(tmp) / "state.sqlite"
            site = _site(data, state, args)
            service = _counting(site)
            who = Principal("researcher", "user", 10**9)
            try:
                bodies = research_session(args.tables, seed=seed)
                _merge(total, _session(service, who, bodies, site, state))
            finally:
                service.close()
    _report(args, list(seeds), total)


def _report(args: argparse.Namespace, seeds: list[int], out: dict[str, Any]) -> None:
    runs = "default" if args.max_dry_runs is None else args.max_dry_runs
    print(f"records {args.records}, tables {args.tables} per session, session seeds {seeds}, "
          f"ceiling {args.ceiling}, DP budget {args.dp_budget}, "
          f"alternatives_max_dry_runs {runs}")  # fmt: skip
    for kind, n in sorted(out["kinds"].items()):
        print(f"  {kind}: {n}")
    needing = len(out["offered"])
    print(f"refused or withheld: {needing}, with at least one alternative: {out['helped']}")
    print(f"nearest alternative asked then (a copy of the state store): {out['full']} of "
          f"{out['helped']} answered in full")  # fmt: skip
    print(f"dry run (the pre-flight check), each session's first (cold): {_ms(out['cold'])}")
    print(f"dry run (the pre-flight check), the others: {_ms(out['checks'])}")
    print(f"search of a refused or withheld table: {_ms(out['searches'])}")
    if out["runs"]:
        print(f"dry runs per search: median {statistics.median(out['runs'])}, "
              f"max {max(out['runs'])}")  # fmt: skip
    print(f"load: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
