"""Jobs on the default install, fairly (issue 40): one key's long queue against another key's job.

The demo's own site configuration (``demo/site.toml``: the cell-key method,
the sliver guard, SQLite) served in this process with the server's own
worker (``[server] embedded_worker`` on by default), two API keys and
``max_queued_jobs_per_key`` lifted to let one key queue them all. Key A
queues ``--jobs`` jobs (AGE by OCC by SEX in each region, in several formats,
with and without footnotes: distinct jobs); key B then queues a one-cell job.
Printed: how long A took to queue, how long B's job waited in the queue
(from queued to started) against the median time one of A's jobs took to
build (from started to finished), how many of A's jobs started before B's,
and B's whole delay. The worker's first job (which also opens its service)
is built before, untimed.

The baseline, in the same process on a fresh state store: the claim of
before issue 40 (the oldest job first, whoever asked).

``--identical N`` then asks key A for one job N times, with the store's
reuse of a key's identical job and without it (each asked-for job built and
stored): the jobs built and the bytes of results the store holds.

Usage: python benchmarks/bench_jobs.py [--records 200000] [--jobs 60] [--identical 10]
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import datetime
from pathlib import Path

from fastapi.testclient import TestClient

import tablesafe.server._jobs as server_jobs
import tablesafe.state._jobs as state_jobs
from tablesafe._settings import SiteConfig, load_site_config
from tablesafe.prepare._demo import write_demo_data
from tablesafe.server import create_app, hash_key
from tablesafe.state import open_state

ROOT = Path(__file__).resolve().parent.parent
KEYS = {"A": "ts_bench_jobs_key_a_0123456789abcdef", "B": "ts_bench_jobs_key_b_0123456789abcdef"}
FORMATS = ["csv", "json", "jsonstat", "xlsx", "sdmx-csv"]

#: The claim before issue 40: the oldest queued job first, whoever asked (the parameters of
#: the fair claim, the last one unused).
FIFO_CLAIM = """
UPDATE jobs SET status = 'running', stage = 'building', progress = 0, worker = ?, started = ?,
    heartbeat = ?, attempts = attempts + 1
WHERE id = (
    SELECT j.id FROM jobs AS j
    WHERE (j.status = 'queued' OR (j.status = 'running' AND j.heartbeat < ?)) AND j.attempts < ?
    ORDER BY CASE WHEN ? IS NULL THEN 0 ELSE 0 END, j.created, j.id
    LIMIT 1{lock}
)
RETURNING id, key_id, dataset, request, attempts
"""


def site(folder: Path, data: Path) -> SiteConfig:
    """``demo/site.toml`` with its paths in ``folder``, two keys and no per-key job limit."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "secret").write_text("the secret of bench_jobs, 32 characters or more")
    text = (ROOT / "demo" / "site.toml").read_text()
    for setting, value in (("audit_db", folder / "audit.sqlite"), ("path", data),
                           ("secret_file", folder / "secret")):  # fmt: skip
        text, n = re.subn(rf'(?m)^{setting} = ".*"$', f'{setting} = "{value}"', text)
        assert n == 1, setting
    text = text.replace("[server]\n", "[server]\nmax_queued_jobs_per_key = 0\n", 1)
    text += "".join(f'\n[[keys]]\nid = "{k}"\nhash = "{hash_key(v)}"\n' for k, v in KEYS.items())
    (folder / "site.toml").write_text(text)
    return load_site_config(folder / "site.toml")


def a_jobs(n: int) -> list[tuple[dict, dict]]:
    """``n`` distinct jobs of key A: (body, query)."""
    combos = itertools.product(range(1, 9), FORMATS, ("true", "false"))
    return [
        ({"dimensions": ["AGE", "OCC", "SEX"], "universe": {"REGION": [r]}, "statistic": "count"},
         {"format": f, "footnotes": foot})
        for r, f, foot in itertools.islice(combos, n)
    ]  # fmt: skip


ONE_CELL = {"dimensions": ["SEX"], "universe": {"SEX": [1]}, "margins": "none"}


@contextmanager
def claim(statement: str) -> Iterator[None]:
    """The worker's claim statement while the block runs (queues are made in it)."""
    kept = state_jobs._CLAIM
    state_jobs._CLAIM = statement
    try:
        yield
    finally:
        state_jobs._CLAIM = kept


def _seconds(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def wait_done(c: TestClient, ids: list[str], key: str) -> list[dict]:
    """Poll until every job is done or failed; their statuses."""
    while True:
        rows = [c.get(f"/api/jobs/{i}", headers={"x-api-key": KEYS[key]}).json() for i in ids]
        if all(r["status"] in ("done", "failed") for r in rows):
            return rows
        time.sleep(0.05)


def one_run(config: SiteConfig, jobs: int) -> dict:
    """Key A queues ``jobs`` jobs, key B one; how long B waited against A's builds."""
    with TestClient(create_app(config)) as c:
        # The worker's first job also opens its service (the dataset, its engine): not timed.
        warm = c.post("/api/datasets/demo/jobs", json=ONE_CELL, params={"format": "json"},
                      headers={"x-api-key": KEYS["A"]})  # fmt: skip
        wait_done(c, [warm.json()["id"]], "A")
        t0 = time.perf_counter()
        ids = []
        for body, query in a_jobs(jobs):
            answer = c.post("/api/datasets/demo/jobs", json=body, params=query,
                            headers={"x-api-key": KEYS["A"]})  # fmt: skip
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["id"])
        queued = time.perf_counter() - t0
        answer = c.post("/api/datasets/demo/jobs", json=ONE_CELL, params={"format": "csv"},
                        headers={"x-api-key": KEYS["B"]})  # fmt: skip
        b_id = answer.json()["id"]
        b = wait_done(c, [b_id], "B")[0]
        rows = wait_done(c, ids, "A")
    assert b["status"] == "done" and {r["status"] for r in rows} == {"done"}, (b, rows)
    builds = [_seconds(r["started"], r["finished"]) for r in rows]
    ahead = [r for r in rows if r["started"] < b["started"]]
    return {
        "ahead": max((_seconds(r["started"], r["finished"]) for r in ahead), default=0.0),
        "queued": queued,
        "wait": _seconds(b["created"], b["started"]),
        "delay": _seconds(b["created"], b["finished"]),
        "b_build": _seconds(b["started"], b["finished"]),
        "a_build": statistics.median(builds),
        "a_max": max(builds),
        "before_b": len(ahead),
    }


def identical(config: SiteConfig, times: int) -> tuple[int, int]:
    """Key A asks for one job ``times`` times: jobs built, bytes of results stored."""
    body, query = a_jobs(1)[0]
    with TestClient(create_app(config)) as c:
        ids = [
            c.post("/api/datasets/demo/jobs", json=body, params=query,
                   headers={"x-api-key": KEYS["A"]}).json()["id"]
            for _ in range(times)
        ]  # fmt: skip
        wait_done(c, sorted(set(ids)), "A")
    with closing(open_state(config)) as store, store._connection() as sql:
        (stored,) = sql.execute("SELECT COALESCE(SUM(LENGTH(data)), 0) FROM job_parts").fetchone()
    return len(set(ids)), int(stored)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--identical", type=int, default=10)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-jobs-"))
    data = write_demo_data(folder / "demo", args.records, seed=2026)
    print(f"machine: load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
          f"{args.records:,} records; {args.jobs} jobs of key A, then one of key B")  # fmt: skip
    fair = one_run(site(folder / "fair", data), args.jobs)
    with claim(FIFO_CLAIM):
        fifo = one_run(site(folder / "fifo", data), args.jobs)
    for name, r in (("fair claim (issue 40)", fair), ("oldest first (before)", fifo)):
        print(
            f"{name}: A queued {args.jobs} jobs in {r['queued']:.2f} s; B's one-cell job waited "
            f"{r['wait']:.2f} s = {r['wait'] / r['a_build']:.2f} x the median build of A's jobs "
            f"({r['a_build']:.2f} s, max {r['a_max']:.2f} s); it started after {r['before_b']} "
            f"of A's jobs (the longest of them built in {r['ahead']:.2f} s) and was done "
            f"{r['delay']:.2f} s after it was queued (built in {r['b_build']:.2f} s)"
        )
    print(f"B's wait, oldest first / fair: {fifo['wait'] / max(fair['wait'], 1e-3):.0f} x")
    if args.identical:
        reused = identical(site(folder / "reuse", data), args.identical)
        kept = server_jobs.job_digest
        server_jobs.job_digest = lambda *a: None  # type: ignore[assignment,misc]
        try:
            rebuilt = identical(site(folder / "rebuild", data), args.identical)
        finally:
            server_jobs.job_digest = kept
        for name, (built, stored) in (("one job (issue 40)", reused), ("each built", rebuilt)):
            print(f"{args.identical} identical jobs of one key, {name}: {built} built, "
                  f"{stored / 2**20:.2f} MiB of results stored")  # fmt: skip


if __name__ == "__main__":
    main()
