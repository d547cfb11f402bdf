"""Jobs: large tables built by workers, their status and their results (issue 31).

A table over a dataset's direct limit (``max_cells``) may be asked for as a
job, up to ``max_job_cells``::

    POST /api/datasets/{name}/jobs?format=csv   a table request: 202 {"id": ...}
    GET  /api/jobs/{id}                         status, stage, progress; the error if it failed
    GET  /api/jobs/{id}/result                  the file, streamed from the state store

Only the key that asked (or an admin key) sees a job; to any other it is
404. The request is checked against the catalog and the job limits when it
is queued (so a bad request is a 4xx at once), and queued in the state store
(:class:`tablesafe.state._jobs.JobQueue`), which every replica and worker
shares. A key that asks again for a job it has queued, running or done gets
that job (:func:`job_digest`: the same checked request, format and options on
the same microdata and settings); it may have at most ``[server]
max_queued_jobs_per_key`` jobs queued or running (429 ``TooManyJobs``
beyond). Workers take jobs fairly between keys (the state store's claim).

A :class:`Worker` (``tablesafe worker --config SITE``) takes jobs one at a
time and builds each with :meth:`TableService.table
<tablesafe.service._service.TableService.table>`, the path of a direct table:
the same protection, rules, sliver guard and privacy ledger, only with the
job limits (``max_job_cells``, ``job_timeout_seconds``) and no table cache.
It writes the file into the store in pieces of about 1 MiB (CSV by a
streamed writer, :mod:`tablesafe.output._stream`), writes the job's audit
row (endpoint ``JOB /api/datasets/{name}/jobs/{id}``, read by the
reconstruction audit as a table served), then marks it done; results are
kept ``[server] job_result_days``, then deleted by the workers.

``tablesafe serve`` runs a worker of its own (:class:`ServerWorker`,
``[server] embedded_worker``): a thread that takes jobs when there are some,
builds them one at a time with a service of the job limits that shares the
server's state store, and stops with the server. Every worker writes a
heartbeat into the store, so the status of a job queued while no worker runs
says so and what to do.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tablesafe._errors import TablesafeError, UserError
from tablesafe._request import TableRequest
from tablesafe._settings import AuditFailure, EmbeddedWorker, RuleSettings, SiteConfig
from tablesafe.output._formats import OutputFormat, WriteOptions, format_names, output_format
from tablesafe.output._stream import csv_pieces
from tablesafe.output._table import ProtectedTable
from tablesafe.server._auth import Authenticator
from tablesafe.server._gate import error_object
from tablesafe.service._bodies import TableBody
from tablesafe.service._service import Principal, TableService
from tablesafe.state import StateStore
from tablesafe.state._jobs import JobQueue, JobStatus

__all__ = [
    "NO_WORKER",
    "JobNotDone",
    "ServerWorker",
    "Unavailable",
    "Worker",
    "add_job_routes",
    "embedded_worker",
    "error_object",
    "job_digest",
    "job_progress",
    "job_rules",
    "job_site",
    "run_worker",
    "submit_job",
    "visible_job",
]

log = logging.getLogger("tablesafe.worker")

#: Bytes of a result gathered before they are written as one piece.
PIECE_BYTES = 1 << 20
#: Least time between two progress reports of a writer (a heartbeat reports meanwhile).
_REPORT_SECONDS = 0.5
#: Seconds between two heartbeats of a worker, and after which one silent counts as stopped.
WORKER_BEAT_SECONDS = 10.0
WORKER_LIVE_SECONDS = 45.0

#: What the status of a job queued while no worker runs says.
NO_WORKER = (
    "no worker is running for this site, so the job waits in the queue until one starts; "
    "ask the site's operator to start one (tablesafe worker --config SITE, or tablesafe serve "
    'with [server] embedded_worker = "on"; docs/deploying.md#jobs)'
)


class JobNotDone(UserError):
    """The result of a job that is not done (HTTP 409)."""

    status_code = 409


def job_rules(rules: RuleSettings) -> RuleSettings:
    """A dataset's rules for jobs: ``max_job_cells`` and ``job_timeout_seconds`` as the limits."""
    return rules.model_copy(
        update={
            "max_cells": rules.max_job_cells,
            "query_timeout_seconds": rules.job_timeout_seconds,
        }
    )


def job_site(site: SiteConfig) -> SiteConfig:
    """The site configuration a worker serves: every dataset's job rules, no table cache."""
    datasets = [ds.model_copy(update={"rules": job_rules(ds.rules)}) for ds in site.datasets]
    server = site.server.model_copy(update={"cache_tables": 0})
    return site.model_copy(update={"datasets": datasets, "server": server})


def check_job(service: TableService, name: str, request: TableRequest) -> TableRequest:
    """Check a job's request against the catalog and the job limits (before it is queued).

    Returns:
        The checked request (codes in the catalog's types), as the worker's build checks it.

    Raises:
        RequestError: for a request the catalog does not allow.
        TooManyCells: for more cells than ``max_job_cells``.
    """
    served = service.served(name)
    return served.builder.admission.check(request, job_rules(served.settings.rules))


def job_digest(service: TableService, name: str, checked: TableRequest, job: dict[str, Any]) -> str:
    """What a job builds, as a digest: two jobs with one digest have the same bytes.

    The checked request (every field, universes in a canonical order), the
    format and its options, the dataset's name and settings (protection and
    rules) and the microdata's identity: a job asked for again after the data
    or the settings changed is a new job.
    """
    served = service.served(name)
    what = {
        "dataset": name,
        "identity": service.identity(name),
        "settings": served.settings.model_dump(mode="json"),
        "request": dataclasses.asdict(checked),
        "format": job["format"],
        "footnotes": job["footnotes"],
        "labels": job["labels"],
    }
    text = json.dumps(what, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16, person=b"tablesafe-job").hexdigest()


def add_job_routes(
    app: FastAPI,
    service: TableService,
    auth: Authenticator,
    *,
    principal: Callable[[Request], Principal],
    served: Callable[[TableService, Request, str], str],
) -> None:
    """The job endpoints (see the module's docstring).

    Args:
        app: The application.
        service: The table service (its state store holds the queue).
        auth: The keys (an admin sees every job).
        principal: The application's dependency giving the caller.
        served: The application's check that a dataset is served.
    """
    queue = JobQueue(service.state)

    @app.post("/api/datasets/{name}/jobs", status_code=202, tags=["jobs"])
    def submit(
        request: Request,
        name: str,
        body: TableBody,
        who: Principal = Depends(principal),
        format: Annotated[
            str, Query(description="An output format: " + ", ".join(format_names(served=True)))
        ] = "json",
        footnotes: Annotated[bool, Query()] = True,
        labels: Annotated[bool, Query()] = False,
    ) -> JSONResponse:
        """Queue a table as a job (up to ``max_job_cells``): 202 with its id."""
        request.state.body = {**body.model_dump(), "format": format}
        output_format(format, served=True)
        served(service, request, name)
        out = submit_job(
            service, queue, who, name, body, format=format, footnotes=footnotes, labels=labels
        )
        embedded = getattr(request.app.state, "embedded_worker", None)
        if embedded is not None:
            embedded.wake()
        return JSONResponse(out, status_code=202, headers={"location": out["href"]})

    def visible(request: Request, job_id: str, who: Principal) -> dict[str, Any]:
        job = visible_job(queue, job_id, who)
        if job is None:
            raise StarletteHTTPException(404, f"no job {job_id[:64]!r} (or not yours)")
        request.state.dataset = job["dataset"]
        return job

    @app.get("/api/jobs/{job_id}", tags=["jobs"])
    def status(request: Request, job_id: str, who: Principal = Depends(principal)) -> Any:
        """A job's status, stage and progress; its error if it failed, its result if done.

        A job not done says how many workers run for the site, and when none
        does, that it waits for one (``message``).
        """
        return job_progress(queue, visible(request, job_id, who))

    @app.get("/api/jobs/{job_id}/result", tags=["jobs"])
    def result(request: Request, job_id: str, who: Principal = Depends(principal)) -> Response:
        """A done job's file, streamed."""
        job = visible(request, job_id, who)
        if job["status"] != JobStatus.DONE:
            raise JobNotDone(
                f"job {job_id} is {job['status']}: its result is ready when its status is done "
                f"(GET /api/jobs/{job_id})"
            )
        return StreamingResponse(
            queue.parts(job_id, int(job["attempts"]), int(job["parts"])),
            media_type=job["media_type"],
            headers={
                "content-disposition": f'attachment; filename="{job["filename"]}"',
                "content-length": str(job["size"]),
            },
        )


def submit_job(
    service: TableService,
    queue: JobQueue,
    who: Principal,
    name: str,
    body: TableBody,
    *,
    format: str = "json",
    footnotes: bool = True,
    labels: bool = False,
) -> dict[str, Any]:
    """Queue a table request as a job for every door (the API's POST, the agent interface).

    Returns:
        What ``POST /api/datasets/{name}/jobs`` answers: the job's id, status and href.

    Raises:
        NotFound: for a dataset not served.
        RequestError, TooManyCells, TooManyJobs: as the job's checks say.
    """
    output_format(format, served=True)
    service.require(name)
    job = {"body": body.model_dump(), "format": format, "footnotes": footnotes, "labels": labels}
    return _queue(service, queue, who, name, body.to_request(), job)


def visible_job(queue: JobQueue, job_id: str, who: Principal) -> dict[str, Any] | None:
    """The job ``job_id`` if ``who`` may see it (its own key, or an admin), else None.

    Another key's job is not told apart from no job.
    """
    job = queue.get(job_id) if len(job_id) <= 64 else None
    if job is None or (job["key_id"] != who.id and who.role != "admin"):
        return None
    return job


def job_progress(queue: JobQueue, job: dict[str, Any]) -> dict[str, Any]:
    """What ``GET /api/jobs/{id}`` answers: the job's status, and its workers while it waits."""
    return {**job_status(job), **_waiting(queue, job)}


def _queue(
    service: TableService,
    queue: JobQueue,
    who: Principal,
    name: str,
    request: TableRequest,
    job: dict[str, Any],
) -> dict[str, Any]:
    """Check a job and queue it, or find the key's identical one: what ``POST`` answers.

    Raises:
        RequestError, TooManyCells: for a request the job limits do not allow.
        TooManyJobs: for a new job past the key's ``max_queued_jobs_per_key``.
    """
    checked = check_job(service, name, request)
    job_id = queue.submit(
        who.id,
        name,
        job,
        digest=job_digest(service, name, checked, job),
        limit=service.site.server.max_queued_jobs_per_key,
    )
    row = queue.get(job_id)
    status = str(row["status"]) if row is not None else str(JobStatus.QUEUED)
    return {"id": job_id, "status": status, "href": f"/api/jobs/{job_id}", **_waiting(queue, row)}


def _waiting(queue: JobQueue, job: dict[str, Any] | None) -> dict[str, Any]:
    """For a job queued or running: the workers running, and what to do when none is."""
    if job is None or job["status"] not in (JobStatus.QUEUED, JobStatus.RUNNING):
        return {}
    workers = queue.live_workers(WORKER_LIVE_SECONDS)
    return {"workers": workers, "message": NO_WORKER} if workers == 0 else {"workers": workers}


def job_status(job: dict[str, Any]) -> dict[str, Any]:
    """What ``GET /api/jobs/{id}`` answers for a job row."""
    shown = ("id", "dataset", "status", "stage", "progress", "created", "started", "finished",
             "expires")  # fmt: skip
    out = {key: job[key] for key in shown}
    out["format"] = job["request"]["format"]
    if job["status"] == JobStatus.FAILED:
        out["error"] = job["error"]
    if job["status"] == JobStatus.DONE:
        out.update(
            result=f"/api/jobs/{job['id']}/result",
            filename=job["filename"],
            media_type=job["media_type"],
            size=job["size"],
        )
    return out


class _Progress:
    """A running job's stage and progress, reported by the writer and by a heartbeat thread.

    The heartbeat keeps a long build from looking stopped (``job_stale_seconds``);
    a report that finds the job taken by another worker marks it ``lost``.
    """

    def __init__(
        self, queue: JobQueue, job_id: str, worker: str, interval: float, gone: threading.Event
    ) -> None:
        self.queue, self.job_id, self.worker, self.interval = queue, job_id, worker, interval
        # Set when the job was released (the server stopped before the job was done).
        self.gone = gone
        self.stage, self.share, self.lost = "building", 0.0, False
        self._last = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="job-heartbeat", daemon=True)

    def __enter__(self) -> _Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def set(self, stage: str, share: float) -> None:
        self.stage, self.share = stage, share
        if time.monotonic() - self._last >= _REPORT_SECONDS:
            self.report()

    def report(self) -> None:
        with self._lock:
            if self.gone.is_set():  # released: not this worker's job any more
                self.lost = True
                return
            self._last = time.monotonic()
            try:
                held = self.queue.report(self.job_id, self.worker, self.stage, self.share)
            except Exception:  # the store is down for a moment: the next beat tries again
                log.exception("job %s: progress not recorded", self.job_id)
                return
            self.lost = self.lost or not held

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            self.report()


def _pieces(
    table: ProtectedTable, fmt: OutputFormat, options: WriteOptions, progress: _Progress
) -> Iterator[bytes]:
    """The file of ``table`` in ``fmt``: the bytes the table endpoint answers, in pieces."""
    if fmt.name == "csv":
        total = max(1, int(table.computed.sum()))
        for piece, rows in csv_pieces(table, footnotes=options.footnotes, labels=options.labels):
            progress.set("writing", rows / total)
            yield piece
    elif fmt.stream is not None:  # what the table endpoint streams (JSON)
        yield from fmt.stream(table)
    else:
        data = fmt.write(table, options)
        yield data.encode() if isinstance(data, str) else data


class Worker:
    """Takes jobs from the site's state store and builds them (``tablesafe worker``).

    Args:
        site: The site configuration (the job limits are applied to it).
        name: The worker's name in the queue (default: host, process id and a random tag).
        service: A ready service (default: one for :func:`job_site`).
        state: A state store shared with a server (the embedded worker): the
            service is then made with it when the first job comes, and
            :meth:`close` leaves it open.
    """

    def __init__(
        self,
        site: SiteConfig,
        *,
        name: str | None = None,
        service: TableService | None = None,
        state: StateStore | None = None,
    ) -> None:
        self.site = site
        self._state = state
        self._service = service
        if service is None and state is None:
            self._service = TableService(job_site(site))
        self.queue = JobQueue(state if state is not None else self.service.state)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.keep_days = site.server.job_result_days
        self.stale = site.server.job_stale_seconds
        # The job being built (id, attempt), and whether it was released.
        self.current: tuple[str, int] | None = None
        self.gone = threading.Event()

    @property
    def service(self) -> TableService:
        """The service that builds jobs (made at the first job when the store is shared)."""
        if self._service is None:
            self._service = TableService(job_site(self.site), state=self._state)
        return self._service

    def close(self) -> None:
        """Close the service (engines; the state store too unless it is shared)."""
        if self._service is None:
            return
        if self._state is None:
            self._service.close()
        else:
            self._service.close_engines()

    def run(
        self,
        stop: threading.Event,
        *,
        poll_seconds: float = 1.0,
        once: bool = False,
        wake: threading.Event | None = None,
    ) -> int:
        """Build jobs until ``stop`` is set (or, with ``once``, until none is queued); how many.

        A job being built when ``stop`` is set is finished first. Expired jobs
        are deleted at the start and every 10 minutes. The worker's heartbeat
        is written every :data:`WORKER_BEAT_SECONDS` while it runs, and deleted
        when it stops. ``wake``, when set, ends a wait at an empty queue early.
        """
        done, cleaned = 0, float("-inf")
        with _Heartbeat(self.queue, self.name, self.gone):
            while not stop.is_set():
                if time.monotonic() - cleaned > 600:
                    self.queue.delete_expired()
                    cleaned = time.monotonic()
                job = self.queue.claim(self.name, stale_seconds=self.stale)
                if job is None:
                    if once:
                        break
                    (wake or stop).wait(poll_seconds)
                    if wake is not None:
                        wake.clear()
                    continue
                self.process(job)
                done += 1
        return done

    def release(self) -> str | None:
        """Put the job being built back in the queue (the server stops); its status, or None.

        The build goes on in its thread, but reports, writes and finishes nothing
        more of the job: the next worker builds it again, as a new attempt.
        """
        self.gone.set()
        current = self.current
        status = None
        if current is not None:
            status = self.queue.release(current[0], self.name, current[1])
        self.queue.leave(self.name)  # it builds nothing more: not a running worker
        return status

    def process(self, job: dict[str, Any]) -> str:
        """Build one claimed job; its final status (``lost`` if another worker took it)."""
        interval = min(30.0, self.stale / 4)
        self.current = (job["id"], job["attempt"])
        try:
            with _Progress(self.queue, job["id"], self.name, interval, self.gone) as progress:
                try:
                    return self._build(job, progress)
                except Exception as exc:
                    if self.gone.is_set():  # released while it was built: not ours to fail
                        return "lost"
                    if not isinstance(exc, TablesafeError):
                        log.exception("job %s failed", job["id"])
                    error = error_object(exc)
                    self._audit(job, error["status"], f"{error['type']}: {error['message']}")
                    failed = self.queue.fail(job["id"], self.name, error, keep_days=self.keep_days)
                    return str(JobStatus.FAILED) if failed else "lost"
        finally:
            self.current = None

    def _build(self, job: dict[str, Any], progress: _Progress) -> str:
        request = job["request"]
        body = TableBody.model_validate(request["body"])
        fmt = output_format(request["format"], served=True)
        options = WriteOptions(footnotes=request["footnotes"], labels=request["labels"])
        who = Principal(job["key_id"], "user", 0)
        table = self.service.answer(who, job["dataset"], body)
        progress.set("writing", 0.0)
        size = parts = 0
        buffer = bytearray()
        for piece in _pieces(table, fmt, options, progress):
            if self.gone.is_set():  # released (the server stopped): the next attempt writes
                return "lost"
            buffer += piece
            if len(buffer) >= PIECE_BYTES:
                self.queue.write_part(job["id"], job["attempt"], parts, bytes(buffer))
                size, parts, buffer = size + len(buffer), parts + 1, bytearray()
        if buffer or parts == 0:
            self.queue.write_part(job["id"], job["attempt"], parts, bytes(buffer))
            size, parts = size + len(buffer), parts + 1
        if progress.lost or self.gone.is_set():
            return "lost"
        audited = self._audit(job, 200, f"ok: job {job['id']}")
        if not audited and self.site.server.audit_failure == AuditFailure.REFUSE:
            raise Unavailable("the audit log cannot be written, so the result is not kept")
        finished = self.queue.finish(
            job["id"],
            self.name,
            job["attempt"],
            media_type=fmt.media_type,
            filename=f"{table.file_stem()}.{fmt.extension}",
            size=size,
            parts=parts,
            keep_days=self.keep_days,
        )
        return str(JobStatus.DONE) if finished else "lost"

    def _audit(self, job: dict[str, Any], status: int, outcome: str) -> bool:
        """The job's audit row, as a direct table's (its body and format); whether written."""
        request = job["request"]
        try:
            self.service.state.record(
                key_id=job["key_id"],
                endpoint=f"JOB /api/datasets/{job['dataset']}/jobs/{job['id']}",
                status=status,
                outcome=outcome,
                client=f"worker {self.name}",
                dataset=job["dataset"],
                request={**request["body"], "format": request["format"]},
            )
        except Exception:  # counted as a failure of the job when the site refuses unaudited
            log.exception("job %s: audit log write failed", job["id"])
            return False
        return True


class _Heartbeat:
    """A worker's heartbeat in the state store, from a thread, while the worker runs.

    Once ``gone`` is set (the worker released its job and left), it writes nothing more.
    """

    def __init__(self, queue: JobQueue, worker: str, gone: threading.Event) -> None:
        self.queue, self.worker, self.gone = queue, worker, gone
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="worker-heartbeat", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self.queue.beat(self.worker)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self.gone.is_set():
            return
        try:
            self.queue.leave(self.worker)
        except Exception:  # a store already closed (the server stopped first): the row ages out
            log.debug("worker %s: heartbeat not deleted", self.worker, exc_info=True)

    def _beat(self) -> None:
        while not self._stop.wait(WORKER_BEAT_SECONDS) and not self.gone.is_set():
            try:
                self.queue.beat(self.worker)
            except Exception:  # the store is down for a moment: the next beat tries again
                log.exception("worker %s: heartbeat not recorded", self.worker)


def embedded_worker(site: SiteConfig) -> bool:
    """Whether ``tablesafe serve`` runs a worker of its own for ``site``.

    ``[server] embedded_worker``; ``auto`` is on with the SQLite state store
    and off with PostgreSQL (docs/decisions.md).
    """
    setting = site.server.embedded_worker
    if setting == EmbeddedWorker.AUTO:
        return site.state.url is None
    return setting == EmbeddedWorker.ON


class ServerWorker:
    """The server's own worker: a thread that builds jobs while the server runs (issue 40).

    It shares the server's state store (one connection, one guard's memory)
    and makes its service of the job limits when the first job comes, so a
    server that is never asked for a job opens nothing more.

    Args:
        site: The site configuration.
        state: The server's state store.
        poll_seconds: Wait between looks at an empty queue (a job queued by
            this server wakes it at once).
    """

    def __init__(self, site: SiteConfig, state: StateStore, *, poll_seconds: float = 1.0) -> None:
        name = f"{socket.gethostname()}:{os.getpid()}:serve:{secrets.token_hex(3)}"
        self.worker = Worker(site, name=name, state=state)
        self.poll_seconds = poll_seconds
        self._stop, self._wake = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="embedded-worker", daemon=True)

    def start(self) -> None:
        """Start taking jobs."""
        self._thread.start()

    def wake(self) -> None:
        """Look at the queue now (a job was queued)."""
        self._wake.set()

    def _run(self) -> None:
        try:
            self.worker.run(self._stop, poll_seconds=self.poll_seconds, wake=self._wake)
        except Exception:
            if not self.worker.gone.is_set():  # after a release, the store may be closed
                log.exception("the embedded worker stopped")

    def stop(self, timeout: float) -> str | None:
        """Stop: the job being built gets ``timeout`` seconds, then goes back to the queue.

        Returns:
            None when the worker stopped in time; else what became of its job
            (``queued`` for another attempt, ``failed`` after its last one).
        """
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.worker.close()
            return None
        status = self.worker.release()
        log.warning(
            "the embedded worker did not finish its job within %s s; the job is %s",
            timeout,
            status or "no longer its own",
        )
        return status


class Unavailable(UserError):
    """A job whose audit row could not be written (HTTP 503), as a direct table's answer."""

    status_code = 503


def run_worker(
    site: SiteConfig, *, poll_seconds: float, once: bool, say: Callable[[str], None]
) -> int:
    """Build a site's queued jobs until SIGTERM or Ctrl-C (with ``once``: those queued now).

    What ``tablesafe worker`` runs: the job being built is finished first,
    then the worker stops. Returns how many jobs it built.

    Args:
        site: The site configuration.
        poll_seconds: How long to wait at an empty queue before looking again.
        once: Build the jobs queued now, then stop.
        say: Where the worker's announcements go (the command line's output).
    """
    runner = Worker(site)
    stop = threading.Event()

    def finish(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    say(f"tablesafe: worker {runner.name} taking jobs from {runner.service.state.location}")
    try:
        done = runner.run(stop, poll_seconds=poll_seconds, once=once)
    finally:
        runner.close()
    say(f"tablesafe: worker {runner.name} stopped after {done} jobs")
    return done
