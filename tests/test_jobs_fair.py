"""Jobs on the default install, fairly (issue 40).

The server's own worker, a job that says when no worker runs, identical jobs
of a key as one, a per-key limit, and the order between keys, with the
server, its state store and real workers.
"""

from __future__ import annotations

import threading
import time
from contextlib import closing

import pytest
from fastapi.testclient import TestClient

from tablesafe.server import create_app
from tablesafe.server._jobs import NO_WORKER, ServerWorker, embedded_worker
from tablesafe.state import open_state
from tablesafe.state._jobs import JobQueue
from test_jobs import BIG, OTHER_KEY, TABLES, make_site, submit, work
from test_server import ADMIN_KEY, USER_KEY, error_of


@pytest.fixture
def site(demo_dir, tmp_path):
    return make_site(demo_dir, tmp_path)


def until(check, what: str, seconds: float = 120.0):
    """Wait for ``check()`` to give something true (a test's patience, not an assertion of speed)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {seconds} s")


def test_the_embedded_worker_is_on_with_sqlite_and_off_with_postgresql(demo_dir, tmp_path):
    assert embedded_worker(make_site(demo_dir, tmp_path, server={"embedded_worker": "auto"}))
    assert not embedded_worker(make_site(demo_dir, tmp_path))  # the tests' "off"
    url = {"url": "postgresql://tablesafe@localhost/x"}
    on_pg = make_site(demo_dir, tmp_path, state=url, server={"embedded_worker": "auto"})
    assert not embedded_worker(on_pg)
    forced = make_site(demo_dir, tmp_path, state=url, server={"embedded_worker": "on"})
    assert embedded_worker(forced)


def test_the_server_builds_a_job_itself_with_the_bytes_of_a_direct_table(demo_dir, tmp_path):
    site = make_site(demo_dir, tmp_path, server={"embedded_worker": "auto"})
    lifted = make_site(demo_dir, tmp_path / "lifted", rules={"max_cells": 1_000_000})
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        job = submit(c, BIG)
        status = until(
            lambda: (s := c.get(f"/api/jobs/{job}").json())["status"] == "done" and s,
            "the embedded worker builds the job",
        )
        result = c.get(f"/api/jobs/{job}/result")
        rows = c.get("/api/admin/audit", headers={"x-api-key": ADMIN_KEY}).json()["requests"]
    assert status["progress"] == 1.0 and "message" not in status and "workers" not in status
    with TestClient(create_app(lifted)) as c:
        direct = c.post(TABLES, json=BIG, params={"format": "csv"}, headers={"x-api-key": USER_KEY})
    assert result.content == direct.content
    built = [r for r in rows if r["endpoint"] == f"JOB /api/datasets/demo/jobs/{job}"]
    assert len(built) == 1 and ":serve:" in built[0]["client"]  # the server's own worker
    # It stopped with the server: no worker of the site runs any more.
    with closing(open_state(site)) as store:
        assert JobQueue(store).live_workers(3600) == 0


def test_a_job_queued_while_no_worker_runs_says_so(site):
    with TestClient(create_app(site)) as c:  # embedded_worker = "off", no worker
        c.headers["x-api-key"] = USER_KEY
        answer = c.post("/api/datasets/demo/jobs", json=BIG, params={"format": "csv"})
        assert answer.status_code == 202
        assert answer.json()["message"] == NO_WORKER and answer.json()["workers"] == 0
        job = answer.json()["id"]
        waiting = c.get(f"/api/jobs/{job}").json()
        with closing(open_state(site)) as store:
            JobQueue(store).beat("a worker elsewhere")  # a worker's heartbeat (it runs)
            running = c.get(f"/api/jobs/{job}").json()
            JobQueue(store).leave("a worker elsewhere")
        assert c.get(f"/api/jobs/{job}").json()["message"] == NO_WORKER
        work(site)
        done = c.get(f"/api/jobs/{job}").json()
    assert waiting["status"] == "queued" and waiting["message"] == NO_WORKER
    assert "tablesafe worker --config" in NO_WORKER and "embedded_worker" in NO_WORKER
    assert running["workers"] == 1 and "message" not in running
    assert done["status"] == "done" and "message" not in done and "workers" not in done


def test_a_keys_identical_job_is_one_job_built_once(site):
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        first = submit(c, BIG)
        # The same checked request (codes as text, universe in another order) and format.
        universe = {"REGION": [1, 2], "SEX": [1]}
        same = [submit(c, {**BIG, "universe": universe}),
                submit(c, {**BIG, "universe": {"SEX": ["1"], "REGION": ["1", "2"]}})]  # fmt: skip
        assert same[0] == same[1] != first
        assert submit(c, BIG) == first
        others = {
            submit(c, BIG, footnotes="false"),
            submit(c, BIG, "json"),
            submit(c, {**BIG, "statistic": "count"}),
            submit(c, BIG, key=OTHER_KEY),  # another key's identical job is its own
        }
        assert len(others) == 4 and first not in others
        assert work(site) == 6
        again = c.post("/api/datasets/demo/jobs", json=BIG, params={"format": "csv"})
        assert again.status_code == 202
        assert (again.json()["id"], again.json()["status"]) == (first, "done")
        hidden = c.get(f"/api/jobs/{first}", headers={"x-api-key": OTHER_KEY})
        assert error_of(hidden)["type"] == "NotFound"
    with closing(open_state(site)) as store:
        assert JobQueue(store).counts()["done"] == 6  # built once each: 6 results, not 8
        built = [r for r in store.query(limit=1000) if r["endpoint"].startswith("JOB ")]
    assert len(built) == 6


def test_a_key_past_its_limit_of_queued_jobs_is_answered_429(demo_dir, tmp_path):
    site = make_site(demo_dir, tmp_path, server={"max_queued_jobs_per_key": 2})
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        ids = [submit(c, {**BIG, "universe": {"REGION": [r]}}) for r in (1, 2)]
        refused = c.post("/api/datasets/demo/jobs", json=BIG, params={"format": "csv"})
        error = error_of(refused)
        assert (error["status"], error["type"]) == (429, "TooManyJobs")
        assert "2 jobs queued or running" in error["message"]
        assert "max_queued_jobs_per_key = 2" in error["message"]
        # Asking again for a job it has is no new job; another key has its own room.
        assert submit(c, {**BIG, "universe": {"REGION": [1]}}) == ids[0]
        submit(c, BIG, key=OTHER_KEY)
        work(site)
        assert submit(c, BIG) not in ids  # its jobs are done: room again
        rows = c.get("/api/admin/audit", headers={"x-api-key": ADMIN_KEY}).json()["requests"]
    assert any(r["status"] == 429 and r["outcome"].startswith("TooManyJobs") for r in rows)


def test_a_worker_builds_another_keys_job_before_the_first_keys_remaining_ones(site):
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        many = [submit(c, {"dimensions": ["SEX"], "universe": {"AGE": list(range(a, a + 40))}})
                for a in range(6)]  # fmt: skip
        other = submit(c, {"dimensions": ["SEX"]}, key=OTHER_KEY)  # queued last
        work(site)
        statuses = {j: c.get(f"/api/jobs/{j}", headers={"x-api-key": ADMIN_KEY}).json()
                    for j in [*many, other]}  # fmt: skip
    assert {s["status"] for s in statuses.values()} == {"done"}
    order = sorted(statuses, key=lambda j: statuses[j]["started"])
    assert order.index(other) == 1  # after the one job of the first key built before it


def test_a_job_in_progress_when_the_server_stops_goes_back_to_the_queue(demo_dir, tmp_path):
    server = {"embedded_worker": "on", "shutdown_timeout_seconds": 0.1}
    site = make_site(demo_dir, tmp_path, server=server)
    app = create_app(site)
    building, go_on = threading.Event(), threading.Event()
    with TestClient(app) as c:
        server_worker = app.state.embedded_worker
        service = server_worker.worker.service
        build = service.table

        def held(*args, **kwargs):  # the real build, held until the test lets it go
            building.set()
            go_on.wait(120)
            return build(*args, **kwargs)

        service.table = held
        job = submit(c, BIG)
        assert building.wait(120)
        assert c.get(f"/api/jobs/{job}", headers={"x-api-key": USER_KEY}).json()["status"] == (
            "running"
        )
    # The server stopped: the job was not done within shutdown_timeout_seconds.
    with closing(open_state(site)) as store:
        queue = JobQueue(store)
        row = queue.get(job)
        assert (row["status"], row["attempts"], row["worker"]) == ("queued", 1, None)
        go_on.set()  # the old build ends, and writes nothing of the job
        server_worker._thread.join(120)
        assert not server_worker._thread.is_alive()
        assert queue.get(job)["status"] == "queued" and list(queue.parts(job, 1, 1)) == []
        assert queue.live_workers(3600) == 0
        assert work(site) == 1  # the next worker (a restarted server's) builds it
        row = queue.get(job)
        assert (row["status"], row["attempts"]) == ("done", 2)
        built = [r for r in store.query(limit=100) if r["endpoint"].startswith("JOB ")]
    assert len(built) == 1


def test_the_docs_give_the_workers_heartbeat_and_the_limit_as_they_are():
    from pathlib import Path

    from tablesafe._settings import ServerSettings
    from tablesafe.server._jobs import WORKER_BEAT_SECONDS, WORKER_LIVE_SECONDS

    docs = Path(__file__).resolve().parent.parent / "docs"
    deploying = " ".join((docs / "deploying.md").read_text().split())
    assert f"heartbeat into the state store every {WORKER_BEAT_SECONDS:g} seconds" in deploying
    assert f"a worker silent for {WORKER_LIVE_SECONDS:g} seconds counts as stopped" in deploying
    limit = ServerSettings().max_queued_jobs_per_key
    assert f"`[server] max_queued_jobs_per_key` ({limit})" in deploying
    api = " ".join((docs / "http-api.md").read_text().split())
    assert f"`[server] max_queued_jobs_per_key` ({limit}) jobs queued or running" in api
    assert " ".join(NO_WORKER.split()) in api.replace("\\", "")


def test_an_idle_embedded_worker_stops_at_once_and_opens_no_service(site):
    with closing(open_state(site)) as store:
        server_worker = ServerWorker(site, store, poll_seconds=0.05)
        server_worker.start()
        until(lambda: JobQueue(store).live_workers(60) == 1, "the worker's heartbeat")
        assert server_worker.stop(timeout=60) is None
        assert server_worker.worker._service is None  # never asked for a job
        assert JobQueue(store).live_workers(3600) == 0
