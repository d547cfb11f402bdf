"""The agent interface's cost over the HTTP API's, for the same tables (issue 41).

``make demo``'s data (``--records``, seed 2026) and ``demo/site.toml`` with a fixed
secret, served in this process. ``--tables`` distinct two-way tables (a pair of the
demo's variables in one region each) are built once through the API (the
builds, the guard and the ledger: untimed), then asked again ``--rounds`` times
through each door, interleaved, all answered from the table cache:

* ``api``: ``POST /api/datasets/demo/tables`` (JSON) through an HTTP client on the
  application in process (ASGI, no socket);
* ``mcp http``: the MCP SDK's client calling ``build_table`` at ``/mcp`` of the same
  application, the same way;
* ``mcp stdio``: the SDK's client calling ``build_table`` on a spawned
  ``tablesafe mcp`` over the same state store (its own table cache, warmed by one
  untimed round).

Printed: each door's median and 90th percentile per request and its ratio to the
API's median (the baseline, in the same process). The MCP doors add what the API
does not: the labelled cells, the JSON-RPC envelope, the text content and the
client's check of the output schema.

Usage: python benchmarks/bench_agents.py [--records 200000] [--tables 20] [--rounds 10]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tablesafe._settings import load_site_config
from tablesafe.prepare._demo import write_demo_data
from tablesafe.server import create_app

ROOT = Path(__file__).resolve().parent.parent
VARIABLES = ["SEX", "AGEGRP", "MARSTAT", "EDUC", "EMPSTAT", "TENURE", "HHSIZE"]


def _site(where: Path, records: int) -> Path:
    (where / "demo").mkdir(parents=True)
    shutil.copy(ROOT / "demo" / "site.toml", where / "demo" / "site.toml")
    (where / "data").mkdir()
    (where / "data" / "demo-secret").write_text("bench-agents-secret-" + "0" * 44)
    write_demo_data(where / "data" / "demo", records, seed=2026)
    return where / "demo" / "site.toml"


def _tables(n: int) -> list[dict[str, Any]]:
    pairs = itertools.cycle(itertools.combinations(VARIABLES, 2))
    return [
        {"dimensions": list(next(pairs)), "universe": {"REGION": [1 + i % 8]}} for i in range(n)
    ]


async def _timed(call: Any) -> float:
    start = time.perf_counter()
    await call
    return time.perf_counter() - start


async def _run(config: Path, tables: list[dict[str, Any]], rounds: int) -> dict[str, list[float]]:
    app = create_app(load_site_config(config))
    times: dict[str, list[float]] = {"api": [], "mcp http": [], "mcp stdio": []}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    stdio = StdioServerParameters(
        command=sys.executable, args=["-m", "tablesafe", "mcp", "--config", str(config)], env=env
    )
    async with (
        app.router.lifespan_context(app),
        httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app), base_url="http://bench", timeout=120
        ) as http,
        Client(streamable_http_client("http://bench/mcp", http_client=http)) as agent,
        Client(stdio) as spawned,
    ):
        for body in tables:  # built once: the guard, the ledger, the cache (untimed)
            assert (await http.post("/api/datasets/demo/tables", json=body)).status_code == 200
        for body in tables:  # the spawned server's own cache (untimed)
            assert not (await spawned.call_tool("build_table", body)).is_error
        for _ in range(rounds):
            for body in tables:
                times["api"].append(await _timed(http.post("/api/datasets/demo/tables", json=body)))
                times["mcp http"].append(await _timed(agent.call_tool("build_table", body)))
                times["mcp stdio"].append(await _timed(spawned.call_tool("build_table", body)))
    return times


def main() -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = _site(Path(tmp), args.records)
        times = anyio.run(_run, config, _tables(args.tables), args.rounds)
    base = statistics.median(times["api"])
    print(f"{args.tables} cached tables x {args.rounds} rounds, {args.records:,} records")
    print(f"{'door':<10} {'median ms':>10} {'p90 ms':>8} {'x api':>6}")
    for door, values in times.items():
        median = statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"{door:<10} {median * 1000:>10.2f} {p90 * 1000:>8.2f} {median / base:>6.2f}")


if __name__ == "__main__":
    main()
