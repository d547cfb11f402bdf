"""The job queue in the state store: large tables built by workers (issue 31).

A job is a row of ``jobs`` (schema version 3): who asked, the dataset, the
request, its status (:class:`JobStatus`), stage and progress, the times it
was made, started, last reported and finished, and when it expires; its
result is the rows of ``job_parts`` (pieces of the file, in order), so that a
result is written and read a piece at a time, and every replica can serve any
job's result.

A worker *claims* a job in one statement, fairly between keys (schema
version 4, issue 40): the key with the fewest jobs running first, then the
key whose latest job was started longest ago (round robin), then the oldest
job of that key; so one key's long queue delays another key's job by at most
the jobs already running. PostgreSQL picks it with ``FOR UPDATE SKIP LOCKED``
(two workers never take one job, and neither waits for the other), SQLite
inside ``BEGIN IMMEDIATE`` (the file's write lock). A job whose worker
stopped reporting for ``stale`` seconds is claimed again; each claim counts
an attempt, and a result's pieces are kept per attempt, so a stopped worker
that comes back writes nothing into the new attempt's result. Only the worker
holding the job's latest claim can report on it, finish it, fail it or
release it (put it back in the queue when its worker stops cleanly).

A job carries the digest of what it builds (the checked request, format and
the dataset's state, :func:`tablesafe.server._jobs.job_digest`): a key that
asks again for a job it has queued, running or done gets that job, not a new
one. A key may have at most ``limit`` jobs queued or running at once
(:class:`TooManyJobs`, HTTP 429). Submitting takes PostgreSQL's advisory lock
of the key (SQLite's write lock), so neither the reuse nor the limit can be
passed by requests at the same moment.

Workers write a heartbeat row (``job_workers``) while they run, so that a
queued job can tell that no worker is running for its site.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from tablesafe._errors import UserError
from tablesafe.state._store import StateStore

__all__ = ["JOB_SCHEMA", "JOB_SCHEMA_4", "JobQueue", "JobStatus", "TooManyJobs"]


class TooManyJobs(UserError):
    """More jobs queued or running for one key than the site allows (HTTP 429)."""

    status_code = 429


class JobStatus(StrEnum):
    """Where a job is: waiting, being built, its result ready, or failed with an error."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


#: Schema version 3 in both backends (``BLOB`` is ``BYTEA`` in PostgreSQL).
JOB_SCHEMA = """
CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    dataset TEXT NOT NULL,
    request TEXT NOT NULL,
    status TEXT NOT NULL,
    stage TEXT NOT NULL,
    progress DOUBLE PRECISION NOT NULL,
    attempts INTEGER NOT NULL,
    created TEXT NOT NULL,
    started TEXT,
    heartbeat TEXT,
    finished TEXT,
    expires TEXT,
    worker TEXT,
    error TEXT,
    media_type TEXT,
    filename TEXT,
    size BIGINT,
    parts INTEGER
);
CREATE INDEX jobs_queue ON jobs (status, created);
CREATE INDEX jobs_expires ON jobs (expires);
CREATE TABLE job_parts (
    job_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    part INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (job_id, attempt, part)
);
"""

#: Schema version 4 (issue 40): what a job builds (its digest), and the workers' heartbeats.
JOB_SCHEMA_4 = """
ALTER TABLE jobs ADD COLUMN digest TEXT;
CREATE INDEX jobs_digest ON jobs (key_id, digest);
CREATE INDEX jobs_key ON jobs (key_id, status, started);
CREATE TABLE job_workers (
    name TEXT PRIMARY KEY,
    started TEXT NOT NULL,
    heartbeat TEXT NOT NULL
);
CREATE INDEX job_workers_heartbeat ON job_workers (heartbeat);
"""

#: The columns :meth:`JobQueue.get` returns.
_COLUMNS = ["id", "key_id", "dataset", "request", "status", "stage", "progress", "attempts",
            "created", "started", "heartbeat", "finished", "expires", "worker", "error",
            "media_type", "filename", "size", "parts"]  # fmt: skip

#: The claim, one statement: a queued job, or a running one whose worker went quiet, of the
#: key with the fewest jobs running (worker alive), then the key whose latest job started
#: longest ago (round robin between keys), then the oldest. Parameters: worker, now, now,
#: quiet, attempts, quiet.
_CLAIM = """
UPDATE jobs SET status = 'running', stage = 'building', progress = 0, worker = ?, started = ?,
    heartbeat = ?, attempts = attempts + 1
WHERE id = (
    SELECT j.id FROM jobs AS j
    WHERE (j.status = 'queued' OR (j.status = 'running' AND j.heartbeat < ?)) AND j.attempts < ?
    ORDER BY
        (SELECT COUNT(*) FROM jobs AS r
         WHERE r.key_id = j.key_id AND r.status = 'running' AND r.heartbeat >= ?),
        (SELECT COALESCE(MAX(s.started), '') FROM jobs AS s WHERE s.key_id = j.key_id),
        j.created, j.id
    LIMIT 1{lock}
)
RETURNING id, key_id, dataset, request, attempts
"""

#: The statuses of a job another identical request of its key is given instead of a new one.
_REUSED = ("queued", "running", "done")

#: How many times a job is claimed before it fails (its worker stopped each time).
MAX_ATTEMPTS = 3


def _now() -> datetime:
    return datetime.now(UTC)


def _text(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds")


def _key_lock(key_id: str) -> int:
    """The advisory lock (a signed 64-bit integer) of one key's submissions."""
    digest = hashlib.blake2b(key_id.encode(), digest_size=8, person=b"tablesafe-jobs").digest()
    return int.from_bytes(digest, "big", signed=True)


def _abandoned() -> str:
    return json.dumps(
        {
            "status": 500,
            "type": "InternalError",
            "message": f"the job's worker stopped {MAX_ATTEMPTS} times; ask for it again",
        }
    )


class JobQueue:
    """The job queue of one state store (SQLite or PostgreSQL).

    Args:
        store: The state store.
    """

    def __init__(self, store: StateStore) -> None:
        self.store = store
        # PostgreSQL's row lock for the claim (its class says so); SQLite's write lock is enough.
        self._claim = _CLAIM.format(lock=getattr(store, "claim_lock", ""))
        # PostgreSQL's advisory lock of a key's submissions; SQLite's write lock is enough.
        self._key_lock: str | None = getattr(store, "advisory_lock", None)

    def submit(
        self,
        key_id: str,
        dataset: str,
        request: dict[str, Any],
        *,
        digest: str | None = None,
        limit: int = 0,
    ) -> str:
        """Queue a job, or find the key's identical one: its id (random, 128 bits).

        Args:
            key_id: The key that asks.
            dataset: The dataset's name.
            request: What the worker reads (body, format, options).
            digest: What the job builds (:func:`tablesafe.server._jobs.job_digest`): a job of
                the key with this digest, queued, running or done, is answered instead.
            limit: Most jobs the key may have queued or running (0: no limit).

        Raises:
            TooManyJobs: for a new job past ``limit``.
        """
        now = _now()
        with self.store._write() as sql:
            if self._key_lock is not None:
                sql.execute(self._key_lock, (_key_lock(key_id),)).fetchone()
            if digest is not None:
                row = sql.execute(
                    "SELECT id FROM jobs WHERE key_id = ? AND digest = ? AND status IN (?, ?, ?) "
                    "AND (expires IS NULL OR expires > ?) ORDER BY created DESC LIMIT 1",
                    (key_id, digest, *_REUSED, _text(now)),
                ).fetchone()
                if row is not None:
                    return str(row[0])
            if limit > 0:
                (waiting,) = sql.execute(
                    "SELECT COUNT(*) FROM jobs "
                    "WHERE key_id = ? AND status IN ('queued', 'running')",
                    (key_id,),
                ).fetchone()
                if int(waiting) >= limit:
                    raise TooManyJobs(
                        f"this key has {int(waiting)} jobs queued or running, the most this site "
                        f"allows ([server] max_queued_jobs_per_key = {limit}); ask again when one "
                        "is done (GET /api/jobs/{id} says when)"
                    )
            job_id = secrets.token_hex(16)
            sql.execute(
                "INSERT INTO jobs (id, key_id, dataset, request, status, stage, progress, "
                "attempts, created, digest) VALUES (?, ?, ?, ?, 'queued', 'queued', 0, 0, ?, ?)",
                (job_id, key_id, dataset, json.dumps(request, sort_keys=True), _text(now), digest),
            )
        return job_id

    def get(self, job_id: str) -> dict[str, Any] | None:
        """A job's row (its request and error parsed), or None."""
        with self.store._connection() as sql:
            row = sql.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
        if row is None:
            return None
        job = dict(zip(_COLUMNS, row, strict=True))
        job["request"] = json.loads(job["request"])
        job["error"] = None if job["error"] is None else json.loads(job["error"])
        job["progress"] = float(job["progress"])
        return job

    def claim(self, worker: str, *, stale_seconds: float) -> dict[str, Any] | None:
        """Take the next job for ``worker`` (fairly between keys, see the module's docstring).

        Its id, key, dataset, request and attempt. Jobs whose worker went quiet
        after their last attempt fail first.
        """
        now = _now()
        quiet = _text(now - timedelta(seconds=stale_seconds))
        with self.store._write() as sql:
            sql.execute(
                "UPDATE jobs SET status = 'failed', stage = 'failed', error = ?, finished = ?, "
                "expires = ? WHERE status = 'running' AND heartbeat < ? AND attempts >= ?",
                (_abandoned(), _text(now), _text(now), quiet, MAX_ATTEMPTS),
            )
            row = sql.execute(
                self._claim, (worker, _text(now), _text(now), quiet, MAX_ATTEMPTS, quiet)
            ).fetchone()
        if row is None:
            return None
        job_id, key_id, dataset, request, attempt = row
        return {
            "id": str(job_id),
            "key_id": str(key_id),
            "dataset": str(dataset),
            "request": json.loads(request),
            "attempt": int(attempt),
        }

    def report(self, job_id: str, worker: str, stage: str, progress: float) -> bool:
        """Record a running job's stage and progress; False if ``worker`` no longer holds it."""
        with self.store._connection() as sql:
            done = sql.execute(
                "UPDATE jobs SET stage = ?, progress = ?, heartbeat = ? "
                "WHERE id = ? AND worker = ? AND status = 'running'",
                (stage, float(progress), _text(_now()), job_id, worker),
            )
            return done.rowcount == 1

    def write_part(self, job_id: str, attempt: int, part: int, data: bytes) -> None:
        """Store one piece of a job's result (pieces are read back in ``part`` order)."""
        with self.store._connection() as sql:
            sql.execute(
                "INSERT INTO job_parts (job_id, attempt, part, data) VALUES (?, ?, ?, ?)",
                (job_id, attempt, part, data),
            )

    def finish(
        self, job_id: str, worker: str, attempt: int, *, media_type: str, filename: str,
        size: int, parts: int, keep_days: float,
    ) -> bool:  # fmt: skip
        """Mark a job done, its result kept ``keep_days``; False if ``worker`` lost it.

        The pieces of earlier attempts (their workers stopped) are deleted.
        """
        now = _now()
        with self.store._write() as sql:
            done = sql.execute(
                "UPDATE jobs SET status = 'done', stage = 'done', progress = 1, finished = ?, "
                "expires = ?, media_type = ?, filename = ?, size = ?, parts = ? "
                "WHERE id = ? AND worker = ? AND status = 'running' AND attempts = ?",
                (_text(now), _text(now + timedelta(days=keep_days)), media_type, filename,
                 size, parts, job_id, worker, attempt),
            )  # fmt: skip
            if done.rowcount != 1:
                return False
            sql.execute(
                "DELETE FROM job_parts WHERE job_id = ? AND attempt <> ?", (job_id, attempt)
            )
            return True

    def fail(self, job_id: str, worker: str, error: dict[str, Any], *, keep_days: float) -> bool:
        """Mark a job failed with ``error`` (the one JSON shape's inner object); its pieces go."""
        now = _now()
        with self.store._write() as sql:
            done = sql.execute(
                "UPDATE jobs SET status = 'failed', stage = 'failed', error = ?, finished = ?, "
                "expires = ? WHERE id = ? AND worker = ? AND status = 'running'",
                (json.dumps(error), _text(now), _text(now + timedelta(days=keep_days)), job_id,
                 worker),
            )  # fmt: skip
            sql.execute("DELETE FROM job_parts WHERE job_id = ?", (job_id,))
            return done.rowcount == 1

    def release(self, job_id: str, worker: str, attempt: int) -> str | None:
        """Put a job ``worker`` holds back in the queue (its worker stops); its status, or None.

        The attempt stays counted: a job released or abandoned :data:`MAX_ATTEMPTS`
        times fails, as one whose worker went quiet does. The attempt's pieces go.
        """
        now = _now()
        held = "WHERE id = ? AND worker = ? AND status = 'running' AND attempts = ?"
        with self.store._write() as sql:
            back = sql.execute(
                "UPDATE jobs SET status = 'queued', stage = 'queued', progress = 0, "
                f"worker = NULL, heartbeat = NULL, started = NULL {held} AND attempts < ?",
                (job_id, worker, attempt, MAX_ATTEMPTS),
            )
            status: str | None = str(JobStatus.QUEUED) if back.rowcount == 1 else None
            if status is None:
                failed = sql.execute(
                    "UPDATE jobs SET status = 'failed', stage = 'failed', error = ?, "
                    f"finished = ?, expires = ? {held}",
                    (_abandoned(), _text(now), _text(now), job_id, worker, attempt),
                )
                status = str(JobStatus.FAILED) if failed.rowcount == 1 else None
            sql.execute("DELETE FROM job_parts WHERE job_id = ? AND attempt = ?", (job_id, attempt))
            return status

    # -- workers' heartbeats ------------------------------------------------------------------

    def beat(self, worker: str) -> None:
        """Record that ``worker`` runs (its first beat registers it)."""
        now = _text(_now())
        with self.store._connection() as sql:
            sql.execute(
                "INSERT INTO job_workers (name, started, heartbeat) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET heartbeat = excluded.heartbeat",
                (worker, now, now),
            )

    def leave(self, worker: str) -> None:
        """``worker`` stopped: it no longer counts as running."""
        with self.store._connection() as sql:
            sql.execute("DELETE FROM job_workers WHERE name = ?", (worker,))

    def live_workers(self, within_seconds: float) -> int:
        """Workers whose last heartbeat is at most ``within_seconds`` old."""
        since = _text(_now() - timedelta(seconds=within_seconds))
        with self.store._connection() as sql:
            (n,) = sql.execute(
                "SELECT COUNT(*) FROM job_workers WHERE heartbeat >= ?", (since,)
            ).fetchone()
        return int(n)

    def parts(self, job_id: str, attempt: int, count: int) -> Iterator[bytes]:
        """A finished job's result, a piece at a time (one query each: memory stays one piece)."""
        for part in range(count):
            with self.store._connection() as sql:
                row = sql.execute(
                    "SELECT data FROM job_parts WHERE job_id = ? AND attempt = ? AND part = ?",
                    (job_id, attempt, part),
                ).fetchone()
            if row is None:  # deleted (expired) while it was read
                return
            yield bytes(row[0])

    def counts(self) -> dict[str, int]:
        """Jobs by status (every status, 0 included)."""
        with self.store._connection() as sql:
            rows = sql.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
        found = {str(s): int(n) for s, n in rows}
        return {str(s): found.get(str(s), 0) for s in JobStatus}

    def delete_expired(self, now: datetime | None = None) -> int:
        """Delete the jobs (and results) past their ``expires``; how many.

        Heartbeats of workers silent for a day (killed, not stopped) go too.
        """
        when = _text(now or _now())
        with self.store._write() as sql:
            sql.execute(
                "DELETE FROM job_workers WHERE heartbeat < ?",
                (_text((now or _now()) - timedelta(days=1)),),
            )
            sql.execute(
                "DELETE FROM job_parts WHERE job_id IN "
                "(SELECT id FROM jobs WHERE expires IS NOT NULL AND expires < ?)",
                (when,),
            )
            gone = sql.execute(
                "DELETE FROM jobs WHERE expires IS NOT NULL AND expires < ?", (when,)
            )
            return int(gone.rowcount)
