"""The putative-risk ceiling on a researcher's session (issue 40).

A session of ordinary tables (``_sessions.research_session``: 1 to 3
variables of the demo survey, common universes, counts, weighted figures,
percentages, means) is asked, in order, of one ``TableService`` with
demo/site.toml's protection and rules and ``putative_uniques_ceiling`` set;
the benchmark prints how many tables were answered, refused by the ceiling,
refused as not measurable within the site's limit, and refused by other
rules, with the time of each table; then asks every refused table again, in
the same process and in a new one on the same state store (a restart), and
prints how long each repeat took.

    python benchmarks/bench_ceiling.py [--records 200000] [--ceiling 0.02]
        [--tables 100] [--session-seed 1] [--max-cells N] [--no-guard]

Data: ``tablesafe demo-data DIR --records N --seed 2026`` (written once to a
temporary folder, or ``--data DIR``).
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

from _sessions import as_body, research_session  # noqa: E402

SECRET = "ceiling-benchmark-secret-0123456789abcdef"


def _data(folder: Path | None, records: int) -> Path:
    from tablesafe.prepare._demo import write_demo_data

    folder = folder or Path(tempfile.gettempdir()) / f"tablesafe-bench-demo-{records}"
    if not (folder / "catalog.toml").exists():
        write_demo_data(folder, records, seed=2026)
    return folder


def _site(data: Path, state: Path, args: argparse.Namespace) -> Any:
    """demo/site.toml's protection and rules on ``data``, with the ceiling set."""
    from tablesafe._settings import load_site_config

    demo = tomllib.loads((BENCH.parent / "demo" / "site.toml").read_text())["datasets"][0]
    protection = {k: v for k, v in demo["protection"].items() if k != "secret_file"}
    rules = dict(demo["rules"], putative_uniques_ceiling=args.ceiling)
    if args.max_cells:
        rules["putative_max_cells"] = args.max_cells
    if args.no_guard:
        rules["sliver_min_difference"] = 0
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
                    "rules": rules,
                }
            ],
        }
    )


def _ask(service: Any, body: dict[str, Any]) -> tuple[str, float, str]:
    """One table through the service's one path, as the audit log records it."""
    from tablesafe._errors import RiskCeilingExceeded, UserError
    from tablesafe.server._auth import Principal

    who = Principal("researcher", "user", 10**9)
    start = time.perf_counter()
    try:
        service.answer(who, "demo", as_body(body))
        outcome, message = "answered", ""
    except RiskCeilingExceeded as exc:
        message = str(exc)
        outcome = "not measurable" if "cannot be measured" in message else "ceiling"
    except UserError as exc:
        outcome, message = f"other: {type(exc).__name__}", str(exc)
    seconds = time.perf_counter() - start
    service.audit.record(
        key_id=who.id,
        endpoint="POST /api/datasets/demo/tables",
        status=200 if outcome == "answered" else 403,
        outcome="ok" if outcome == "answered" else outcome,
        dataset="demo",
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--ceiling", type=float, default=0.02)
    parser.add_argument("--max-cells", type=int, default=0, help="0: the default")
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--session-seed", type=int, default=1)
    parser.add_argument("--no-guard", action="store_true", help="sliver_min_difference = 0")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    from tablesafe.server._service import TableService

    data = _data(args.data, args.records)
    session = research_session(args.tables, seed=args.session_seed)
    print(f"load {os.getloadavg()[0]:.1f}; {args.tables} tables, seed {args.session_seed}, "
          f"{args.records:,} records, ceiling {args.ceiling:g}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        site = _site(data, Path(tmp) / "state.sqlite", args)
        service = TableService(site)
        outcomes: dict[str, list[float]] = {}
        refused: list[dict[str, Any]] = []
        for i, body in enumerate(session):
            outcome, seconds, message = _ask(service, body)
            outcomes.setdefault(outcome, []).append(seconds)
            if outcome != "answered":
                refused.append(body)
            if args.verbose or outcome in ("not measurable", "ceiling"):
                print(f"  {i:3d} {outcome:15s} {seconds:7.3f} s {body} {message[150:330]}")
        for outcome, seconds in sorted(outcomes.items()):
            print(_summary(f"{outcome} ({100 * len(seconds) / len(session):.0f}%)", seconds))
        again = [_ask(service, body)[1] for body in refused]
        print(_summary("refused, asked again", again))
        service.close()
        restarted = TableService(site)
        again = [_ask(restarted, body)[1] for body in refused]
        print(_summary("refused, asked again after a restart", again))
        restarted.close()
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
