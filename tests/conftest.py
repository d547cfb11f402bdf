"""Shared fixtures: small random datasets with a known catalog, the demo survey, and state stores
(SQLite and a real PostgreSQL) opened as several processes would."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tablesafe.catalog._dataset import Dataset
from tablesafe.state import PostgresState, SQLiteState, StateStore
from tsdata import random_frame, write_dataset


@pytest.fixture(scope="session")
def random_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Dataset, pd.DataFrame]:
    frame = random_frame(3000, seed=11)
    return write_dataset(tmp_path_factory.mktemp("random"), frame), frame


@pytest.fixture
def make_dataset(tmp_path: Path) -> Callable[..., Dataset]:
    counter = iter(range(1000))

    def make(frame: pd.DataFrame, catalog: dict[str, Any] | None = None, fmt: str = "parquet"):
        return write_dataset(tmp_path / f"ds{next(counter)}", frame, catalog, fmt)

    return make


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tablesafe.prepare._demo import write_demo_data

    return write_demo_data(tmp_path_factory.mktemp("demo"), 20_000, seed=7, replicates=10)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The suite's Spark engine (local mode, two cores): one SparkSession for every Spark test.

    Starting a session takes seconds; engines the tests make (a worker's, the
    command line's) share this one (``getOrCreate``), and closing them leaves it
    open (:meth:`tablesafe.engines.SparkEngine.close`). The Spark tests run on one
    pytest-xdist worker (:func:`worker_group`).
    """
    import shutil

    if shutil.which("java") is None:
        pytest.fail("the Spark tests need Java 17 (make test installs openjdk-17-jre-headless)")
    from tablesafe.engines import SparkEngine

    engine = SparkEngine(master="local[2]")
    yield engine
    engine.close()


def worker_group(nodeid: str) -> str:
    """Which tests run on one pytest-xdist worker (``make test``: ``-n 2``), by node id.

    A module's tests together (its module fixtures, a browser or a served
    site, are made once); the Spark tests together, across modules (one JVM
    starts, not one per worker; their names say Spark); the blocks of one page
    of the docs together (a block builds on the page's earlier blocks, which
    would run again on the other worker).
    """
    path, _, test = nodeid.partition("::")
    if "spark" in path or "spark" in test.split("[")[0]:
        return "spark"
    if test.startswith("test_docs_block["):
        return "docs:" + test.removeprefix("test_docs_block[").rsplit(":", 1)[0]
    return path


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook (the dev extra installs it)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scheduler over :func:`worker_group`'s groups (each group a scope)."""
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return Groups(config, log)


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Keep the suite's ptable cache out of the user's ~/.cache."""
    import os

    os.environ["TABLESAFE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A PostgreSQL cluster of the session (tests/_postgres.py); ``.database()`` makes a database.

    Skipped only where Debian's server or psycopg is not installed (``make test``
    installs both).
    """
    import importlib.util

    from _postgres import Cluster, binaries

    bindir = binaries()
    if bindir is None:
        pytest.skip(
            "PostgreSQL is not installed (/usr/lib/postgresql/*/bin): apt-get install postgresql"
        )
    if importlib.util.find_spec("psycopg_pool") is None:
        pytest.skip("psycopg is not installed: pip install -e '.[postgres]'")
    cluster = Cluster(bindir).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request, tmp_path) -> Iterator[Callable[[], StateStore]]:
    """Opens stores on one fresh database of the backend (each one: another process)."""
    if request.param == "sqlite":
        where = str(tmp_path / "state.sqlite")

        def make() -> StateStore:
            return SQLiteState(where)
    else:
        url = request.getfixturevalue("postgres").database()

        def make() -> StateStore:
            return PostgresState(url, pool_size=4)

    opened: list[StateStore] = []

    def opener() -> StateStore:
        opened.append(make())
        return opened[-1]

    yield opener
    for store in opened:
        store.close()


@pytest.fixture
def store(backend) -> StateStore:
    return backend()
