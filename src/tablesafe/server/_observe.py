"""Operations: Prometheus metrics, health and readiness, JSON access logs.

:class:`Observed` is the outermost ASGI layer of the application, around the
gate (:mod:`tablesafe.server._gate`). It answers three paths itself, before
the gate, without a key and without an audit row (they say nothing about
data, and probes would fill the audit log):

* ``GET /healthz``: the process is up and its event loop answers (200);
* ``GET /readyz``: the state store answers a query and every dataset's
  microdata file is readable (200), else 503 in the one error shape;
* ``GET /metrics``: this process's metrics in Prometheus' text format. With
  several replicas (or worker processes) each serves its own counters: scrape
  every one and add them up in the queries.

Every other request passes through to the gate; when its answer ends, the
layer counts it (route template, method, status, latency; the error type of
an error) and writes one access-log line: a JSON object on the logger
``tablesafe.access`` holding the time, method, path (never the query
string), route, status, duration, bytes sent, the client's address, the key
*id*, the dataset's name and the error *type*. It never holds a query
string, a body, an error message, an API key or a secret (decision 8).

Metrics need ``prometheus-client`` (the ``server`` extra); without it
``/metrics`` answers 404 saying so, and everything else works.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tablesafe.engines import CubeCache
from tablesafe.server._gate import CSP, SECURITY_HEADERS, Edge, error_shape
from tablesafe.server._jobs import WORKER_LIVE_SECONDS
from tablesafe.state._jobs import JobQueue

if TYPE_CHECKING:
    from tablesafe.service._service import TableService

__all__ = ["OPS_PATHS", "Observed", "Operations", "access_log"]

log = logging.getLogger("tablesafe.server")
#: One JSON line per request (``[server] access_log``).
access_log = logging.getLogger("tablesafe.access")

#: The paths this layer answers itself.
OPS_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
#: Methods counted by name; any other is counted as ``other`` (a bounded label).
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
#: Latency buckets, in seconds: from a cached table's milliseconds to a large table's seconds.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


class Operations:
    """What the layer needs: the service, the edge (its audit failures), the settings.

    Args:
        service: The table service (datasets, state store, tallies).
        edge: The gate's edge.
    """

    def __init__(self, service: TableService, edge: Edge) -> None:
        self.service = service
        self.edge = edge
        self.logging = edge.settings.access_log
        self.metrics = _metrics(service, edge)
        #: The application's routes (set by the application), to name a refused request's.
        self.routes: list[BaseRoute] = []

    def observe(self, scope: Scope, status: int, sent: int, seconds: float) -> None:
        """Count one request and write its access-log line."""
        state = scope.get("state") or {}
        template = self._template(scope)
        method = str(scope.get("method", "-"))
        method = method if method in _METHODS else "other"
        outcome = str(state.get("outcome", ""))
        error = outcome.split(":", 1)[0] if status >= 400 and outcome else None
        if status >= 400 and not error:
            error = f"HTTP {status}"
        if self.metrics is not None:
            self.metrics.observe(template, method, status, seconds, error)
        if self.logging and access_log.isEnabledFor(logging.INFO):
            access_log.info(
                json.dumps(
                    {
                        "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
                        "method": method,
                        "path": str(scope.get("path", ""))[:200],
                        "route": template,
                        "status": status,
                        "ms": round(seconds * 1000, 1),
                        "bytes": sent,
                        "client": str(state.get("client", "unknown")),
                        "key_id": str(state.get("key_id", "-")),
                        "dataset": state.get("dataset"),
                        "error": error,
                    },
                    separators=(",", ":"),
                )
            )

    def _template(self, scope: Scope) -> str:
        """The route's path template: a bounded label (``unmatched`` for unknown paths)."""
        route = scope.get("route")
        if route is None:  # refused by the gate before routing: match it here
            route = next(
                (r for r in self.routes if r.matches(scope)[0] == Match.FULL),
                None,
            )
        return str(getattr(route, "path", "unmatched"))

    def ready(self) -> list[str]:
        """What is not ready: the state store, a dataset's file (empty when ready)."""
        problems = []
        try:
            self.service.state.ping()
        except Exception:  # any failure of the store means not ready; logged, not shown
            log.exception("readiness: the state store does not answer")
            problems.append("the state store does not answer")
        for name in self.service.dataset_names():
            path = self.service.served(name).dataset.path
            if not os.access(path, os.R_OK):
                problems.append(f"dataset {name}: its microdata file cannot be read")
        return problems

    async def answer(self, scope: Scope, send: Send) -> None:
        """Answer one of :data:`OPS_PATHS`."""
        path = scope["path"]
        if scope.get("method") not in ("GET", "HEAD"):
            body = _error(405, "MethodNotAllowed", f"{path} answers GET only")
            await _send(send, 405, "application/json", body, scope)
            return
        if path == "/healthz":
            await _send(send, 200, "application/json", b'{"status":"ok"}', scope)
        elif path == "/readyz":
            problems = await anyio.to_thread.run_sync(self.ready)
            if problems:
                body = _error(503, "Unavailable", "not ready: " + "; ".join(problems))
                await _send(send, 503, "application/json", body, scope)
            else:
                await _send(send, 200, "application/json", b'{"status":"ready"}', scope)
        elif self.metrics is None:
            body = _error(
                404,
                "NotFound",
                "metrics need prometheus-client: pip install 'tablesafe[server]'",
            )
            await _send(send, 404, "application/json", body, scope)
        else:
            text = await anyio.to_thread.run_sync(self.metrics.exposition)
            await _send(send, 200, _PROMETHEUS_TEXT, text, scope)


class Observed:
    """The outermost ASGI layer (see the module's docstring).

    Args:
        app: The gate and the application inside it.
        ops: The operations it serves and records.
    """

    def __init__(self, app: ASGIApp, ops: Operations) -> None:
        self.app = app
        self.ops = ops

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] in OPS_PATHS:
            await self.ops.answer(scope, send)
            return
        start = time.perf_counter()
        seen = {"status": 0, "bytes": 0}

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = int(message["status"])
            elif message["type"] == "http.response.body":
                seen["bytes"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            status = seen["status"] or int((scope.get("state") or {}).get("refused", 499))
            self.ops.observe(scope, status, seen["bytes"], time.perf_counter() - start)


def _error(status: int, kind: str, message: str) -> bytes:
    return json.dumps(error_shape(status, kind, message)).encode()


async def _send(send: Send, status: int, media: str, body: bytes, scope: Scope) -> None:
    headers = [
        (b"content-type", media.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        (b"content-security-policy", CSP.encode()),
        *SECURITY_HEADERS,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})


class _Metrics:
    """This process's metrics, in a registry of its own (one per application)."""

    def __init__(self, service: TableService, edge: Edge) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        labels = ["route", "method", "status"]
        self.requests = Counter(
            "tablesafe_requests",
            "HTTP requests answered, by route template, method and status.",
            labels,
            registry=self.registry,
        )
        self.latency = Histogram(
            "tablesafe_request_duration_seconds",
            "Time from a request's arrival at the application to the end of its answer.",
            labels,
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.refusals = Counter(
            "tablesafe_refusals",
            "Requests answered with an error, by the error's type (the type of the one "
            "JSON shape: TooManyCells, RefusedError, BudgetExhausted, RateLimited, ...).",
            ["type"],
            registry=self.registry,
        )
        self.registry.register(_Collector(service, edge))

    def observe(
        self, route: str, method: str, status: int, seconds: float, error: str | None
    ) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method, str(status)).observe(seconds)
        if error is not None:
            self.refusals.labels(error).inc()

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


def _metrics(service: TableService, edge: Edge) -> _Metrics | None:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return None
    return _Metrics(service, edge)


class _Collector:
    """Figures read when scraped: tables, the cube caches, the job queue, audit failures."""

    def __init__(self, service: TableService, edge: Edge) -> None:
        self.service = service
        self.edge = edge

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        built, cached = self.service.tally.counts()
        families = {
            "built": CounterMetricFamily(
                "tablesafe_tables_built",
                "Tables built (every rule passed) by this process, per dataset.",
                labels=["dataset"],
            ),
            "cached": CounterMetricFamily(
                "tablesafe_table_cache_hits",
                "Tables answered from this process's table cache, per dataset.",
                labels=["dataset"],
            ),
            "hits": CounterMetricFamily(
                "tablesafe_cube_cache_hits",
                "Tabulations answered from a cached cube, per dataset.",
                labels=["dataset"],
            ),
            "misses": CounterMetricFamily(
                "tablesafe_cube_cache_misses",
                "Tabulations that read the microdata (a cube built, or a direct query).",
                labels=["dataset"],
            ),
        }
        for name in self.service.dataset_names():
            families["built"].add_metric([name], built.get(name, 0))
            families["cached"].add_metric([name], cached.get(name, 0))
            engine = self.service.served(name).builder.engine
            if isinstance(engine, CubeCache):
                families["hits"].add_metric([name], engine.hits)
                families["misses"].add_metric([name], engine.misses)
        yield from families.values()
        failures = CounterMetricFamily(
            "tablesafe_audit_failures",
            "Audit rows this process could not write ([server] audit_failure says what "
            "was answered).",
        )
        failures.add_metric([], self.edge.audit_failures)
        yield failures
        yield from self._jobs(GaugeMetricFamily)

    def _jobs(self, gauge: Any) -> Iterator[Any]:
        try:
            queue = JobQueue(self.service.state)
            by_status = queue.counts()
            workers = queue.live_workers(WORKER_LIVE_SECONDS)
        except Exception:  # the store is down: /readyz says so; the other figures still count
            log.exception("metrics: the job queue cannot be read")
            return
        family = gauge(
            "tablesafe_jobs",
            "Jobs in the state store by status (queued: the queue's depth), all replicas.",
            labels=["status"],
        )
        for status, n in sorted(by_status.items()):
            family.add_metric([status], n)
        yield family
        running = gauge(
            "tablesafe_job_workers",
            "Workers of the site whose heartbeat is recent (embedded ones included), all replicas.",
        )
        running.add_metric([], workers)
        yield running
