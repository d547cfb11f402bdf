"""No cold start a user can see (issue 42): a served site holds its data before it serves.

``TableService.load`` reads each dataset as its engine keeps it (DuckDB with
``materialize``: in memory) and computes its identity before the first table;
``tablesafe serve`` calls it before saying "serving", with a line of progress
per dataset on standard error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tablesafe._settings import load_site_config
from tablesafe.service._bodies import TableBody
from tablesafe.service._service import Principal, TableService


def _site(demo_dir: Path, tmp_path: Path, *, materialize: bool = True) -> Path:
    config = tmp_path / "site.toml"
    config.write_text(
        f'[server]\naudit_db = "{tmp_path / "state.sqlite"}"\n'
        f'[engine]\nkind = "duckdb"\ncube_cache = false\nmaterialize = {str(materialize).lower()}\n'
        f'[[datasets]]\nname = "demo"\npath = "{tmp_path / "data"}"\n'
        '[datasets.protection]\nmethod = "ckm"\n',
        encoding="utf-8",
    )
    shutil.copytree(demo_dir, tmp_path / "data")
    return config


def _statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL statements DuckDB engines run from now on (each still runs)."""
    from tablesafe.engines._duckdb import DuckDBEngine

    seen: list[str] = []
    run = DuckDBEngine._run

    def recorded(self: DuckDBEngine, sql: str, *args: object, **kwargs: object) -> object:
        seen.append(sql)
        return run(self, sql, *args, **kwargs)

    monkeypatch.setattr(DuckDBEngine, "_run", recorded)
    return seen


def _first_table(service: TableService) -> None:
    body = TableBody(dimensions=["SEX", "REGION"], statistic="count")
    table = service.table(Principal("user1", "user", 60), "demo", body.to_request())
    assert int(table.counts.sum()) > 0


@pytest.mark.parametrize("materialize", [True, False])
def test_a_loaded_site_answers_its_first_table_from_memory(
    demo_dir, tmp_path, monkeypatch, materialize
):
    """After ``load``, the first table reads the records DuckDB holds (with ``materialize``;
    without it, every table scans the file)."""
    from tablesafe.catalog._dataset import Dataset
    from tablesafe.engines import DuckDBEngine

    site = load_site_config(_site(demo_dir, tmp_path, materialize=materialize))
    # Validated before, as a site's data is after its first start: the service's start
    # reads no records (the validation is remembered beside the file).
    with DuckDBEngine() as engine:
        engine.ensure_valid(Dataset.open(tmp_path / "data"))
    service = TableService(site)
    lines: list[str] = []
    try:
        loading = _statements(monkeypatch)
        service.load(lines.append)
        # The account's key, computed at load (not by the first table).
        assert service.served("demo").builder.admission._identity is not None
        at_load = list(loading)
        loading.clear()
        _first_table(service)
        first = list(loading)
    finally:
        service.close()
    assert any(s.startswith("CREATE TABLE ts_data_") for s in at_load) is materialize, at_load
    assert not any(s.startswith("CREATE TABLE") for s in first)
    assert all(("read_parquet" in s) is not materialize for s in first), first
    assert lines[0] == "loading dataset demo (20,000 records)"
    assert lines[1].startswith("dataset demo loaded in ") and lines[1].endswith(" s")


@pytest.mark.system
def test_serve_loads_the_data_before_it_says_serving(demo_dir, tmp_path):
    config = _site(demo_dir, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    process = subprocess.Popen(
        [sys.executable, "-m", "tablesafe", "serve", "--config", str(config), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        serving = process.stdout.readline()
        # Written before "serving" was: the two lines are in the pipe already.
        progress = [process.stderr.readline(), process.stderr.readline()]
    finally:
        process.terminate()
        process.wait(timeout=60)
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
    assert "serving demo at http://127.0.0.1:" in serving
    assert progress[0] == "tablesafe: loading dataset demo (20,000 records)\n"
    assert progress[1].startswith("tablesafe: dataset demo loaded in ")
