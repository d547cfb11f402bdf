"""The agent interface: a Model Context Protocol server on the one path (issue 41).

An assistant asks tablesafe for protected tables through MCP, over standard
input and output (``tablesafe mcp --config SITE``) or over streamable HTTP
at ``/mcp`` of ``tablesafe serve``. Both are this module's :class:`Agent`
(its tools in :mod:`tablesafe.server._mcp_tools`, what they publish in
:mod:`tablesafe.server._mcp_answers`), built on the official SDK's low-level
server (PyPI ``mcp``, the ``mcp`` extra), and both are a door to the one
path (DESIGN decision 15): a table is :meth:`TableService.answer
<tablesafe.service._service.TableService.answer>`, the HTTP API's own call,
with the caller's key, so the sliver guard, the privacy ledger, the risk
ceiling and the cache are the API's, and the same request with the same key
publishes the same values.

What each transport adds:

* over HTTP, the gate (:mod:`tablesafe.server._gate`) identifies the key
  (``X-API-Key`` or ``Authorization: Bearer``), counts the request against
  its rate limit and refuses with 401/429 in a JSON-RPC error, before
  anything here runs; the server is stateless and answers JSON (not a
  stream), so the answer starts only once its audit row is written;
* over standard input and output, the key comes from ``--api-key`` or
  ``TABLESAFE_API_KEY``; it is checked at start (a site with keys answers
  nothing without a valid one) and, as over HTTP, identified and counted on
  every request, so a revocation or the rate limit applies at once.

Every tool call, resource read and list writes one audit row (endpoint
``mcp TOOL``, ``mcp read KIND`` or ``mcp METHOD``) with the table request's
body where there is one; the reconstruction audit reads the table rows
(:data:`tablesafe.state.MCP_TABLE_ENDPOINTS`) as tables served. Where the row
cannot be written and the site refuses unaudited answers, the answer is an
``Unavailable`` error instead.

Safe for agents: results are data, never instructions. Structured content
follows each tool's output schema; the text content is the same JSON behind
one line saying it is data, with every invisible or control character of a
label escaped (:mod:`tablesafe.server._mcp_answers`). A table of more than
``INLINE_CELLS`` (200) cells is summarised (its margins) with a link to the
full table, a resource read through the same path. Errors are MCP's: a
tool's failure is a result with ``isError`` and the one error shape
(``{"error": {"status", "type", "message"}}``, the builder's typed message,
never a traceback); a failure to identify the caller, or a bad
resource or prompt, is a JSON-RPC error with that object as its ``data``.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, NoReturn, TypeVar
from urllib.parse import quote, unquote

import anyio
import mcp_types as types
import pydantic
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from tablesafe._errors import RefusedError, RequestError, UserError
from tablesafe._settings import AuditFailure, SiteConfig
from tablesafe._version import __version__
from tablesafe.output._formats import OutputFormat, WriteOptions, format_names, output_format
from tablesafe.server._auth import AuthError, site_authenticator
from tablesafe.server._gate import Edge, error_object
from tablesafe.server._jobs import JobNotDone, job_progress, submit_job, visible_job
from tablesafe.server._mcp_answers import (
    PROMPT,
    explained,
    find_in_catalog,
    offered,
    protection_statement,
    published,
    reading_prompt,
    safe_text,
)
from tablesafe.server._mcp_tools import INSTRUCTIONS, FindArguments, NoArguments, tools
from tablesafe.service._bodies import TableBody, ValidationError, parse_body
from tablesafe.service._service import NotFound, Principal, TableService
from tablesafe.state._jobs import JobQueue, JobStatus

__all__ = ["Agent", "HttpAgents", "serve_stdio"]

log = logging.getLogger("tablesafe.server")

#: The site's protection statement, a resource.
PROTECTION_URI = "tablesafe://protection"
#: A dataset's full table: the request (base64url JSON) and the format in the path.
_TABLE_URI = re.compile(r"^tablesafe://datasets/([^/]+)/tables/([A-Za-z0-9_-]+)\.([a-z0-9-]+)$")
_CATALOG_URI = re.compile(r"^tablesafe://datasets/([^/]+)/catalog$")
_JOB_URI = re.compile(r"^tablesafe://jobs/([A-Za-z0-9]{1,64})(/result)?$")

_T = TypeVar("_T")


class PayloadTooLarge(UserError):
    """Tool arguments larger than the site's ``max_body_bytes`` (HTTP 413 over the API)."""

    status_code = 413


class Unavailable(UserError):
    """An answer withheld because its audit row could not be written (HTTP 503)."""

    status_code = 503


@dataclass
class _Call:
    """One request to the agent interface as its audit row records it.

    The work fills in the dataset and the table request's body once it has
    read them; ``status`` and ``outcome`` record a refusal that the tool
    itself reports as an answer (``explain_table``).
    """

    endpoint: str
    dataset: str | None = None
    body: dict[str, Any] | None = None
    status: int | None = None
    outcome: str | None = None


class _Failed(Exception):
    """A request that failed, its audit row written: the error object to answer with.

    ``caller`` is true when the caller could not be identified (a protocol
    error, as the gate's 401 and 429 over HTTP).
    """

    def __init__(self, error: dict[str, Any], *, caller: bool = False, extra: Any = None) -> None:
        super().__init__(error["message"])
        self.error, self.caller, self.extra = error, caller, extra


# -- the agent ---------------------------------------------------------------------------------


class Agent:
    """The tools, resources and prompt of the agent interface over one :class:`TableService`.

    Args:
        service: The table service (the one path).
        edge: The site's server settings, keys and audit log (as the gate's).
        identify: The caller of a request, from the HTTP request's state (the
            gate's) or ``None`` over standard input and output; raises
            :class:`AuthError` or ``RateLimited`` for a caller not answered.
        client: The caller's address in audit rows where no HTTP request gives one.
        wake: Tells this process's embedded job worker that a job was queued, if it has one.
    """

    def __init__(
        self,
        service: TableService,
        edge: Edge,
        identify: Callable[[dict[str, Any] | None], Principal],
        *,
        client: str = "stdio",
        wake: Callable[[], None] | None = None,
    ) -> None:
        self.service = service
        self.edge = edge
        self.identify = identify
        self.client = client
        self.wake = wake
        self.jobs = JobQueue(service.state)
        self.tools = tools()
        self._work: dict[str, Callable[[Principal, _Call, dict[str, Any]], dict[str, Any]]] = {
            "list_datasets": self._list_datasets,
            "find_variables": self._find_variables,
            "build_table": self._build_table,
            "explain_table": self._explain_table,
            "check_table": self._check_table,
            "queue_table": self._queue_table,
        }

    def server(self) -> Server[Any]:
        """The SDK's low-level server with this agent's handlers."""
        return Server(
            "tablesafe",
            version=__version__,
            title=self.edge.settings.title,
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
        )

    # -- one request: identified, done, audited ----------------------------------------------

    async def _run(
        self, ctx: ServerRequestContext[Any], call: _Call, work: Callable[..., _T]
    ) -> _T:
        """Identify the caller, do ``work(who, call)`` in a thread, write the audit row.

        Raises:
            _Failed: with the error object to answer (its row written).
        """
        state = _http_state(ctx)
        who: Principal | None = None
        try:
            who = await anyio.to_thread.run_sync(self.identify, state)
            result = await anyio.to_thread.run_sync(work, who, call)
            failure: _Failed | None = None
        except Exception as exc:
            if not isinstance(exc, UserError):
                log.exception("agent interface: %s failed", call.endpoint)
            failure = _Failed(error_object(exc), caller=who is None, extra=exc)
        key_id = who.id if who is not None else _failed_key(failure)
        if failure is None:
            status, outcome = call.status or 200, call.outcome or "ok"
        else:
            status, outcome = failure.error["status"], _outcome(failure.error)
        row = partial(self.edge.log, key_id=key_id, endpoint=call.endpoint, status=status,
                      outcome=outcome, dataset=call.dataset, request=call.body,
                      client=str((state or {}).get("client", self.client)))  # fmt: skip
        written = await anyio.to_thread.run_sync(row)
        if state is not None:
            state["audited"] = True  # the gate writes no second row for this request
        if not written and self.edge.settings.audit_failure == AuditFailure.REFUSE:
            message = "the audit log cannot be written, so nothing is answered; try again shortly"
            raise _Failed(error_object(Unavailable(message)), caller=who is None)
        if failure is not None:
            raise failure
        return result

    async def _plain(
        self, ctx: ServerRequestContext[Any], call: _Call, work: Callable[..., _T]
    ) -> _T:
        """:meth:`_run` for requests other than tool calls: a failure is a JSON-RPC error."""
        try:
            return await self._run(ctx, call, work)
        except _Failed as failed:
            raise _rpc_error(failed.error) from None

    # -- the protocol's handlers ---------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        await self._plain(ctx, _Call("mcp tools/list"), _nothing)
        return types.ListToolsResult(tools=self.tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        work = self._work.get(params.name)
        if work is None:
            unknown = f"unknown tool {params.name[:64]!r}; allowed: {', '.join(self._work)}"
            await self._plain(ctx, _Call("mcp tools/call"), partial(_raise, RequestError(unknown)))
        assert work is not None  # an unknown tool raised above
        arguments = params.arguments or {}
        try:
            result = await self._run(
                ctx, _Call(f"mcp {params.name}"), partial(_with, work, arguments)
            )
        except _Failed as failed:
            if failed.caller:
                raise _rpc_error(failed.error) from None
            return _tool_error(failed)
        return _tool_result(params.name, result)

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        await self._plain(ctx, _Call("mcp resources/list"), _nothing)
        listed = [
            types.Resource(
                uri=PROTECTION_URI,
                name="protection",
                title="How the figures are protected",
                description="The site's protection statement: each dataset's method, rules "
                "and what its figures mean.",
                mime_type="text/markdown",
            )
        ]
        for name in self.service.dataset_names():
            listed.append(
                types.Resource(
                    uri=f"tablesafe://datasets/{quote(name, safe='')}/catalog",
                    name=f"{name}-catalog",
                    title=f"Catalog of {self.service.served(name).title}",
                    description="Variables, categories and labels, groupings, hierarchies, "
                    "continuous variables, rules and protection (JSON).",
                    mime_type="application/json",
                )
            )
        return types.ListResourcesResult(resources=listed)

    async def _list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        await self._plain(ctx, _Call("mcp resources/templates/list"), _nothing)
        template = types.ResourceTemplate(
            uri_template="tablesafe://datasets/{dataset}/tables/{request}.{format}",
            name="table",
            title="A full protected table",
            description="A table request (base64url of its JSON, as build_table's links give "
            f"it) in a format: {', '.join(format_names(served=True))}.",
        )
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        kind = _resource_kind(uri)
        work = {
            "protection": lambda who, call: self._protection(uri),
            "catalog": lambda who, call: self._catalog(call, uri),
            "table": lambda who, call: self._full_table(who, call, uri),
            "job": lambda who, call: self._job(who, call, uri),
        }.get(kind or "", partial(_fail_uri, uri))
        return await self._plain(ctx, _Call(f"mcp read {kind or 'unknown'}"), work)

    async def _list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        await self._plain(ctx, _Call("mcp prompts/list"), _nothing)
        prompt = types.Prompt(
            name=PROMPT,
            title="How to read protected figures",
            description="What the noise, '<k', withheld cells, intervals and refusals of this "
            "site's tables mean, and how to report them.",
        )
        return types.ListPromptsResult(prompts=[prompt])

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        def work(who: Principal, call: _Call) -> str:
            if params.name != PROMPT:
                raise NotFound(f"unknown prompt {params.name[:64]!r}; allowed: {PROMPT}")
            return reading_prompt(protection_statement(self.service))

        text = await self._plain(ctx, _Call("mcp prompts/get"), work)
        message = types.PromptMessage(
            role="user", content=types.TextContent(type="text", text=text)
        )
        return types.GetPromptResult(
            description="How to read protected figures", messages=[message]
        )

    # -- the tools' work (in a worker thread) --------------------------------------------------

    def _list_datasets(
        self, who: Principal, call: _Call, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        _validated(NoArguments, arguments)
        out = []
        for name in self.service.dataset_names():
            about = self.service.describe(name)
            out.append(
                {
                    "name": name,
                    "title": about["title"],
                    "weighted": about["weighted"],
                    "variables": [v["name"] for v in about["variables"]],
                    "magnitudes": [m["name"] for m in about["magnitudes"]],
                    "units": about["units"],
                    "protection": about["protection"],
                    "rules": about["rules"],
                }
            )
        return {"datasets": out}

    def _find_variables(
        self, who: Principal, call: _Call, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        args = _validated(FindArguments, arguments)
        call.dataset = name = self._dataset(args.dataset)
        call.body = {"words": args.words}
        return {"dataset": name, **find_in_catalog(self.service.describe(name), args.words)}

    def _build_table(
        self, who: Principal, call: _Call, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        name, body = self._table_arguments(call, arguments)
        table = self.service.answer(who, name, body, alternatives=True)
        return published(name, body, table)

    def _explain_table(
        self, who: Principal, call: _Call, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        name, body = self._table_arguments(call, arguments)
        try:
            table = self.service.answer(who, name, body, alternatives=True)
        except RefusedError as exc:
            refusal = error_object(exc)
            # The table was refused: the row says so, as the API's would (not a table served).
            call.status, call.outcome = refusal["status"], _outcome(refusal)
            return {"dataset": name, "answered": False, "refusal": refusal, **offered(exc)}
        return {"dataset": name, "answered": True, **explained(table), **offered(table)}

    def _check_table(
        self, who: Principal, call: _Call, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        """The HTTP API's pre-flight check (``tables:check``): a dry run, nothing published."""
        name, body = self._table_arguments(call, arguments)
        return self.service.check_body(who, name, body)

    def _queue_table(
        self, who: Principal, call: _Call, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        rest = dict(arguments)
        fmt = rest.pop("format", "csv")
        if not isinstance(fmt, str):
            raise ValidationError("invalid request: format: Input should be a valid string")
        name, body = self._table_arguments(call, rest, also=("format",))
        call.body = {**body.model_dump(), "format": fmt}
        queued = submit_job(self.service, self.jobs, who, name, body, format=fmt)
        call.status = 202  # as the API's POST: queued, not yet a table served
        if self.wake is not None:
            self.wake()
        return {"dataset": name, "job": {**queued, "resources": _job_links(queued["id"])}}

    def _table_arguments(
        self, call: _Call, arguments: dict[str, Any], *, also: tuple[str, ...] = ()
    ) -> tuple[str, TableBody]:
        """The dataset and table request of a table tool's arguments (recorded for the row)."""
        self._check_size(arguments)
        rest = dict(arguments)
        dataset = rest.pop("dataset", None)
        if dataset is not None and not isinstance(dataset, str):
            raise ValidationError("invalid request: dataset: Input should be a valid string")
        call.dataset = name = self._dataset(dataset)
        body = parse_body(rest, also_allowed=("dataset", *also))
        call.body = body.model_dump()
        return name, body

    def _check_size(self, arguments: dict[str, Any]) -> None:
        limit = self.edge.settings.max_body_bytes
        if len(json.dumps(arguments, separators=(",", ":"))) > limit:
            raise PayloadTooLarge(f"tool arguments larger than {limit} bytes")

    def _dataset(self, name: str | None) -> str:
        """The dataset a tool names, or the site's only one.

        Raises:
            RequestError: for none named where the site serves several.
            NotFound: for a dataset not served.
        """
        names = self.service.dataset_names()
        if name is None:
            if len(names) == 1:
                return names[0]
            raise RequestError(f"name a dataset: one of {', '.join(names)}")
        self.service.require(name)
        return name

    # -- resources ------------------------------------------------------------------------------

    def _protection(self, uri: str) -> types.ReadResourceResult:
        text = protection_statement(self.service)
        content = types.TextResourceContents(uri=uri, mime_type="text/markdown", text=text)
        return types.ReadResourceResult(contents=[content])

    def _catalog(self, call: _Call, uri: str) -> types.ReadResourceResult:
        match = _CATALOG_URI.match(uri)
        assert match is not None  # the kind was read from this pattern
        call.dataset = name = self._dataset(unquote(match[1]))
        text = safe_text(self.service.describe(name), preface=False)
        content = types.TextResourceContents(uri=uri, mime_type="application/json", text=text)
        return types.ReadResourceResult(contents=[content])

    def _job(self, who: Principal, call: _Call, uri: str) -> types.ReadResourceResult:
        """A job's status (as ``GET /api/jobs/{id}``) or, once done, its file."""
        match = _JOB_URI.match(uri)
        assert match is not None  # the kind was read from this pattern
        job = visible_job(self.jobs, match[1], who)
        if job is None:  # another key's job is not told apart from no job
            raise NotFound(f"no job {match[1]!r} (or not yours)")
        call.dataset = job["dataset"]
        if not match[2]:
            status = {**job_progress(self.jobs, job), "resources": _job_links(job["id"])}
            text = safe_text(status, preface=False)
            content = types.TextResourceContents(uri=uri, mime_type="application/json", text=text)
            return types.ReadResourceResult(contents=[content])
        if job["status"] != JobStatus.DONE:
            raise JobNotDone(
                f"job {job['id']} is {job['status']}: its file is ready when its status is done "
                f"(read {_job_links(job['id'])['status']})"
            )
        data = b"".join(self.jobs.parts(job["id"], int(job["attempts"]), int(job["parts"])))
        return _file(uri, output_format(job["request"]["format"], served=True), data)

    def _full_table(self, who: Principal, call: _Call, uri: str) -> types.ReadResourceResult:
        """A full table as a resource: the HTTP API's file for the same request, byte for byte."""
        match = _TABLE_URI.match(uri)
        assert match is not None  # the kind was read from this pattern
        if len(uri) > 2 * self.edge.settings.max_body_bytes:
            raise PayloadTooLarge(
                f"resource address longer than {2 * self.edge.settings.max_body_bytes}"
            )
        fmt = output_format(match[3], served=True)
        call.dataset = name = self._dataset(unquote(match[1]))
        body = parse_body(_decoded(match[2]))
        call.body = {**body.model_dump(), "format": fmt.name}
        table = self.service.answer(who, name, body)
        return _file(uri, fmt, fmt.served_bytes(table, WriteOptions()))


# -- helpers -----------------------------------------------------------------------------------


def _file(uri: str, fmt: OutputFormat, data: bytes) -> types.ReadResourceResult:
    """A file as a resource: text, or base64 for a binary format (XLSX)."""
    if fmt.binary:
        blob = base64.b64encode(data).decode()
        contents: Any = types.BlobResourceContents(uri=uri, mime_type=fmt.media_type, blob=blob)
    else:
        text = data.decode()
        contents = types.TextResourceContents(uri=uri, mime_type=fmt.media_type, text=text)
    return types.ReadResourceResult(contents=[contents])


def _job_links(job_id: str) -> dict[str, str]:
    """A job's resources: its status and its file."""
    return {"status": f"tablesafe://jobs/{job_id}", "result": f"tablesafe://jobs/{job_id}/result"}


def _tool_result(name: str, result: dict[str, Any]) -> types.CallToolResult:
    content: list[Any] = [types.TextContent(type="text", text=safe_text(result))]
    for fmt, uri in (result.get("full_table") or {}).get("resources", {}).items():
        if fmt in ("csv", "json"):
            content.append(
                types.ResourceLink(
                    uri=uri, name=f"full table ({fmt})", mime_type=output_format(fmt).media_type
                )
            )
    return types.CallToolResult(content=content, structured_content=result)


def _tool_error(failed: _Failed) -> types.CallToolResult:
    """A tool's failure: MCP's error result, the one error shape (and any alternatives)."""
    structured = {"error": failed.error, **offered(failed.extra)}
    text = safe_text(structured)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=True,
    )


def _rpc_error(error: dict[str, Any]) -> MCPError:
    """A JSON-RPC error carrying the one error shape's object as its data."""
    status = int(error["status"])
    code = (
        types.INVALID_PARAMS
        if status in (400, 404, 413, 422)
        else types.INTERNAL_ERROR
        if status >= 500 and status != 503
        else types.INVALID_REQUEST
    )
    return MCPError(code, error["message"], data=error)


def _http_state(ctx: ServerRequestContext[Any]) -> dict[str, Any] | None:
    """The HTTP request's state (the gate's), or ``None`` over standard input and output."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    if not isinstance(scope, dict):
        return None
    state: dict[str, Any] = scope.setdefault("state", {})
    return state


def _resource_kind(uri: str) -> str | None:
    if uri == PROTECTION_URI:
        return "protection"
    if _CATALOG_URI.match(uri):
        return "catalog"
    if _TABLE_URI.match(uri):
        return "table"
    if _JOB_URI.match(uri):
        return "job"
    return None


def _decoded(token: str) -> object:
    """A table request from its resource address (base64url JSON, no padding)."""
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        return json.loads(text)
    except (binascii.Error, UnicodeDecodeError, ValueError, RecursionError):
        raise ValidationError(
            "invalid request: the table's address does not hold a table request (base64url "
            "JSON, as build_table's links give it)"
        ) from None


def _validated(model: type[BaseModel], arguments: dict[str, Any]) -> Any:
    try:
        return model.model_validate(arguments)
    except pydantic.ValidationError as exc:
        parts = [
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
            for e in exc.errors()[:5]
        ]
        raise ValidationError("invalid arguments: " + "; ".join(parts)) from None


def _outcome(error: Mapping[str, Any]) -> str:
    return f"{error['type']}: {error['message']}"


def _failed_key(failure: _Failed | None) -> str:
    key = getattr(failure.extra, "key_id", None) if failure is not None else None
    return str(key or "unknown")


def _nothing(who: Principal, call: _Call) -> None:
    return None


def _with(
    work: Callable[[Principal, _Call, dict[str, Any]], dict[str, Any]],
    arguments: dict[str, Any],
    who: Principal,
    call: _Call,
) -> dict[str, Any]:
    return work(who, call, arguments)


def _raise(error: Exception, who: Principal, call: _Call) -> NoReturn:
    raise error


def _fail_uri(uri: str, who: Principal, call: _Call) -> NoReturn:
    raise NotFound(
        f"unknown resource {uri[:200]!r}; allowed: {PROTECTION_URI}, "
        "tablesafe://datasets/NAME/catalog, and the table and job links the tools give"
    )


# -- the two transports ----------------------------------------------------------------------------


class HttpAgents:
    """The agent interface at ``/mcp`` of ``tablesafe serve`` (streamable HTTP).

    Stateless (no session is kept: any replica answers any request) and in
    JSON, so an answer starts after its tool is done and its row written.

    Args:
        service: The application's table service.
        edge: The application's edge (the gate's settings, keys and audit log).
        wake: Tells the application's embedded job worker that a job was queued.
    """

    def __init__(
        self, service: TableService, edge: Edge, *, wake: Callable[[], None] | None = None
    ) -> None:
        agent = Agent(service, edge, _gate_principal, client="unknown", wake=wake)
        self.manager = StreamableHTTPSessionManager(
            app=agent.server(), json_response=True, stateless=True
        )
        self.app = StreamableHTTPASGIApp(self.manager)

    def run(self) -> Any:
        """The session manager's lifetime (an async context manager for the app's lifespan)."""
        return self.manager.run()


def _gate_principal(state: dict[str, Any] | None) -> Principal:
    """The caller the gate identified and counted for this HTTP request."""
    who = (state or {}).get("who")
    if not isinstance(who, Principal):
        raise AuthError("an API key is required: send it in the X-API-Key header")
    return who


def serve_stdio(site: SiteConfig, *, api_key: str | None) -> None:
    """Serve the agent interface over standard input and output until the client closes it.

    Args:
        site: The site configuration.
        api_key: The caller's API key (needed where the site configures keys).

    Raises:
        AuthError: for a missing, unknown, expired or revoked key: nothing is answered.
    """
    service = TableService(site)
    try:
        auth = site_authenticator(site, service.state)
        edge = Edge(site.server, auth, service.state)
        if not api_key and not auth.open:  # a site with keys answers nothing without one
            raise AuthError(
                "an API key is required: give it with --api-key or the TABLESAFE_API_KEY "
                "environment variable"
            )
        auth.identify(api_key, "stdio")

        def identify(state: dict[str, Any] | None) -> Principal:
            who = auth.identify(api_key, "stdio")
            auth.throttle(who)
            return who

        server = Agent(service, edge, identify).server()

        async def run() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(run)
    finally:
        service.close()
