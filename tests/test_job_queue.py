"""The job queue in the state store (issue 31), on SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from tablesafe.state._jobs import MAX_ATTEMPTS, JobQueue

REQUEST = {"body": {"dimensions": ["SEX"]}, "format": "csv"}


def test_a_job_goes_from_queued_to_done_with_its_result_in_pieces(store):
    queue = JobQueue(store)
    job_id = queue.submit("user1", "demo", REQUEST)
    assert len(job_id) == 32
    job = queue.get(job_id)
    assert (job["status"], job["stage"], job["progress"], job["key_id"]) == (
        "queued", "queued", 0.0, "user1",
    )  # fmt: skip
    assert job["request"] == REQUEST
    assert queue.counts() == {"queued": 1, "running": 0, "done": 0, "failed": 0}
    claimed = queue.claim("w1", stale_seconds=60)
    assert claimed == {"id": job_id, "key_id": "user1", "dataset": "demo", "request": REQUEST,
                       "attempt": 1}  # fmt: skip
    assert queue.claim("w2", stale_seconds=60) is None  # the only job is taken
    assert queue.report(job_id, "w1", "writing", 0.25)
    assert not queue.report(job_id, "w2", "writing", 0.5)  # not w2's job
    assert queue.get(job_id)["progress"] == 0.25
    pieces = [b"a,b\n", b"1,2\n" * 1000, b"# note\n"]
    for i, piece in enumerate(pieces):
        queue.write_part(job_id, 1, i, piece)
    size = sum(map(len, pieces))
    done = {"media_type": "text/csv", "filename": "SEX.csv", "size": size, "parts": 3,
            "keep_days": 7.0}  # fmt: skip
    assert not queue.finish(job_id, "w2", 1, **done)
    assert queue.finish(job_id, "w1", 1, **done)
    job = queue.get(job_id)
    assert (job["status"], job["progress"], job["size"], job["parts"]) == ("done", 1.0, size, 3)
    assert b"".join(queue.parts(job_id, 1, 3)) == b"".join(pieces)
    finished = datetime.fromisoformat(job["finished"])
    assert datetime.fromisoformat(job["expires"]) - finished == timedelta(days=7)
    assert queue.counts()["done"] == 1


def test_a_failed_job_keeps_its_error_and_loses_its_pieces(store):
    queue = JobQueue(store)
    job_id = queue.submit("user1", "demo", REQUEST)
    queue.claim("w1", stale_seconds=60)
    queue.write_part(job_id, 1, 0, b"half")
    error = {"status": 403, "type": "RefusedError", "message": "the universe is too small"}
    assert queue.fail(job_id, "w1", error, keep_days=1.0)
    job = queue.get(job_id)
    assert job["status"] == "failed" and job["error"] == error
    assert list(queue.parts(job_id, 1, 1)) == []


def test_a_job_whose_worker_went_quiet_is_claimed_again_then_fails(store):
    queue = JobQueue(store)
    job_id = queue.submit("user1", "demo", REQUEST)
    assert queue.claim("w1", stale_seconds=60)["attempt"] == 1
    queue.write_part(job_id, 1, 0, b"from the first attempt")
    # A heartbeat within the last 60 s: not taken; with 0 s of patience it is.
    assert queue.claim("w2", stale_seconds=60) is None
    time.sleep(0.002)  # times are in milliseconds: "quiet for 0 s" is a millisecond ago
    again = queue.claim("w2", stale_seconds=0)
    assert again["id"] == job_id and again["attempt"] == 2
    assert not queue.report(job_id, "w1", "writing", 0.5)  # w1 lost it
    queue.write_part(job_id, 1, 1, b"w1 writes on, into its own attempt")
    queue.write_part(job_id, 2, 0, b"w2's")
    assert queue.finish(job_id, "w2", 2, media_type="text/csv", filename="x.csv", size=4,
                        parts=1, keep_days=1.0)  # fmt: skip
    assert list(queue.parts(job_id, 2, 1)) == [b"w2's"]
    assert list(queue.parts(job_id, 1, 2)) == []  # the first attempt's pieces are gone
    # A job whose worker stops at every attempt fails after MAX_ATTEMPTS.
    other = queue.submit("user1", "demo", REQUEST)
    attempts = []
    for i in range(MAX_ATTEMPTS):
        attempts.append(queue.claim(f"w{i}", stale_seconds=0)["attempt"])
        time.sleep(0.002)
    assert attempts == list(range(1, MAX_ATTEMPTS + 1))
    assert queue.claim("late", stale_seconds=0) is None
    job = queue.get(other)
    assert job["status"] == "failed" and job["error"]["type"] == "InternalError"
    assert f"stopped {MAX_ATTEMPTS} times" in job["error"]["message"]


def test_expired_jobs_are_deleted_with_their_results(store):
    queue = JobQueue(store)
    queue.submit("u", "demo", REQUEST), queue.submit("u", "demo", REQUEST)
    # Jobs of one millisecond are taken in the order of their (random) ids: name them by claim.
    kept, gone = (queue.claim(w, stale_seconds=60)["id"] for w in ("a", "b"))
    for job_id, days, worker in ((kept, 30.0, "a"), (gone, 1.0, "b")):
        queue.write_part(job_id, 1, 0, b"x")
        queue.finish(job_id, worker, 1, media_type="text/csv", filename="x.csv", size=1,
                     parts=1, keep_days=days)  # fmt: skip
    queued = queue.submit("u", "demo", REQUEST)
    assert queue.delete_expired() == 0
    assert queue.delete_expired(datetime.now(UTC) + timedelta(days=2)) == 1
    assert queue.get(gone) is None and list(queue.parts(gone, 1, 1)) == []
    assert queue.get(kept)["status"] == "done" and queue.get(queued)["status"] == "queued"
    assert list(queue.parts(kept, 1, 1)) == [b"x"]


def test_workers_on_two_stores_never_take_one_job_twice(backend):
    stores = [backend(), backend()]
    queues = [JobQueue(s) for s in stores]
    ids = {queues[0].submit("u", "demo", {"n": i}) for i in range(40)}
    taken: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def work(i: int) -> None:
        queue = queues[i % 2]
        start.wait()
        while (job := queue.claim(f"w{i}", stale_seconds=600)) is not None:
            with lock:
                taken.append(job["id"])

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(work, range(8)))
    assert sorted(taken) == sorted(ids)  # each exactly once
    assert queues[1].counts() == {"queued": 0, "running": 40, "done": 0, "failed": 0}


@pytest.mark.parametrize("job_id", ["", "nope", "' OR 1=1 --"])
def test_unknown_jobs_are_none(store, job_id):
    assert JobQueue(store).get(job_id) is None
