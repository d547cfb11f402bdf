"""The HTTP API and web page (FastAPI).

Endpoints::

    GET  /api/health                      liveness and the number of datasets
    GET  /api/datasets                    datasets served
    GET  /api/datasets/{name}             variables, categories, labels, rules, protection
    POST /api/datasets/{name}/tables      a protected table (?format=json|csv|xlsx|jsonstat|...)
    POST /api/datasets/{name}/tables:check   the pre-flight check: would it pass, which cells
                                          would be withheld, its cost, its alternatives
    POST /api/datasets/{name}/jobs        a large table as a job; GET /api/jobs/{id} and
                                          /api/jobs/{id}/result (:mod:`tablesafe.server._jobs`)
    GET  /api/admin/audit                 the audit log (admin keys only)
    GET  /api/admin/datasets/{name}/reconstruction   reconstruction audits over time (admin)
    POST /api/admin/datasets/{name}/reconstruction   run the reconstruction audit now (admin)
    GET  /api/admin/datasets/{name}/ledger           the privacy ledger: epsilon spent (admin)
    GET  /                                the web page (and /favicon.ico, its icon)
    GET  /openapi.json                    the OpenAPI schema
    GET  /healthz, /readyz, /metrics      liveness, readiness, Prometheus metrics (no key, not
                                          audited: :mod:`tablesafe.server._observe`)
    POST /mcp                             the agent interface (Model Context Protocol over
                                          streamable HTTP, :mod:`tablesafe.server._mcp`)
    GET  /docs, /redoc                    its interactive pages ([server] api_docs only)

Every error, ours or the framework's, is answered in one JSON shape::

    {"error": {"status": 400, "type": "RequestError", "message": "..."}}

with, for a refused table, its nearest passing alternatives beside it
(``"alternatives": [...]``, docs/errors.md), mapped in one place
(:func:`_error_response`). Messages name what was wrong and what is allowed;
none contains a stack trace or an unprotected value. The gate
(:mod:`tablesafe.server._gate`) wraps the whole application: it checks keys,
reads bodies and writes the audit row of every request; the
HTTP protocol below (:mod:`tablesafe.server._protocol`) answers what never
reaches the application in the same shape.
"""

from __future__ import annotations

import html
import importlib.util
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from importlib import resources
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import ASGIApp

from tablesafe._errors import TablesafeError
from tablesafe._settings import SiteConfig
from tablesafe._version import __version__
from tablesafe.output._formats import WriteOptions, format_names, output_format
from tablesafe.server._auth import Authenticator, AuthError, site_authenticator
from tablesafe.server._gate import Edge, Gate, error_object, error_shape, offered_alternatives
from tablesafe.server._jobs import ServerWorker, add_job_routes, embedded_worker
from tablesafe.server._observe import Observed, Operations
from tablesafe.service._bodies import TableBody, invalid_body
from tablesafe.service._ledger import ledger_report
from tablesafe.service._service import NotFound, Principal, TableService
from tablesafe.state import StateStore

__all__ = ["create_app"]

log = logging.getLogger("tablesafe.server")


def create_app(site: SiteConfig, *, service: TableService | None = None) -> FastAPI:
    """Build the application for a site configuration.

    Args:
        site: The validated site configuration.
        service: A ready :class:`TableService` (built from ``site`` by default).
    """
    service = service or TableService(site)
    audit = service.state
    auth = site_authenticator(site, audit)
    app = _application(site, service, auth, audit)
    _add_error_handlers(app)
    _add_dataset_routes(app, service)
    _add_check_route(app, service)
    _add_admin_routes(app, site, service, auth, audit)
    _add_ledger_route(app, site, service, auth, audit)
    add_job_routes(app, service, auth, principal=_principal, served=_served)
    _add_agents(app, service, app.edge)
    _add_pages(app, site)
    return app


def _application(
    site: SiteConfig, service: TableService, auth: Authenticator, audit: StateStore
) -> _Application:
    """The bare application: its lifespan, metadata, gate and service.

    The lifespan starts the embedded worker (``[server] embedded_worker``) and,
    at the end, stops it, then closes the service.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker = ServerWorker(site, service.state) if embedded_worker(site) else None
        app.state.embedded_worker = worker
        agents = getattr(app.state, "agents", None)
        if worker is not None:
            worker.start()
        try:
            async with AsyncExitStack() as running:
                if agents is not None:  # the agent interface's sessions live as long as the app
                    await running.enter_async_context(agents.run())
                yield
        finally:
            if worker is not None:
                # Off the event loop: the job being built gets the shutdown's timeout.
                await anyio.to_thread.run_sync(worker.stop, site.server.shutdown_timeout_seconds)
            service.close()

    app = _Application(
        lifespan=lifespan,
        title=site.server.title,
        version=_version(),
        description="Protected tables from confidential microdata (tablesafe).",
        # A path with a trailing slash is an unknown path (404 in the one error
        # shape), not a redirect the client may or may not follow.
        redirect_slashes=False,
        docs_url="/docs" if site.server.api_docs else None,
        redoc_url="/redoc" if site.server.api_docs else None,
    )
    app.edge = Edge(site.server, auth, audit)
    app.ops = Operations(service, app.edge)
    app.state.service = service
    return app


def _error_response(
    request: Request, status: int, kind: str, message: str, extra: dict[str, Any] | None = None
) -> JSONResponse:
    """An error in the one JSON shape (a refusal's ``alternatives`` beside its ``error``)."""
    # The gate writes the audit row when this answer starts; it reads the outcome here.
    request.state.outcome = f"{kind}: {message}"
    return JSONResponse({**error_shape(status, kind, message), **(extra or {})}, status_code=status)


def _add_error_handlers(app: FastAPI) -> None:
    """Map every error, ours or the framework's, to the one JSON shape."""

    @app.exception_handler(TablesafeError)
    async def _tablesafe_error(request: Request, exc: TablesafeError) -> JSONResponse:
        error = error_object(exc)
        if error["status"] >= 500:
            log.error("%s while serving %s", type(exc).__name__, request.url.path)
        return _error_response(
            request, error["status"], error["type"], error["message"], offered_alternatives(exc)
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error_response(request, 422, "ValidationError", invalid_body(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "NotFound", 405: "MethodNotAllowed", 413: "PayloadTooLarge"}.get(
            exc.status_code, "HTTPError"
        )
        message = str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            path = request.url.path
            message = f"no such path {path}"
            if path.endswith("/") and path != "/":
                message += f" (paths end without a slash: {path.rstrip('/')})"
        return _error_response(request, exc.status_code, kind, message)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error while serving %s", request.url.path)
        return _error_response(request, 500, "InternalError", "internal error")


def _principal(request: Request) -> Principal:
    """The caller, as the gate identified it (and counted the request) before any route."""
    who = getattr(request.state, "who", None)
    if not isinstance(who, Principal):
        raise AuthError("an API key is required: send it in the X-API-Key header")
    return who


def _served(service: TableService, request: Request, name: str) -> str:
    """A dataset the service serves (recorded for the audit row).

    Raises:
        NotFound: for a dataset not served.
    """
    request.state.dataset = name
    service.require(name)
    return name


def _add_dataset_routes(app: FastAPI, service: TableService) -> None:
    """The public API: health, the datasets and their descriptions, tables."""

    @app.get("/api/health", tags=["service"])
    def health() -> dict[str, Any]:
        """Liveness: the service answers and how many datasets it serves."""
        return {"status": "ok", "datasets": len(service.dataset_names())}

    @app.get("/api/datasets", tags=["datasets"])
    def datasets(request: Request, who: Principal = Depends(_principal)) -> dict[str, Any]:
        """The datasets served."""
        out = {
            "datasets": [
                {"name": n, "title": service.served(n).title} for n in service.dataset_names()
            ]
        }
        return out

    @app.get("/api/datasets/{name}", tags=["datasets"])
    def dataset(
        request: Request, name: str, who: Principal = Depends(_principal)
    ) -> dict[str, Any]:
        """A dataset's variables and categories with labels, its rules and protection."""
        _served(service, request, name)
        out = service.describe(name)
        return out

    @app.post("/api/datasets/{name}/tables", tags=["tables"])
    def table(
        request: Request,
        name: str,
        body: TableBody,
        who: Principal = Depends(_principal),
        format: Annotated[
            str, Query(description="An output format: " + ", ".join(format_names(served=True)))
        ] = "json",
        footnotes: Annotated[bool, Query()] = True,
        labels: Annotated[bool, Query()] = False,
    ) -> Response:
        """A protected table in an output format of the registry: JSON (default), CSV, XLSX...

        The CSV ends with the universe and the table's footnotes (lines
        starting with ``#``) unless ``footnotes=false``; JSON carries them in
        ``meta``, JSON-stat in ``note``, the XLSX in its ``about`` sheet.
        ``labels=true`` adds the category labels beside the codes (CSV, the XLSX's
        ``cells`` sheet, SDMX-CSV).
        The file is named after the table (``AGEGRP-by-SEX-North.csv``).
        """
        request.state.body = {**body.model_dump(), "format": format}
        fmt = output_format(format, served=True)
        _served(service, request, name)
        result = service.answer(who, name, body)
        if fmt.stream is not None:
            # Streamed in pieces: a 100k-cell table starts arriving at once.
            return StreamingResponse(fmt.stream(result), media_type=fmt.media_type)
        filename = f"{result.file_stem()}.{fmt.extension}"
        return Response(
            fmt.write(result, WriteOptions(footnotes=footnotes, labels=labels)),
            media_type=fmt.media_type,
            headers={"content-disposition": f'attachment; filename="{filename}"'},
        )


def _add_check_route(app: FastAPI, service: TableService) -> None:
    """The pre-flight check: a dry run of the table's admission (nothing published or spent)."""

    @app.post("/api/datasets/{name}/tables:check", tags=["tables"])
    def check(
        request: Request, name: str, body: TableBody, who: Principal = Depends(_principal)
    ) -> dict[str, Any]:
        """Would this table pass now: its refusal, cells withheld, cost, cells, alternatives.

        A dry run of the same rules in the same order (docs/http-api.md,
        "The pre-flight check"): no table is published, no budget spent. A
        table refused or partly withheld comes with its nearest passing
        alternatives. Rate-limited and audited as every request.
        """
        request.state.body = body.model_dump()
        _served(service, request, name)
        return service.check_body(who, name, body)


def _add_admin_routes(
    app: FastAPI, site: SiteConfig, service: TableService, auth: Authenticator, audit: StateStore
) -> None:
    """The admin API: the audit log and the reconstruction audits (admin keys only)."""

    @app.get("/api/admin/audit", tags=["admin"])
    def audit_log(
        request: Request,
        who: Principal = Depends(_principal),
        key_id: str | None = None,
        dataset: str | None = None,
        since: str | None = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    ) -> dict[str, Any]:
        """The audit log, newest first (admin keys only)."""
        auth.require_admin(who)
        rows = audit.query(key_id=key_id, dataset=dataset, since=since, limit=limit)
        return {"requests": rows}

    @app.get("/api/admin/datasets/{name}/reconstruction", tags=["admin"])
    def reconstruction_history(
        request: Request, name: str, who: Principal = Depends(_principal)
    ) -> dict[str, Any]:
        """The reconstruction audits of a dataset, oldest first (admin keys only)."""
        auth.require_admin(who)
        _served(service, request, name)
        out = {"dataset": name, "history": audit.reconstructions(name)}
        return out

    @app.post("/api/admin/datasets/{name}/reconstruction", tags=["admin"])
    def reconstruction_run(
        request: Request,
        name: str,
        who: Principal = Depends(_principal),
        time_limit: Annotated[float, Query(gt=0, le=600)] = 30.0,
    ) -> dict[str, Any]:
        """Attack every table served for the dataset now; stored and returned (admin keys only)."""
        # Start-up: the reconstruction's solver loads only when an audit runs.
        from tablesafe.attacks._reconstruct._cumulative import audit_reconstruction

        auth.require_admin(who)
        _served(service, request, name)
        out = audit_reconstruction(
            site,
            audit,
            name,
            time_limit=time_limit,
            protection=service.served(name).builder.protection,
        )
        return out


def _add_ledger_route(
    app: FastAPI, site: SiteConfig, service: TableService, auth: Authenticator, audit: StateStore
) -> None:
    """The privacy ledger of a dataset (admin keys only): what ``audit ledger`` prints."""

    @app.get("/api/admin/datasets/{name}/ledger", tags=["admin"])
    def ledger(request: Request, name: str, who: Principal = Depends(_principal)) -> dict[str, Any]:
        """The privacy loss of everything served from the dataset, all keys and per key."""
        auth.require_admin(who)
        _served(service, request, name)
        served = service.served(name)
        return ledger_report(site, audit, name, data=served.dataset, engine=served.builder.engine)


def _add_agents(app: FastAPI, service: TableService, edge: Edge) -> None:
    """The agent interface at ``/mcp``, where the MCP SDK is installed (the ``mcp`` extra).

    Without it, ``/mcp`` says what to install (404, as ``/metrics`` without
    prometheus-client).
    """
    if importlib.util.find_spec("mcp") is None:

        @app.api_route("/mcp", methods=["GET", "POST", "DELETE"], include_in_schema=False)
        def no_agents() -> None:
            raise NotFound("the agent interface needs the MCP SDK: pip install 'tablesafe[mcp]'")

        return
    # Optional dependency: the MCP SDK, imported only where it is installed.
    from tablesafe.server._mcp import HttpAgents

    def wake() -> None:  # the embedded worker starts with the app's lifespan, if it runs one
        worker = getattr(app.state, "embedded_worker", None)
        if worker is not None:
            worker.wake()

    app.state.agents = agents = HttpAgents(service, edge, wake=wake)
    # An ASGI application as the endpoint: every method reaches the SDK's transport.
    app.router.routes.append(Route("/mcp", agents.app))


def _add_pages(app: FastAPI, site: SiteConfig) -> None:
    """The web page, its static files and its icon.

    The page carries the site's title and whether the site asks for API keys
    (then the page shows a key field), so both are there before any API call.
    """
    page = (
        _static("index.html")
        .replace("__SITE_TITLE__", html.escape(site.server.title))
        .replace("__API_KEYS__", "required" if site.keys else "none")
    )

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index() -> HTMLResponse:
        return HTMLResponse(page)

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        icon = resources.files("tablesafe.server").joinpath("static", "favicon.ico").read_bytes()
        return Response(icon, media_type="image/x-icon")

    @app.get("/static/{file}", include_in_schema=False)
    def static(file: str) -> Response:
        types = {
            "app.js": "text/javascript",
            "style.css": "text/css",
            "admin.js": "text/javascript",
        }
        if file not in types:
            raise NotFound(f"no static file {file!r}")
        return Response(_static(file), media_type=types[file])


class _Application(FastAPI):
    """FastAPI with the gate around its whole middleware stack (error handlers included).

    Outside the gate, the operations layer: health, readiness, metrics, access logs.
    """

    edge: Edge
    ops: Operations

    def build_middleware_stack(self) -> ASGIApp:
        self.ops.routes = list(self.routes)
        return Observed(Gate(super().build_middleware_stack(), self.edge), self.ops)


def _static(name: str) -> str:
    return resources.files("tablesafe.server").joinpath("static", name).read_text()


def _version() -> str:
    return __version__
