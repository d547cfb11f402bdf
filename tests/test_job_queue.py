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


# -- fairness, identical jobs, the per-key limit, release, heartbeats (issue 40) ----------------


def _end(queue: JobQueue, job: dict, worker: str) -> None:
    """Finish a claimed job (an empty result)."""
    queue.write_part(job["id"], job["attempt"], 0, b"")
    assert queue.finish(job["id"], worker, job["attempt"], media_type="text/csv",
                        filename="x.csv", size=0, parts=1, keep_days=1.0)  # fmt: skip


def test_another_keys_job_is_claimed_before_the_first_keys_remaining_jobs(store):
    queue = JobQueue(store)
    many = [queue.submit("A", "demo", {"n": i}) for i in range(60)]
    first = queue.claim("w", stale_seconds=60)
    assert first["id"] in many  # the only key's
    other = queue.submit("B", "demo", {"n": "b"})  # queued after all 60 of A's
    _end(queue, first, "w")
    order = []
    while (job := queue.claim("w", stale_seconds=60)) is not None:
        order.append(job["id"])
        _end(queue, job, "w")
    # B's job is the next one built: it waited for one of A's jobs (the one running), not 59.
    assert order[0] == other
    assert sorted([first["id"], *order[1:]]) == sorted(many)  # then A's other 59


def test_the_key_with_fewer_jobs_running_goes_first(store):
    queue = JobQueue(store)
    a = [queue.submit("A", "demo", {"n": i}) for i in range(5)]
    assert queue.claim("w1", stale_seconds=60)["id"] in a  # A has one running
    b = queue.submit("B", "demo", {"n": "b"})
    # A second worker: B has none running, so B's job before A's older ones.
    assert queue.claim("w2", stale_seconds=60)["id"] == b
    assert queue.claim("w3", stale_seconds=60)["id"] in a


def test_keys_take_turns(store):
    queue = JobQueue(store)
    jobs = {k: [queue.submit(k, "demo", {"n": i}) for i in range(3)] for k in "ABC"}
    owner = {j: k for k, ids in jobs.items() for j in ids}
    turns = []
    while (job := queue.claim("w", stale_seconds=60)) is not None:
        turns.append(owner[job["id"]])
        _end(queue, job, "w")
        time.sleep(0.002)  # start times are in milliseconds: the next start is later
    # Each key in turn, the same turn every round (keys queued in one millisecond by job id).
    assert sorted(turns[:3]) == ["A", "B", "C"] and turns == turns[:3] * 3


def test_a_keys_identical_job_is_the_same_job(store):
    queue = JobQueue(store)
    first = queue.submit("A", "demo", REQUEST, digest="d1")
    assert queue.submit("A", "demo", REQUEST, digest="d1") == first
    # Another key's identical job is its own (another key's job is 404 to it).
    theirs = queue.submit("B", "demo", REQUEST, digest="d1")
    assert theirs != first
    assert queue.submit("A", "demo", REQUEST, digest="d2") not in (first, theirs)
    assert queue.submit("A", "demo", REQUEST) != queue.submit("A", "demo", REQUEST)  # no digest
    # Jobs of two keys created in the same millisecond come in either order (the
    # fair order's last tie is the random id): the others are built first.
    while (job := queue.claim("w", stale_seconds=60))["id"] != first:
        _end(queue, job, "w")
    assert queue.submit("A", "demo", REQUEST, digest="d1") == first  # running
    _end(queue, job, "w")
    assert queue.submit("A", "demo", REQUEST, digest="d1") == first  # done: its result
    # A failed job is asked for again as a new job (its failure may have passed).
    failing = queue.submit("C", "demo", REQUEST, digest="d1")
    while (job := queue.claim("w", stale_seconds=60))["id"] != failing:
        _end(queue, job, "w")
    queue.fail(failing, "w", {"status": 500, "type": "InternalError", "message": "x"},
               keep_days=1.0)  # fmt: skip
    assert queue.submit("C", "demo", REQUEST, digest="d1") != failing
    # An expired job is gone for reuse too.
    assert queue.delete_expired(datetime.now(UTC) + timedelta(days=2)) >= 1
    assert queue.submit("A", "demo", REQUEST, digest="d1") != first


def test_a_key_may_have_at_most_its_limit_of_jobs_queued_or_running(store):
    from tablesafe.state._jobs import TooManyJobs

    queue = JobQueue(store)
    ids = [queue.submit("A", "demo", {"n": i}, digest=str(i), limit=3) for i in range(3)]
    with pytest.raises(TooManyJobs, match=r"3 jobs queued or running.*max_queued_jobs_per_key = 3"):
        queue.submit("A", "demo", {"n": 3}, digest="3", limit=3)
    assert TooManyJobs.status_code == 429
    assert queue.submit("A", "demo", {"n": 0}, digest="0", limit=3) == ids[0]  # the same job
    assert queue.submit("B", "demo", {"n": 0}, limit=3)  # another key's limit is its own
    job = queue.claim("w", stale_seconds=60)
    with pytest.raises(TooManyJobs):  # running counts
        queue.submit("A", "demo", {"n": 3}, limit=3)
    _end(queue, job, "w")
    assert queue.submit("A", "demo", {"n": 3}, limit=3)  # one done: room for one


def test_the_limit_and_reuse_hold_for_submissions_at_the_same_moment(backend):
    stores = [backend(), backend()]
    queues = [JobQueue(s) for s in stores]
    start = threading.Barrier(8)

    def submit(i: int) -> list[str]:
        from tablesafe.state._jobs import TooManyJobs

        start.wait()
        out = []
        for n in range(4):
            try:  # every thread asks for the same job, then for jobs of its own
                digest = "same" if n == 0 else f"{i}:{n}"
                out.append(queues[i % 2].submit("A", "demo", {}, digest=digest, limit=5))
            except TooManyJobs:
                pass
        return out

    with ThreadPoolExecutor(max_workers=8) as pool:
        got = [j for ids in pool.map(submit, range(8)) for j in ids]
    assert len(set(got)) == 5  # the same job once, then 4 more: the limit
    assert queues[0].counts()["queued"] == 5


def test_a_released_job_is_queued_again_and_fails_after_its_attempts(store):
    queue = JobQueue(store)
    job_id = queue.submit("A", "demo", REQUEST)
    job = queue.claim("w1", stale_seconds=60)
    queue.write_part(job_id, 1, 0, b"half")
    assert queue.release(job_id, "w2", 1) is None  # not w2's
    assert queue.release(job_id, "w1", 1) == "queued"
    row = queue.get(job_id)
    assert (row["status"], row["stage"], row["worker"], row["attempts"]) == (
        "queued", "queued", None, 1,
    )  # fmt: skip
    assert list(queue.parts(job_id, 1, 1)) == []
    assert not queue.report(job_id, "w1", "writing", 0.5)
    for attempt in range(2, MAX_ATTEMPTS + 1):
        job = queue.claim(f"w{attempt}", stale_seconds=60)
        assert (job["id"], job["attempt"]) == (job_id, attempt)
        expected = "queued" if attempt < MAX_ATTEMPTS else "failed"
        assert queue.release(job_id, f"w{attempt}", attempt) == expected
    row = queue.get(job_id)
    assert row["status"] == "failed" and f"stopped {MAX_ATTEMPTS} times" in row["error"]["message"]
    assert queue.claim("w", stale_seconds=60) is None


def test_workers_heartbeats_say_whether_one_runs(store):
    queue = JobQueue(store)
    assert queue.live_workers(60) == 0
    queue.beat("w1"), queue.beat("w2"), queue.beat("w1")
    assert queue.live_workers(60) == 2
    queue.leave("w2")
    assert queue.live_workers(60) == 1
    time.sleep(0.002)
    assert queue.live_workers(0) == 0  # its last beat is older than 0 s
    # A worker silent for a day (killed) is deleted with the expired jobs.
    queue.delete_expired(datetime.now(UTC) + timedelta(days=2))
    assert queue.live_workers(10**6) == 0
