"""The server's edge inside the application: one ASGI layer around everything.

Every HTTP request passes through :class:`Gate` before any route, framework
middleware or exception handler, and its answer passes back through it. The
gate

* finds the caller's address (``X-Forwarded-For`` only from the site's
  ``trusted_proxies``) and, on ``/api`` paths other than ``/api/health`` and on
  the agent interface's ``/mcp``, the caller's API key: a request whose body
  fails to parse is logged under the key that sent it, and failed
  authentications are rate-limited per address; ``/mcp`` refuses a request
  from a web page (an ``Origin`` header), as MCP asks against DNS rebinding;
* reads the whole body first, refusing one larger than ``max_body_bytes``
  (413), slower than ``body_timeout_seconds`` (408), or declared JSON that
  does not parse (422), so that the routes see only complete, well-formed
  bodies;
* writes exactly one audit row per request, whoever answered it (a route,
  an error handler, the framework, or the gate itself), when the answer
  starts, unless the agent interface wrote the request's row itself (a tool
  call, :mod:`tablesafe.server._mcp`); and adds the security headers to every
  answer. Its refusals on ``/mcp`` are JSON-RPC errors (the one error shape
  as their ``data``), which MCP clients read. When the row cannot
  be written, ``[server] audit_failure = "refuse"`` (the default) withholds
  the answer and sends 503 ``Unavailable`` instead: every answer given is in
  the audit log (docs/decisions.md).

Refusals before the request is parsed (malformed request line, oversized
headers, slow headers, too many connections) happen in the HTTP protocol
(:mod:`tablesafe.server._protocol`) and are logged through :meth:`Edge.log`.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tablesafe._errors import TablesafeError, UserError
from tablesafe._settings import AuditFailure, ServerSettings
from tablesafe.server._auth import Authenticator, AuthError, RateLimited
from tablesafe.state import StateStore

__all__ = [
    "CSP",
    "MCP_PATH",
    "SECURITY_HEADERS",
    "Edge",
    "Gate",
    "error_object",
    "error_shape",
    "not_json",
    "offered_alternatives",
    "rpc_error_shape",
]

log = logging.getLogger("tablesafe.server")

# Paths open without a key (the API's other paths all need one when keys are configured).
PUBLIC_API = frozenset({"/api/health"})
#: The agent interface over HTTP (streamable HTTP, :mod:`tablesafe.server._mcp`): keyed too.
MCP_PATH = "/mcp"

# The web page's own script, style and API calls; data: and blob: for the chart's
# PNG export and the downloads; no frame may hold any page of the site.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
# FastAPI's /docs and /redoc (only with [server] api_docs): their CDN and inline starter.
DOCS_CSP = (
    "default-src 'none'; script-src 'self' https://cdn.jsdelivr.net 'unsafe-inline'; "
    "style-src 'self' https://cdn.jsdelivr.net https://fonts.googleapis.com 'unsafe-inline'; "
    "font-src https://fonts.gstatic.com; img-src 'self' data: https://fastapi.tiangolo.com "
    "https://cdn.redoc.ly; worker-src blob:; connect-src 'self'; base-uri 'none'; "
    "frame-ancestors 'none'"
)
DOCS_PATHS = frozenset({"/docs", "/redoc", "/docs/oauth2-redirect"})


def error_shape(status: int, kind: str, message: str) -> dict[str, Any]:
    """The one error shape of every answer that is not a success."""
    return {"error": {"status": status, "type": kind, "message": message}}


def rpc_error_shape(status: int, kind: str, message: str) -> dict[str, Any]:
    """A refusal on ``/mcp``: a JSON-RPC error whose ``data`` is the one error shape's object.

    The code is JSON-RPC's parse error for a body that is not JSON, its
    invalid request otherwise; the HTTP status stays the API's (401, 413, 429...).
    """
    code = -32700 if kind == "ValidationError" and "not valid JSON" in message else -32600
    data = error_shape(status, kind, message)["error"]
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message, "data": data}}


def error_object(exc: BaseException) -> dict[str, Any]:
    """The inner object of the one error shape for ``exc``, as every door answers it.

    A user error keeps its type, status and message; any other error is a
    500 ``internal error`` (its details go to the server's log, never to the caller).
    """
    if isinstance(exc, TablesafeError):
        user = isinstance(exc, UserError)
        status = exc.status_code if user else (422 if exc.status_code == 422 else 500)
        message = str(exc) if status < 500 or user else "internal error"
        return {"status": status, "type": type(exc).__name__, "message": message}
    return {"status": 500, "type": "InternalError", "message": "internal error"}


def offered_alternatives(exc: BaseException) -> dict[str, Any]:
    """A refusal's nearest passing alternatives, as every door adds them beside its error.

    Empty for an error without alternatives: the one error shape is unchanged
    (docs/errors.md).
    """
    found = getattr(exc, "alternatives", ())
    if not found:
        return {}
    return {"alternatives": [a if isinstance(a, dict) else a.to_dict() for a in found]}


def not_json(exc: Exception) -> str:
    """What is wrong with a body that does not parse as JSON, for the error message."""
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON (at character {exc.pos})"
    if isinstance(exc, UnicodeDecodeError):
        return "not valid JSON (not UTF-8, UTF-16 or UTF-32 text)"
    if isinstance(exc, RecursionError):
        return "not valid JSON (nested too deeply)"
    return "not valid JSON"


@dataclass
class Edge:
    """What the gate and the HTTP protocol share: settings, keys, the audit log.

    Args:
        settings: The site's ``[server]`` settings.
        auth: The API keys and rate limits.
        audit: The audit log every request is written to.
    """

    settings: ServerSettings
    auth: Authenticator
    audit: StateStore
    proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = field(init=False)
    #: Audit rows that could not be written (the metrics read it).
    audit_failures: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._failures_lock = threading.Lock()
        self.proxies = tuple(
            ipaddress.ip_network(p, strict=False) for p in self.settings.trusted_proxies
        )

    def client_of(self, scope: Scope) -> str:
        """The caller's address: the peer's, or the one a trusted proxy forwarded."""
        peer = scope.get("client")
        address = str(peer[0]) if peer else "unknown"
        if not self.proxies or not self._trusted(address):
            return address
        # X-Forwarded-For lists the hops oldest first; each trusted proxy appends the
        # address it received from, so the nearest untrusted hop is the caller.
        hops: list[str] = []
        for name, value in scope.get("headers") or ():
            if name == b"x-forwarded-for":
                hops += [h.strip() for h in value.decode("latin-1").split(",") if h.strip()]
        for hop in reversed(hops):
            if not self._trusted(hop):
                return hop if _is_address(hop) else address
            address = hop
        return address

    def _trusted(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in net for net in self.proxies)

    def log(
        self,
        *,
        key_id: str,
        endpoint: str,
        status: int,
        outcome: str,
        client: str,
        dataset: str | None = None,
        request: Any = None,
    ) -> bool:
        """Write one audit row; a failing write is logged and counted, never raised.

        Returns:
            Whether the row was written.
        """
        try:
            self.audit.record(
                key_id=key_id,
                endpoint=endpoint,
                status=status,
                outcome=outcome,
                client=client,
                dataset=dataset,
                request=request,
            )
        except Exception:  # the audit must never turn an answer into a crash
            log.exception("audit log write failed")
            with self._failures_lock:
                self.audit_failures += 1
            return False
        return True


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class _Refused(Exception):
    def __init__(self, status: int, kind: str, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.close = status, kind, message, close


class Gate:
    """The ASGI layer around the whole application (see the module's docstring).

    Args:
        app: The application with its framework middleware.
        edge: The shared settings, keys and audit log.
    """

    def __init__(self, app: ASGIApp, edge: Edge) -> None:
        self.app = app
        self.edge = edge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = scope.setdefault("state", {})
        client = self.edge.client_of(scope)
        state["client"] = client
        state.setdefault("key_id", "-")
        answer = _Answer(self.edge, scope, send)
        try:
            # In a worker thread, as the row below: both wait for the audit database, whose
            # lock a table's sliver-guard writes may hold; the event loop must not.
            await anyio.to_thread.run_sync(self._identify, scope, state, client)
            body = await self._body(scope, receive)
        except _Refused as refused:
            state["outcome"] = f"{refused.kind}: {refused.message}"
            await answer.json(refused.status, refused.kind, refused.message, refused.close)
            return
        if body is None:  # the client left, or the protocol refused the rest of the request
            status = int(state.get("refused", 499))
            await answer.write_row(status, "client closed the connection before sending its body")
            return
        try:
            await self.app(scope, _replay(body, receive), answer.send)
        except BaseException:
            if not answer.started:
                await answer.write_row(500, "InternalError: internal error")
            raise

    def _identify(self, scope: Scope, state: dict[str, Any], client: str) -> None:
        path = str(scope.get("path", ""))
        keyed = path == MCP_PATH or (path.startswith("/api/") and path not in PUBLIC_API)
        if not keyed:
            return
        headers = _headers(scope)
        if path == MCP_PATH and "origin" in headers:
            # A browser (MCP's rule against DNS rebinding: validate Origin): agents send none.
            raise _Refused(
                403,
                "Forbidden",
                "the agent interface does not answer web pages (the request has an Origin "
                "header); a page uses the HTTP API under /api",
            )
        key = headers.get("x-api-key")
        if key is None and headers.get("authorization", "").lower().startswith("bearer "):
            key = headers["authorization"][7:].strip()
        state["key_id"] = "unknown"
        try:
            who = self.edge.auth.identify(key, client)
            state["key_id"] = who.id
            self.edge.auth.throttle(who)
        except AuthError as exc:
            state["key_id"] = exc.key_id or "unknown"
            raise _Refused(401, "AuthError", str(exc)) from None
        except RateLimited as exc:
            raise _Refused(429, "RateLimited", str(exc)) from None
        state["who"] = who

    async def _body(self, scope: Scope, receive: Receive) -> bytes | None:
        limit = self.edge.settings.max_body_bytes
        headers = _headers(scope)
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            raise _Refused(413, "PayloadTooLarge", f"request body larger than {limit} bytes", True)
        chunks: list[bytes] = []
        seen = 0
        timeout = self.edge.settings.body_timeout_seconds
        try:
            with anyio.fail_after(timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    chunk = message.get("body", b"")
                    seen += len(chunk)
                    if seen > limit:
                        raise _Refused(
                            413, "PayloadTooLarge", f"request body larger than {limit} bytes", True
                        )
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            raise _Refused(
                408, "Timeout", f"request body not received within {timeout:g} s", True
            ) from None
        body = b"".join(chunks)
        if body and _declares_json(headers.get("content-type", "")):
            try:
                json.loads(body)
            except (ValueError, RecursionError) as exc:
                # One status for every body that is not JSON, however it is malformed.
                raise _Refused(
                    422, "ValidationError", f"invalid request: body: {not_json(exc)}"
                ) from None
        return body


class _Answer:
    """The gate's side of the answer: headers added, the audit row written at its start."""

    def __init__(self, edge: Edge, scope: Scope, send: Send) -> None:
        self.edge = edge
        self.scope = scope
        self._send = send
        self.started = False
        # The answer was replaced by a 503 (its audit row could not be written).
        self.withheld = False
        path = str(scope.get("path", ""))
        self.csp = (DOCS_CSP if path in DOCS_PATHS else CSP).encode()
        self.shape = rpc_error_shape if path == MCP_PATH else error_shape

    async def write_row(self, status: int, default: str) -> bool:
        state = self.scope["state"]
        if state.get("audited"):  # the agent interface wrote this request's row itself
            return True
        return await anyio.to_thread.run_sync(
            partial(
                self.edge.log,
                key_id=str(state.get("key_id", "-")),
                endpoint=f"{self.scope.get('method', '-')} {self.scope.get('path', '')}",
                status=status,
                outcome=str(state.get("outcome", default)),
                client=str(state.get("client", "unknown")),
                dataset=state.get("dataset"),
                request=state.get("body"),
            )
        )

    async def send(self, message: Message) -> None:
        if self.withheld:  # the application's answer, after its 503: dropped
            return
        if message["type"] == "http.response.start" and not self.started:
            self.started = True
            status = int(message["status"])
            written = await self.write_row(status, "ok" if status < 400 else f"HTTP {status}")
            if not written and self.edge.settings.audit_failure == AuditFailure.REFUSE:
                await self._withhold()
                return
            headers = [
                (k, v) for k, v in message.get("headers", []) if k.lower() not in _HEADER_NAMES
            ]
            headers += [(b"content-security-policy", self.csp), *SECURITY_HEADERS]
            message = {**message, "headers": headers}
        await self._send(message)

    async def _withhold(self) -> None:
        """Answer 503 instead of an answer the audit log could not record."""
        self.withheld = True
        message = "the audit log cannot be written, so nothing is answered; try again shortly"
        self.scope["state"]["outcome"] = f"Unavailable: {message}"
        data = json.dumps(self.shape(503, "Unavailable", message)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
            (b"retry-after", b"5"),
            (b"content-security-policy", self.csp),
            *SECURITY_HEADERS,
        ]
        await self._send({"type": "http.response.start", "status": 503, "headers": headers})
        await self._send({"type": "http.response.body", "body": data})

    async def json(self, status: int, kind: str, message: str, close: bool = False) -> None:
        data = json.dumps(self.shape(status, kind, message)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
        ]
        if close:  # the body was not read: the connection cannot carry another request
            headers.append((b"connection", b"close"))
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": data})


SECURITY_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    # The page may carry an API key in its address (?key=): never send it elsewhere.
    (b"referrer-policy", b"no-referrer"),
]
_HEADER_NAMES = {b"content-security-policy"} | {k for k, _ in SECURITY_HEADERS}


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or ()}


def _declares_json(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (
        kind.startswith("application/") and kind.endswith("+json")
    )


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` giving the read body once, then the connection's own (its disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
