"""The job queue in the state store: large tables built by workers (issue 31).

A job is a row of ``jobs`` (schema version 3): who asked, the dataset, the
request, its status (:class:`JobStatus`), stage and progress, the times it
was made, started, last reported and finished, and when it expires; its
result is the rows of ``job_parts`` (pieces of the file, in order), so that a
result is written and read a piece at a time, and every replica can serve any
job's result.

A worker *claims* the oldest queued job in one statement: PostgreSQL picks it
with ``FOR UPDATE SKIP LOCKED`` (two workers never take one job, and neither
waits for the other), SQLite inside ``BEGIN IMMEDIATE`` (the file's write
lock). A job whose worker stopped reporting for ``stale`` seconds is claimed
again; each claim counts an attempt, and a result's pieces are kept per
attempt, so a stopped worker that comes back writes nothing into the new
attempt's result. Only the worker holding the job's latest claim can report
on it, finish it or fail it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from tablesafe.state._store import StateStore

__all__ = ["JOB_SCHEMA", "JobQueue", "JobStatus"]


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

#: The columns :meth:`JobQueue.get` returns.
_COLUMNS = ["id", "key_id", "dataset", "request", "status", "stage", "progress", "attempts",
            "created", "started", "heartbeat", "finished", "expires", "worker", "error",
            "media_type", "filename", "size", "parts"]  # fmt: skip

#: The claim, one statement: the oldest queued job, or a running one whose worker went quiet.
_CLAIM = """
UPDATE jobs SET status = 'running', stage = 'building', progress = 0, worker = ?, started = ?,
    heartbeat = ?, attempts = attempts + 1
WHERE id = (
    SELECT id FROM jobs
    WHERE (status = 'queued' OR (status = 'running' AND heartbeat < ?)) AND attempts < ?
    ORDER BY created, id LIMIT 1{lock}
)
RETURNING id, key_id, dataset, request, attempts
"""

#: How many times a job is claimed before it fails (its worker stopped each time).
MAX_ATTEMPTS = 3


def _now() -> datetime:
    return datetime.now(UTC)


def _text(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds")


class JobQueue:
    """The job queue of one state store (SQLite or PostgreSQL).

    Args:
        store: The state store.
    """

    def __init__(self, store: StateStore) -> None:
        self.store = store
        # PostgreSQL's row lock for the claim (its class says so); SQLite's write lock is enough.
        self._claim = _CLAIM.format(lock=getattr(store, "claim_lock", ""))

    def submit(self, key_id: str, dataset: str, request: dict[str, Any]) -> str:
        """Queue a job; its id (random, 128 bits)."""
        job_id = secrets.token_hex(16)
        with self.store._connection() as sql:
            sql.execute(
                "INSERT INTO jobs (id, key_id, dataset, request, status, stage, progress, "
                "attempts, created) VALUES (?, ?, ?, ?, 'queued', 'queued', 0, 0, ?)",
                (job_id, key_id, dataset, json.dumps(request, sort_keys=True), _text(_now())),
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
        """Take the oldest job ready to run for ``worker``: its id, key, dataset, request, attempt.

        Jobs whose worker went quiet after their last attempt fail first.
        """
        now = _now()
        quiet = _text(now - timedelta(seconds=stale_seconds))
        with self.store._write() as sql:
            abandoned = {
                "status": 500,
                "type": "InternalError",
                "message": f"the job's worker stopped {MAX_ATTEMPTS} times; ask for it again",
            }
            sql.execute(
                "UPDATE jobs SET status = 'failed', stage = 'failed', error = ?, finished = ?, "
                "expires = ? WHERE status = 'running' AND heartbeat < ? AND attempts >= ?",
                (json.dumps(abandoned), _text(now), _text(now), quiet, MAX_ATTEMPTS),
            )
            row = sql.execute(
                self._claim, (worker, _text(now), _text(now), quiet, MAX_ATTEMPTS)
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
        """Delete the jobs (and results) past their ``expires``; how many."""
        when = _text(now or _now())
        with self.store._write() as sql:
            sql.execute(
                "DELETE FROM job_parts WHERE job_id IN "
                "(SELECT id FROM jobs WHERE expires IS NOT NULL AND expires < ?)",
                (when,),
            )
            gone = sql.execute(
                "DELETE FROM jobs WHERE expires IS NOT NULL AND expires < ?", (when,)
            )
            return int(gone.rowcount)
