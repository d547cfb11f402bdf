"""Jobs built by a worker on the Spark engine (issue 31): the bytes of DuckDB's direct build.

The replicas serve on DuckDB; a worker of the same site on Spark (local mode,
two cores) takes jobs from the same state store. What it builds is what a
direct table on DuckDB answers, byte for byte, and the sliver guard's memory is
one across the two engines (the microdata's identity is the same from both).
"""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient

from tablesafe._settings import load_site_config
from tablesafe.server import create_app
from tablesafe.server._jobs import Worker
from test_guard import _full_frame, _sliver_pairs
from test_jobs import BIG, OTHER_KEY, TABLES, make_site, submit
from test_server import USER_KEY, error_of

pytestmark = pytest.mark.system


def spark_worker(site, *, cube_cache: bool) -> Worker:
    """A worker of ``site`` on the Spark engine (local mode, two cores), the same state store.

    Its engine shares the suite's Spark session (the ``spark`` fixture, which the
    tests ask for so that it is open): closing the worker leaves the session open.
    """
    from tablesafe.engines import CubeCache, SparkEngine

    data = site.model_dump(mode="json")
    data["engine"] = {"kind": "spark", "spark_master": "local[2]", "cube_cache": cube_cache}
    worker = Worker(load_site_config(data=data), name="spark")
    engine = worker.service.served("demo").builder.engine
    reader = engine.engine if isinstance(engine, CubeCache) else engine
    assert isinstance(reader, SparkEngine) and isinstance(engine, CubeCache) == cube_cache
    return worker


def test_jobs_built_on_spark_have_the_bytes_of_direct_duckdb_tables(demo_dir, tmp_path, spark):
    site = make_site(demo_dir, tmp_path)
    # The large table, then inside a universe; with the cube cache, then without it.
    bodies = [BIG, {**BIG, "universe": {"REGION": [1, 2], "SEX": [2]}}]
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        ids = []
        for cube_cache in (True, False):
            worker = spark_worker(site, cube_cache=cube_cache)
            try:
                # Another key each round: a key's identical job is its earlier one (issue 40).
                key = USER_KEY if cube_cache else OTHER_KEY
                ids += [(submit(c, b, key=key), key) for b in bodies]
                assert worker.run(threading.Event(), once=True) == len(bodies)
            finally:
                worker.close()
        statuses = [c.get(f"/api/jobs/{i}", headers={"x-api-key": k}).json() for i, k in ids]
        results = [c.get(f"/api/jobs/{i}/result", headers={"x-api-key": k}).content for i, k in ids]
    lifted = make_site(demo_dir, tmp_path / "lifted", rules={"max_cells": 1_000_000})
    with TestClient(create_app(lifted)) as c:
        c.headers["x-api-key"] = USER_KEY
        direct = [c.post(TABLES, json=b, params={"format": "csv"}) for b in bodies]
    assert [s["status"] for s in statuses] == ["done"] * len(ids), statuses
    assert all(d.status_code == 200 for d in direct)
    assert results == [d.content for d in direct] * 2


def test_the_sliver_guard_is_one_across_spark_workers_and_duckdb_replicas(
    demo_dir, tmp_path, spark
):
    site = make_site(demo_dir, tmp_path)
    pairs = _sliver_pairs(_full_frame(demo_dir), 10, 2)
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        worker = spark_worker(site, cube_cache=False)
        try:
            (u1, v1), (u2, v2) = pairs
            # A job on Spark, then its sliver as a table on DuckDB: refused.
            first = submit(c, {"dimensions": ["SEX"], "universe": u1})
            assert worker.run(threading.Event(), once=True) == 1
            refused = c.post(TABLES, json={"dimensions": ["SEX"], "universe": v1})
            # A table on DuckDB, then its sliver as a job on Spark: the job fails, refused.
            assert c.post(TABLES, json={"dimensions": ["SEX"], "universe": u2}).status_code == 200
            second = submit(c, {"dimensions": ["SEX"], "universe": v2})
            assert worker.run(threading.Event(), once=True) == 1
        finally:
            worker.close()
        statuses = [c.get(f"/api/jobs/{j}").json() for j in (first, second)]
    assert error_of(refused)["type"] == "RefusedError"
    assert statuses[0]["status"] == "done", statuses[0]
    assert statuses[1]["status"] == "failed" and statuses[1]["error"]["status"] == 403
    assert statuses[1]["error"]["type"] == "RefusedError"
