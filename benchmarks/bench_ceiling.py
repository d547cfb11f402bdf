"""The putative-risk ceiling on a researcher's session (issue 40).

A session of ordinary tables (``_sessions.research_session``: 1 to 3
variables, common universes, counts, weighted figures, percentages, means)
is asked, in order, of one ``TableService`` with demo/site.toml's
protection and rules and ``putative_uniques_ceiling`` set; then issue 28's
reconstruction, the four 3-way tables of a 300-record file of 4 associated
variables (``_latent_class.py``, a second dataset of the same site), whose
best guess found 60% of the sample uniques at 75% precision. The benchmark
prints how many tables were answered, refused by the ceiling, refused as not
measurable within the site's limit, and refused by other rules, with the
time of each; then asks every refused table again, in the same process and
in a new one on the same state store (a restart), and prints how long each
repeat of a table the ceiling refused took (a stored refusal, nothing built).

    python benchmarks/bench_ceiling.py [--records 200000] [--ceiling 0.005]
        [--tables 100] [--session-seed 1] [--max-cells N] [--no-guard]
        [--census-like]

Data: ``tablesafe demo-data DIR --records N --seed 2026`` (or the census-like
file of ``_census_like.py``, seed 2026), written once to a temporary folder
(or ``--data DIR``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from _sessions import CENSUS_LIKE, DEMO, as_body, research_session  # noqa: E402

SECRET = "ceiling-benchmark-secret-0123456789abcdef"


def _data(folder: Path | None, records: int, census: bool) -> Path:
    kind = "census" if census else "demo"
    folder = folder or Path(tempfile.gettempdir()) / f"tablesafe-bench-{kind}-{records}"
    if not (folder / "catalog.toml").exists():
        if census:
            from _census_like import write_census_like

            write_census_like(folder, records, seed=2026)
        else:
            from tablesafe.prepare._demo import write_demo_data

            write_demo_data(folder, records, seed=2026)
    return folder


#: Issue 28's reconstruction: every 3-way table of the 300-record file's 4 variables.
ATTACK = [
    {"dimensions": list(dims), "statistic": "count"}
    for dims in [("A", "B", "C"), ("A", "B", "D"), ("A", "C", "D"), ("B", "C", "D")]
]


def _site(data: Path, state: Path, args: argparse.Namespace) -> Any:
    """demo/site.toml's protection and rules on ``data`` and the attack's file, ceiling set."""
    from _latent_class import write_latent_class
    from tablesafe._settings import load_site_config

    demo = tomllib.loads((BENCH.parent / "demo" / "site.toml").read_text())["datasets"][0]
    protection = {k: v for k, v in demo["protection"].items() if k != "secret_file"}
    rules = dict(demo["rules"], putative_uniques_ceiling=args.ceiling)
    if args.max_cells:
        rules["putative_max_cells"] = args.max_cells
    if args.no_guard:
        rules["sliver_min_difference"] = 0
    os.environ["TABLESAFE_BENCH_SECRET"] = f"{SECRET}-{args.secret}"
    attack = write_latent_class(state.parent / "attack", 300, seed=28).path.parent
    protection = {**protection, "secret_env": "TABLESAFE_BENCH_SECRET"}
    return load_site_config(
        data={
            "base": str(state.parent),
            "server": {"title": "bench", "audit_db": str(state), "cache_tables": 0},
            "datasets": [
                {"name": "demo", "path": str(data), "protection": protection, "rules": rules},
                {
                    "name": "attack",
                    "path": str(attack),
                    "protection": protection,
                    "rules": {**rules, "min_universe_size": 0, "min_cell_size": 0},
                },
            ],
        }
    )


def _ask(service: Any, body: dict[str, Any], name: str = "demo") -> tuple[str, float, str]:
    """One table through the service's one path, as the audit log records it."""
    from tablesafe._errors import RiskCeilingExceeded, UserError
    from tablesafe.service import Principal

    who = Principal("researcher", "user", 10**9)
    start = time.perf_counter()
    try:
        service.answer(who, name, as_body(body))
        outcome, message = "answered", ""
    except RiskCeilingExceeded as exc:
        message = str(exc)
        outcome = "not measurable" if "cannot be measured" in message else "ceiling"
    except UserError as exc:
        outcome, message = f"other: {type(exc).__name__}", str(exc)
    seconds = time.perf_counter() - start
    service.audit.record(
        key_id=who.id,
        endpoint=f"POST /api/datasets/{name}/tables",
        status=200 if outcome == "answered" else 403,
        outcome="ok" if outcome == "answered" else outcome,
        dataset=name,
        request=body,
    )
    return outcome, seconds, message


def _summary(label: str, seconds: list[float]) -> str:
    if not seconds:
        return f"{label}: none"
    ms = sorted(1000 * s for s in seconds)
    return (
        f"{label}: {len(ms)}, median {statistics.median(ms):.2f} ms, "
        f"max {ms[-1]:.2f} ms, total {sum(ms) / 1000:.1f} s"
    )


def _run(
    service: Any, bodies: list[dict[str, Any]], name: str, verbose: bool
) -> list[tuple[dict[str, Any], str]]:
    """Ask ``bodies`` in order; print each table the ceiling refused, or slow; return those."""
    outcomes: dict[str, list[float]] = {}
    refused: list[tuple[dict[str, Any], str]] = []
    for i, body in enumerate(bodies):
        outcome, seconds, message = _ask(service, body, name)
        outcomes.setdefault(outcome, []).append(seconds)
        if outcome in ("not measurable", "ceiling"):
            refused.append((body, name))
        if verbose or outcome in ("not measurable", "ceiling") or seconds > 5:
            print(f"  {i:3d} {outcome:15s} {seconds:7.3f} s {body} {message[:150]}")
    for outcome, seconds in sorted(outcomes.items()):
        print("  " + _summary(f"{outcome} ({100 * len(seconds) / len(bodies):.0f}%)", seconds))
    return refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--census-like", action="store_true", help="the census-like file")
    parser.add_argument("--ceiling", type=float, default=0.005)
    parser.add_argument("--max-cells", type=int, default=0, help="0: the default")
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--session-seed", type=int, default=1)
    parser.add_argument("--no-guard", action="store_true", help="sliver_min_difference = 0")
    parser.add_argument("--secret", type=int, default=0, help="another secret: other noise")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    from tablesafe.service._service import TableService

    data = _data(args.data, args.records, args.census_like)
    spec = CENSUS_LIKE if args.census_like else DEMO
    session = research_session(args.tables, seed=args.session_seed, spec=spec)
    print(f"load {os.getloadavg()[0]:.1f}; {args.tables} tables, seed {args.session_seed}, "
          f"{args.records:,} records, ceiling {args.ceiling:g}, secret {args.secret}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        site = _site(data, Path(tmp) / "state.sqlite", args)
        service = TableService(site)
        print("the session:")
        refused = _run(service, session, "demo", args.verbose)
        print("issue 28's reconstruction (the four 3-way tables of the 300-record file):")
        refused += _run(service, ATTACK, "attack", args.verbose)
        again = [_ask(service, body, name)[1] for body, name in refused]
        print(_summary("refused by the ceiling, asked again", again))
        service.close()
        restarted = TableService(site)
        # The process's first request reads the ledger's and the guard's state: timed apart.
        first = [_ask(restarted, session[0], "demo")[1], _ask(restarted, ATTACK[0], "attack")[1]]
        print("first request of each dataset after a restart: "
              + ", ".join(f"{1000 * t:.1f} ms" for t in first))  # fmt: skip
        again = [_ask(restarted, body, name)[1] for body, name in refused]
        print(_summary("refused by the ceiling, asked again after a restart", again))
        restarted.close()
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
