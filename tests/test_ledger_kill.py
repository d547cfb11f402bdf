"""The privacy ledger survives a kill -9 of the server with nothing lost (issue 28).

A real ``tablesafe serve`` process on SQLite answers tables from four
clients and is killed with SIGKILL (its own child, by its id); every table a
client received is then found in the ledger the store reads back: each of
its figures, recomputed with the site's protection, is one the ledger was
given. The server process is the only one stopped.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

import tablesafe as ts
from tablesafe.mechanisms import dp_geometric
from tablesafe.rules._admission import dataset_identity
from tablesafe.rules._ledger import LedgerIndex, table_figures
from tablesafe.server import hash_key
from tablesafe.state import SQLiteState
from test_replicas import Replica
from test_server import USER_KEY

pytestmark = pytest.mark.system

SECRET = "the ledger's kill test secret, long enough"
DIMS = ["SEX", "REGION", "TENURE", "MARSTAT"]


def _site_file(folder: Path, demo_dir: Path) -> Path:
    (folder / "secret").write_text(SECRET, encoding="utf-8")
    path = folder / "site.toml"
    path.write_text(
        f"""
[server]
audit_db = "state.sqlite"
rate_limit_per_minute = 1000000
cache_tables = 0

[[datasets]]
name = "demo"
path = "{demo_dir}"

[datasets.protection]
method = "dp"
epsilon = 1.0
cap = 40
seeds = "keyed"
secret_file = "secret"

[datasets.rules]
min_universe_size = 0
sliver_min_difference = 0
privacy_budget_epsilon = 100000

[[keys]]
id = "user1"
hash = "{hash_key(USER_KEY)}"
""",
        encoding="utf-8",
    )
    return path


def test_every_table_answered_before_a_kill_9_is_in_the_ledger(demo_dir, tmp_path):
    server = Replica(_site_file(tmp_path, demo_dir), tmp_path / "server.log")
    answered: list[dict] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(c: int) -> None:
        for i in range(c, 10_000, 4):
            if stop.is_set():
                return
            body = {
                "dimensions": [DIMS[i % 4]],
                "universe": {"AGE": [20 + i // 4 % 70]},
                "statistic": "count",
            }
            try:
                got = httpx.post(
                    f"{server.url}/api/datasets/demo/tables",
                    json=body,
                    headers={"x-api-key": USER_KEY},
                    timeout=30,
                )
            except httpx.HTTPError:
                return
            if got.status_code == 200:
                with lock:
                    answered.append(body)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(4)]
    try:
        for t in threads:
            t.start()
        # Killed while the clients are sending, once some tables were answered (however
        # slow the machine: a fixed wait killed it before any answer under load).
        deadline = time.monotonic() + 120
        while len(answered) < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(server.process.pid, signal.SIGKILL)  # our own child process
        server.process.wait(timeout=30)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        server.stop()
    assert server.process.returncode == -signal.SIGKILL
    assert len(answered) >= 4
    data = ts.Dataset.open(demo_dir)
    prot = ts.Protection(dp_geometric(1.0, cap=40), seeds="keyed", secret=SECRET.encode())
    builder = ts.TableBuilder(data, prot)
    store = SQLiteState(tmp_path / "state.sqlite")
    try:
        ledger = LedgerIndex()
        for _, key_id, _, figures in store.ledger_rows(dataset_identity(builder.engine, data)):
            ledger.add(key_id, figures)
    finally:
        store.close()
    for body in answered:
        request = ts.TableRequest(
            tuple(body["dimensions"]), universe=body["universe"], statistic="count"
        )
        built = builder.run(request)
        figures = table_figures(built.plan, built.table, prot, data.catalog)
        assert not ledger.dataset.fresh(figures).any(), body
