"""Jobs (issue 31): large tables queued, built by a worker on the direct table's path, streamed."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient

from tablesafe._settings import load_site_config
from tablesafe.server import create_app, hash_key
from tablesafe.server._jobs import Worker
from tablesafe.state._jobs import JobQueue
from test_guard import _full_frame, _sliver_pairs
from test_operations import metric
from test_server import ADMIN_KEY, USER_KEY, error_of

OTHER_KEY = "ts_other_user_key_for_tests_0123456789"
TABLES = "/api/datasets/demo/tables"
JOBS = "/api/datasets/demo/jobs"
# 92 single years x 11 occupations x 3 (sex with its total) with margins: 3,348 cells.
BIG = {"dimensions": ["AGE", "OCC", "SEX"], "statistic": "both"}


def make_site(demo_dir, tmp_path, *, state=None, rules=None, server=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "secret").write_text("jobs share this secret with tables " * 2)
    data = {
        "base": str(tmp_path),
        # The tests build jobs with workers of their own (the embedded one has its tests).
        "server": {"audit_db": "audit.sqlite", "embedded_worker": "off", **(server or {})},
        "datasets": [
            {
                "name": "demo",
                "path": str(demo_dir),
                "protection": {"method": "ckm", "seeds": "keyed", "secret_file": "secret"},
                "rules": {"min_universe_size": 20, "max_cells": 500, **(rules or {})},
            }
        ],
        "keys": [
            {"id": "user1", "hash": hash_key(USER_KEY)},
            {"id": "user2", "hash": hash_key(OTHER_KEY)},
            {"id": "admin1", "hash": hash_key(ADMIN_KEY), "role": "admin"},
        ],
    }
    if state is not None:
        data["state"] = state
    return load_site_config(data=data)


def work(site, **kwargs) -> int:
    """Build every queued job with a worker of the site (in this process), then stop."""
    worker = Worker(site, **kwargs)
    try:
        return worker.run(threading.Event(), once=True)
    finally:
        worker.close()


def submit(c: TestClient, body: dict, fmt: str = "csv", key: str = USER_KEY, **query) -> str:
    params = {"format": fmt, **query}
    answer = c.post(JOBS, json=body, params=params, headers={"x-api-key": key})
    assert answer.status_code == 202, answer.text
    job = answer.json()
    assert job["status"] == "queued" and answer.headers["location"] == f"/api/jobs/{job['id']}"
    return job["id"]


@pytest.fixture
def site(demo_dir, tmp_path):
    return make_site(demo_dir, tmp_path)


def test_a_table_over_the_direct_limit_built_as_a_job_has_the_direct_bytes(
    site, demo_dir, tmp_path
):
    lifted = make_site(demo_dir, tmp_path / "lifted", rules={"max_cells": 1_000_000})
    formats = [("csv", {"labels": "true"}), ("csv", {"footnotes": "false"}), ("json", {}),
               ("xlsx", {}), ("jsonstat", {})]  # fmt: skip
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        refused = c.post(TABLES, json=BIG, params={"format": "csv"})
        assert error_of(refused)["type"] == "TooManyCells"
        assert "at most 500" in error_of(refused)["message"]
        ids = [submit(c, BIG, fmt, **query) for fmt, query in formats]
        assert c.get(f"/api/jobs/{ids[0]}").json()["status"] == "queued"
        assert work(site) == len(ids)
        statuses = [c.get(f"/api/jobs/{i}").json() for i in ids]
        results = [c.get(f"/api/jobs/{i}/result") for i in ids]
    with TestClient(create_app(lifted)) as c:
        c.headers["x-api-key"] = USER_KEY
        direct = [c.post(TABLES, json=BIG, params={"format": f, **q}) for f, q in formats]
    for status, result, table in zip(statuses, results, direct, strict=True):
        assert status["status"] == "done" and status["progress"] == 1.0, status
        assert status["result"] == f"/api/jobs/{status['id']}/result"
        assert table.status_code == 200 and result.status_code == 200
        assert result.content == table.content
        assert status["size"] == len(result.content)
        assert result.headers["content-type"] == table.headers["content-type"]
    assert results[0].headers["content-disposition"] == direct[0].headers["content-disposition"]


def test_only_the_key_that_asked_or_an_admin_sees_a_job(site):
    with TestClient(create_app(site)) as c:
        job = submit(c, BIG)
        early = c.get(f"/api/jobs/{job}/result", headers={"x-api-key": USER_KEY})
        assert early.status_code == 409 and error_of(early)["type"] == "JobNotDone"
        work(site)
        for path in (f"/api/jobs/{job}", f"/api/jobs/{job}/result"):
            assert c.get(path, headers={"x-api-key": USER_KEY}).status_code == 200
            assert c.get(path, headers={"x-api-key": ADMIN_KEY}).status_code == 200
            hidden = c.get(path, headers={"x-api-key": OTHER_KEY})
            assert error_of(hidden)["type"] == "NotFound"
            # Another key's job reads as no job at all.
            none = c.get(path.replace(job, "0" * 32), headers={"x-api-key": OTHER_KEY})
            assert error_of(none)["message"] == error_of(hidden)["message"].replace(job, "0" * 32)
            assert c.get(path).status_code == 401


def test_a_job_is_refused_as_a_table_would_be(demo_dir, tmp_path):
    site = make_site(demo_dir, tmp_path, rules={"min_universe_size": 500})
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        too_big = c.post(
            JOBS, json={"dimensions": ["AGE", "OCC", "EDUC"]}, params={"format": "csv"}
        )
        # 92 x 11 x 7 with margins = 7,084 cells: under 1,000,000 but over a lowered job limit.
        assert too_big.status_code == 202
        unknown = c.post(JOBS, json={"dimensions": ["NOPE"]})
        assert unknown.status_code == 400 and "unknown variable 'NOPE'" in unknown.text
        assert error_of(c.post(JOBS, json=BIG, params={"format": "pdf"}))["status"] == 400
        small = {"dimensions": ["SEX"], "universe": {"AGE": [90]}}
        direct = c.post(TABLES, json=small)
        assert direct.status_code == 403 and "at least 500" in direct.text
        job = submit(c, small)
        work(site)
        status = c.get(f"/api/jobs/{job}").json()
        rows = c.get("/api/admin/audit", headers={"x-api-key": ADMIN_KEY}).json()["requests"]
    assert status["status"] == "failed"
    assert status["error"] == error_of(direct) and status["error"]["status"] == 403
    row = next(r for r in rows if r["endpoint"] == f"JOB /api/datasets/demo/jobs/{job}")
    assert row["status"] == 403 and row["key_id"] == "user1"
    # The job's row holds its request as a table's row does: the body and the format.
    assert {k: row["request"][k] for k in small} == small and row["request"]["format"] == "csv"
    lowered = make_site(demo_dir, tmp_path / "low", rules={"max_job_cells": 5_000})
    with TestClient(create_app(lowered)) as c:
        c.headers["x-api-key"] = USER_KEY
        refused = c.post(JOBS, json={"dimensions": ["AGE", "OCC", "EDUC"]})
        assert error_of(refused)["type"] == "TooManyCells"
        assert "7,084 cells" in error_of(refused)["message"] and "at most 5,000" in refused.text


def test_the_sliver_guard_and_the_audit_see_jobs_as_tables(site, demo_dir):
    pairs = _sliver_pairs(_full_frame(demo_dir), 10, 4)
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        jobs = []
        for i, (u, v) in enumerate(pairs[:4]):
            first, second = ({"dimensions": ["SEX"], "universe": w} for w in (u, v))
            if i % 2:  # a table, then its sliver as a job
                assert c.post(TABLES, json=first).status_code == 200
                jobs.append((submit(c, second, "json"), 403))
            else:  # a job, then its sliver as a table
                jobs.append((submit(c, first, "json"), 200))
                work(site)
                assert error_of(c.post(TABLES, json=second))["type"] == "RefusedError"
        work(site)
        statuses = [c.get(f"/api/jobs/{j}").json() for j, _ in jobs]
    assert [s.get("error", {}).get("status", 200) for s in statuses] == [e for _, e in jobs]
    assert all(s["error"]["type"] == "RefusedError" for s in statuses if s["status"] == "failed")
    with site_store(site) as store:
        served = store.served_tables("demo")
    answered_jobs = [s for s, (_, e) in zip(statuses, jobs, strict=True) if e == 200]
    assert len(answered_jobs) == 2 and len(served) == 4  # 2 tables, 2 jobs


def site_store(site):
    """The site's state store, closed when the block ends."""
    from contextlib import closing

    from tablesafe.state import open_state

    return closing(open_state(site))


def test_progress_is_reported_while_the_file_is_written(site, monkeypatch):
    import tablesafe.server._jobs as jobs

    monkeypatch.setattr(jobs, "_REPORT_SECONDS", 0.0)
    reports: list[tuple[str, float]] = []
    worker = Worker(site)
    real = worker.queue.report

    def report(job_id, name, stage, progress):
        reports.append((stage, progress))
        return real(job_id, name, stage, progress)

    worker.queue.report = report
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        job = submit(c, {"dimensions": ["AGE", "OCC", "SEX"]})
        try:
            assert worker.run(threading.Event(), once=True) == 1
        finally:
            worker.close()
        assert c.get(f"/api/jobs/{job}").json()["progress"] == 1.0
    writing = [p for stage, p in reports if stage == "writing"]
    assert writing[0] == 0.0 and writing[-1] == 1.0
    assert writing == sorted(writing) and len(set(writing)) >= 2


def test_results_are_deleted_after_their_days(demo_dir, tmp_path):
    site = make_site(demo_dir, tmp_path, server={"job_result_days": 1e-5})  # 0.864 s
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        job = submit(c, BIG)
        work(site)
        assert c.get(f"/api/jobs/{job}").json()["status"] == "done"
        time.sleep(1.0)
        work(site)  # a worker deletes what expired when it starts
        assert error_of(c.get(f"/api/jobs/{job}"))["type"] == "NotFound"
        assert error_of(c.get(f"/api/jobs/{job}/result"))["type"] == "NotFound"


def test_a_job_whose_audit_row_cannot_be_written_fails(site):
    worker = Worker(site)

    def record(**_: object) -> None:
        raise OSError("disk full")

    worker.service.state.record = record
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        job = submit(c, BIG)
        try:
            worker.run(threading.Event(), once=True)
        finally:
            worker.close()
        status = c.get(f"/api/jobs/{job}").json()
        assert c.get(f"/api/jobs/{job}/result").status_code == 409
    assert status["status"] == "failed"
    assert status["error"]["status"] == 503 and status["error"]["type"] == "Unavailable"


def test_the_queue_depth_is_in_the_metrics(site):
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        submit(c, BIG), submit(c, BIG, "json")
        before = c.get("/metrics").text
        work(site)
        after = c.get("/metrics").text
        with site_store(site) as store:
            JobQueue(store).beat("w")  # a worker's heartbeat: one runs
            beating = c.get("/metrics").text
    assert metric(before, "tablesafe_jobs", status="queued") == 2
    assert metric(after, "tablesafe_jobs", status="queued") == 0
    assert metric(after, "tablesafe_jobs", status="done") == 2
    # No worker runs while none beats (the test's worker stopped; embedded_worker is off).
    assert metric(after, "tablesafe_job_workers") == 0
    assert metric(beating, "tablesafe_job_workers") == 1


def test_workers_on_postgresql_build_each_job_once(demo_dir, tmp_path, postgres):
    site = make_site(demo_dir, tmp_path, state={"url": postgres.database(), "pool_size": 4})
    bodies = [{"dimensions": ["AGE", "OCC"], "universe": {"REGION": [r]}} for r in (1, 2, 3, 4)]
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        ids = [submit(c, b) for b in bodies]
        workers = [Worker(site, name=f"w{i}") for i in range(2)]
        stop = threading.Event()
        threads = [threading.Thread(target=w.run, args=(stop,), kwargs={"once": True})
                   for w in workers]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        for w in workers:
            w.close()
        statuses = [c.get(f"/api/jobs/{i}").json()["status"] for i in ids]
        results = [c.get(f"/api/jobs/{i}/result").content for i in ids]
        direct_site = make_site(demo_dir, tmp_path / "d", rules={"max_cells": 100_000})
    assert statuses == ["done"] * 4
    with site_store(site) as store:
        rows = store.query(limit=100)
    built = [r for r in rows if r["endpoint"].startswith("JOB ")]
    assert sorted(r["endpoint"].rsplit("/", 1)[1] for r in built) == sorted(ids)
    with TestClient(create_app(direct_site)) as c:
        c.headers["x-api-key"] = USER_KEY
        direct = [c.post(TABLES, json=b, params={"format": "csv"}).content for b in bodies]
    assert results == direct


@pytest.mark.system
def test_the_worker_command_builds_jobs_and_stops_on_sigterm(site, tmp_path):
    import signal
    import subprocess
    import sys

    config = tmp_path / "site.toml"  # the fixture's site, in TOML
    dataset = site.datasets[0]
    config.write_text(
        f'[server]\naudit_db = "{tmp_path / "audit.sqlite"}"\n\n[[datasets]]\nname = "demo"\n'
        f'path = "{dataset.path}"\n[datasets.protection]\nmethod = "ckm"\nseeds = "keyed"\n'
        f'secret_file = "{tmp_path / "secret"}"\n[datasets.rules]\nmin_universe_size = 20\n'
        "max_cells = 500\n"
        f'\n[[keys]]\nid = "user1"\nhash = "{hash_key(USER_KEY)}"\n',
        encoding="utf-8",
    )
    command = [sys.executable, "-m", "tablesafe._cli", "worker", "--config", str(config)]
    with TestClient(create_app(site)) as c:
        c.headers["x-api-key"] = USER_KEY
        job = submit(c, BIG)
        once = subprocess.run([*command, "--once"], capture_output=True, text=True, timeout=120)
        assert once.returncode == 0, once.stderr
        assert once.stdout.splitlines()[-1].endswith("stopped after 1 jobs")
        assert c.get(f"/api/jobs/{job}").json()["status"] == "done"
        waiting = subprocess.Popen([*command, "--poll-seconds", "0.2"], stdout=subprocess.PIPE,
                                   text=True)  # fmt: skip
        try:
            assert "taking jobs from" in waiting.stdout.readline()
            waiting.send_signal(signal.SIGTERM)
            assert waiting.wait(timeout=60) == 0
            assert waiting.stdout.read().strip().endswith("stopped after 0 jobs")
        finally:
            if waiting.poll() is None:
                waiting.kill()
            waiting.stdout.close()
