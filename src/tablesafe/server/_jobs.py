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
shares.

A :class:`Worker` (``tablesafe worker --config SITE``) takes jobs one at a
time and builds each with :meth:`TableService.table
<tablesafe.server._service.TableService.table>`, the path of a direct table:
the same protection, rules, sliver guard and privacy ledger, only with the
job limits (``max_job_cells``, ``job_timeout_seconds``) and no table cache.
It writes the file into the store in pieces of about 1 MiB (CSV by a
streamed writer, :mod:`tablesafe.output._stream`), writes the job's audit
row (endpoint ``JOB /api/datasets/{name}/jobs/{id}``, read by the
reconstruction audit as a table served), then marks it done; results are
kept ``[server] job_result_days``, then deleted by the workers.
"""

from __future__ import annotations

import logging
import os
import secrets
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
from tablesafe._settings import AuditFailure, RuleSettings, SiteConfig
from tablesafe.catalog._custom import check_grouping_limits
from tablesafe.output._formats import OutputFormat, WriteOptions, format_names, output_format
from tablesafe.output._stream import csv_pieces
from tablesafe.output._table import ProtectedTable
from tablesafe.rules._rules import check_request_limits
from tablesafe.server._auth import Authenticator, Principal
from tablesafe.server._bodies import TableBody
from tablesafe.server._service import TableService
from tablesafe.state._jobs import JobQueue, JobStatus

__all__ = [
    "JobNotDone",
    "Unavailable",
    "Worker",
    "add_job_routes",
    "error_object",
    "job_rules",
    "job_site",
]

log = logging.getLogger("tablesafe.worker")

#: Bytes of a result gathered before they are written as one piece.
PIECE_BYTES = 1 << 20
#: Least time between two progress reports of a writer (a heartbeat reports meanwhile).
_REPORT_SECONDS = 0.5


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


def error_object(exc: BaseException) -> dict[str, Any]:
    """The inner object of the one error shape for ``exc``, as the server answers it."""
    if isinstance(exc, TablesafeError):
        user = isinstance(exc, UserError)
        status = exc.status_code if user else (422 if exc.status_code == 422 else 500)
        message = str(exc) if status < 500 or user else "internal error"
        return {"status": status, "type": type(exc).__name__, "message": message}
    return {"status": 500, "type": "InternalError", "message": "internal error"}


def check_job(service: TableService, name: str, request: TableRequest) -> None:
    """Check a job's request against the catalog and the job limits (before it is queued).

    Raises:
        RequestError: for a request the catalog does not allow.
        TooManyCells: for more cells than ``max_job_cells``.
    """
    served = service.served(name)
    rules = job_rules(served.settings.rules)
    check_grouping_limits(
        request.groupings,
        max_groups=rules.max_custom_groups,
        max_categories=rules.max_categories_per_group,
    )
    check_request_limits(request, served.dataset.catalog, rules)
    request.coerced(served.dataset.catalog)


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
        check_job(service, name, body.to_request())
        job = {"body": body.model_dump(), "format": format, "footnotes": footnotes,
               "labels": labels}  # fmt: skip
        job_id = queue.submit(who.id, name, job)
        href = f"/api/jobs/{job_id}"
        return JSONResponse(
            {"id": job_id, "status": str(JobStatus.QUEUED), "href": href},
            status_code=202,
            headers={"location": href},
        )

    def visible(request: Request, job_id: str, who: Principal) -> dict[str, Any]:
        job = queue.get(job_id) if len(job_id) <= 64 else None
        if job is None or (job["key_id"] != who.id and who.role != "admin"):
            # Another key's job is not told apart from no job.
            raise StarletteHTTPException(404, f"no job {job_id[:64]!r} (or not yours)")
        request.state.dataset = job["dataset"]
        return job

    @app.get("/api/jobs/{job_id}", tags=["jobs"])
    def status(request: Request, job_id: str, who: Principal = Depends(principal)) -> Any:
        """A job's status, stage and progress; its error if it failed, its result if done."""
        return job_status(visible(request, job_id, who))

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

    def __init__(self, queue: JobQueue, job_id: str, worker: str, interval: float) -> None:
        self.queue, self.job_id, self.worker, self.interval = queue, job_id, worker, interval
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
    """

    def __init__(
        self, site: SiteConfig, *, name: str | None = None, service: TableService | None = None
    ) -> None:
        self.site = site
        self.service = service or TableService(job_site(site))
        self.queue = JobQueue(self.service.state)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.keep_days = site.server.job_result_days
        self.stale = site.server.job_stale_seconds

    def close(self) -> None:
        """Close the service (engines and state store)."""
        self.service.close()

    def run(self, stop: threading.Event, *, poll_seconds: float = 1.0, once: bool = False) -> int:
        """Build jobs until ``stop`` is set (or, with ``once``, until none is queued); how many.

        A job being built when ``stop`` is set is finished first. Expired jobs
        are deleted at the start and every 10 minutes.
        """
        done, cleaned = 0, float("-inf")
        while not stop.is_set():
            if time.monotonic() - cleaned > 600:
                self.queue.delete_expired()
                cleaned = time.monotonic()
            job = self.queue.claim(self.name, stale_seconds=self.stale)
            if job is None:
                if once:
                    break
                stop.wait(poll_seconds)
                continue
            self.process(job)
            done += 1
        return done

    def process(self, job: dict[str, Any]) -> str:
        """Build one claimed job; its final status (``lost`` if another worker took it)."""
        interval = min(30.0, self.stale / 4)
        with _Progress(self.queue, job["id"], self.name, interval) as progress:
            try:
                return self._build(job, progress)
            except Exception as exc:
                if not isinstance(exc, TablesafeError):
                    log.exception("job %s failed", job["id"])
                error = error_object(exc)
                self._audit(job, error["status"], f"{error['type']}: {error['message']}")
                failed = self.queue.fail(job["id"], self.name, error, keep_days=self.keep_days)
                return str(JobStatus.FAILED) if failed else "lost"

    def _build(self, job: dict[str, Any], progress: _Progress) -> str:
        request = job["request"]
        body = TableBody.model_validate(request["body"])
        fmt = output_format(request["format"], served=True)
        options = WriteOptions(footnotes=request["footnotes"], labels=request["labels"])
        who = Principal(job["key_id"], "user", 0)
        table = self.service.table(who, job["dataset"], body.to_request())
        progress.set("writing", 0.0)
        size = parts = 0
        buffer = bytearray()
        for piece in _pieces(table, fmt, options, progress):
            buffer += piece
            if len(buffer) >= PIECE_BYTES:
                self.queue.write_part(job["id"], job["attempt"], parts, bytes(buffer))
                size, parts, buffer = size + len(buffer), parts + 1, bytearray()
        if buffer or parts == 0:
            self.queue.write_part(job["id"], job["attempt"], parts, bytes(buffer))
            size, parts = size + len(buffer), parts + 1
        if progress.lost:
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


class Unavailable(UserError):
    """A job whose audit row could not be written (HTTP 503), as a direct table's answer."""

    status_code = 503
