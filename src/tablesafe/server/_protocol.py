"""The server's edge below the application: uvicorn's HTTP/1.1 protocol, hardened.

uvicorn answers what never reaches the application itself: a malformed
request line or header (``Invalid HTTP request received.`` as text/plain), an
oversized one (the connection reset), and it has no timeout for a request's
headers. :class:`EdgeProtocol` (a subclass of uvicorn's h11 protocol) keeps
uvicorn's parsing and flow control and changes only those edges:

* every refusal is JSON in the one error shape and has its audit row:
  400 ``MalformedRequest``, 414 ``RequestLineTooLong`` and 431
  ``HeadersTooLarge`` (past ``max_header_bytes``, uvicorn's
  ``h11_max_incomplete_event_size``), 408 ``Timeout`` (headers not in within
  ``header_timeout_seconds``), 503 ``Unavailable`` (past ``max_connections``);
* a connection closed while its client may still be sending is closed
  lingering (nginx's ``lingering_close``): the answer is sent, then the write
  side shut, and what the client still sends is read and dropped until it
  closes or for at most :data:`LINGER_SECONDS`, so that the client reads the
  answer instead of a reset.

:func:`server_config` is the one uvicorn configuration of ``tablesafe serve``
(and of the tests that run a real server).
"""

from __future__ import annotations

import asyncio
import errno
import http
import importlib.util
import json
import logging
import math
import resource
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from tablesafe._errors import UserError
from tablesafe.server._app import create_app
from tablesafe.server._gate import CSP, SECURITY_HEADERS, Edge, error_shape

if TYPE_CHECKING:
    from tablesafe._settings import SiteConfig

__all__ = [
    "LINGER_SECONDS",
    "EdgeProtocol",
    "listen",
    "open_files_for",
    "serve_http",
    "server_config",
]

log = logging.getLogger("tablesafe.server")

# Longest a closing connection keeps reading (and dropping) what its client still sends.
LINGER_SECONDS = 2.0
# File descriptors kept free of connections: the audit database, the data, the listener.
_SPARE_FILES = 64


class _LingeringTransport(asyncio.Transport):
    """The connection's transport, whose ``close`` lingers while the client may be sending."""

    def __init__(self, raw: asyncio.Transport, protocol: EdgeProtocol) -> None:
        super().__init__()
        self.raw = raw
        self._protocol = protocol

    def close(self) -> None:
        if self._protocol.client_may_be_sending() and self.raw.can_write_eof():
            self._protocol.linger()
        else:
            self.raw.close()

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        self.raw.write(data)

    def is_closing(self) -> bool:
        return self.raw.is_closing() or self._protocol.lingering

    def pause_reading(self) -> None:
        self.raw.pause_reading()

    def resume_reading(self) -> None:
        self.raw.resume_reading()

    def is_reading(self) -> bool:
        return self.raw.is_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.raw.get_extra_info(name, default)

    def can_write_eof(self) -> bool:
        return self.raw.can_write_eof()

    def write_eof(self) -> None:
        self.raw.write_eof()

    def abort(self) -> None:
        self.raw.abort()

    def get_write_buffer_size(self) -> int:
        return self.raw.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.raw.set_write_buffer_limits(high, low)


class EdgeProtocol(H11Protocol):
    """uvicorn's h11 protocol with the edges of the module's docstring.

    Made for one application by :func:`server_config` (a subclass with
    ``edge`` and ``max_connections`` set).
    """

    edge: ClassVar[Edge]
    max_connections: ClassVar[int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lingering = False
        self._header_timer: asyncio.TimerHandle | None = None
        self._raw: asyncio.Transport | None = None

    # -- connection --------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._raw = transport
        self.transport = _LingeringTransport(transport, self)
        if len(self.connections) > self.max_connections:
            self._refuse(
                503,
                "Unavailable",
                f"the server holds its limit of {self.max_connections} connections; try again "
                "shortly",
            )
            return
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self.lingering:  # read and dropped: the answer is out, the connection closing
            return
        super().data_received(data)
        if self.transport.is_closing():
            self._cancel_header_timer()
        elif self.conn.their_state is h11.IDLE:
            # Part of a request line or headers: the time counts from its first byte.
            self._arm_header_timer()
        else:
            self._cancel_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if (
            not self.transport.is_closing()
            and self.conn.their_state is h11.IDLE
            and self.conn.trailing_data[0]
        ):
            # Part of a pipelined next request is in: its headers are on the clock, and
            # a 408 answers them (the keep-alive timeout would close without an answer).
            self._unset_keepalive_if_required()
            self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def eof_received(self) -> None:
        # The client is done sending: a lingering close ends here.
        if self.lingering and self._raw is not None:
            self._raw.close()

    # -- refusals ------------------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        """Answer a request h11 could not parse (uvicorn's text/plain 400), as JSON."""
        self._cancel_header_timer()
        limit = self.edge.settings.max_header_bytes
        buffered = self.conn.trailing_data[0]
        if len(buffered.split(b"\n", 1)[0]) > limit:
            status, kind = 414, "RequestLineTooLong"
            message = f"request line longer than {limit} bytes"
        elif len(buffered) > limit:
            status, kind = 431, "HeadersTooLarge"
            message = f"request line and headers larger than {limit} bytes"
        else:
            status, kind = 400, "MalformedRequest"
            message = "not a valid HTTP/1.1 request line or header"
        self._refuse(status, kind, message, buffered)

    def _refuse(self, status: int, kind: str, message: str, buffered: bytes = b"") -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_started and not cycle.response_complete:
            # The application holds this request (its body was malformed): the gate
            # writes its row when it sees the disconnect; it reads the refusal here.
            cycle.scope["state"].update(refused=status, outcome=f"{kind}: {message}")
        else:
            self.edge.log(
                key_id="unknown",
                endpoint=_endpoint(buffered),
                status=status,
                outcome=f"{kind}: {message}",
                client=self.client[0] if self.client else "unknown",
            )
        if self._raw is None or self._raw.is_closing():
            return
        self._raw.write(_raw_answer(status, kind, message))
        self.linger()

    def linger(self) -> None:
        """Send what is buffered, shut the write side, drop what arrives, then close."""
        if self.lingering or self._raw is None:
            return
        self.lingering = True
        self._cancel_header_timer()
        self._unset_keepalive_if_required()
        raw = self._raw
        if raw.can_write_eof():
            raw.write_eof()
            raw.resume_reading()
            self.loop.call_later(LINGER_SECONDS, raw.close)
        else:
            raw.close()

    def client_may_be_sending(self) -> bool:
        """Whether the client may still be sending: a body not read, or a request refused."""
        return self.conn.their_state in (h11.SEND_BODY, h11.ERROR) or self.lingering

    # -- the header timeout --------------------------------------------------------

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(
                self.edge.settings.header_timeout_seconds, self._headers_too_slow
            )

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        buffered = self.conn.trailing_data[0]
        if not buffered:  # nothing sent at all: no request reached the server
            if self._raw is not None:
                self._raw.close()
            return
        timeout = self.edge.settings.header_timeout_seconds
        self._refuse(
            408, "Timeout", f"request line and headers not received within {timeout:g} s", buffered
        )


def _endpoint(buffered: bytes) -> str:
    """``METHOD /path`` from what arrived of a refused request, as far as it reads."""
    line = buffered.split(b"\n", 1)[0][:300].decode("latin-1").strip()
    parts = line.split(" ")
    if len(parts) >= 2 and parts[0].isalpha() and parts[1].startswith("/"):
        return f"{parts[0][:16]} {parts[1][:200]}"
    return "-"


def _raw_answer(status: int, kind: str, message: str) -> bytes:
    """A whole HTTP/1.1 answer in the one error shape, closing the connection."""
    body = json.dumps(error_shape(status, kind, message)).encode()
    phrase = http.HTTPStatus(status).phrase
    head = [
        f"HTTP/1.1 {status} {phrase}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        f"content-security-policy: {CSP}",
        *(f"{k.decode()}: {v.decode()}" for k, v in SECURITY_HEADERS),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def open_files_for(connections: int) -> int:
    """Raise the open-file limit to fit ``connections`` where allowed; the connections it fits.

    Each connection is a file descriptor; past the limit, accepting fails for
    everyone (and so would opening the audit database).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = connections + _SPARE_FILES
    if soft != resource.RLIM_INFINITY and soft < want:
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return connections
    fits = max(1, min(connections, soft - _SPARE_FILES))
    if fits < connections:
        log.warning(
            "open-file limit %d fits %d connections, not max_connections = %d",
            soft,
            fits,
            connections,
        )
    return fits


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or a :class:`UserError` saying why not.

    Bound before anything is served or announced, so a busy port fails first.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UserError(f"cannot listen on {host!r}: {exc.strerror}; give an address") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UserError(
                f"cannot listen on {host}:{port}: the port is in use by another program; "
                "stop it or choose another port (--port, or make demo PORT=...)"
            ) from None
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def server_config(app: Any, *, max_connections: int | None = None) -> uvicorn.Config:
    """The uvicorn configuration serving ``app`` (from :func:`create_app`).

    Args:
        app: The application; its ``edge`` holds the site's server settings.
        max_connections: The connection limit (default: the site's).
    """
    edge: Edge = app.edge
    settings = edge.settings
    protocol = type(
        "SiteEdgeProtocol",
        (EdgeProtocol,),
        {"edge": edge, "max_connections": max_connections or settings.max_connections},
    )
    return uvicorn.Config(
        app,
        http=protocol,
        ws="none",
        lifespan="on",
        # The gate reads X-Forwarded-For from the site's trusted proxies only; uvicorn's
        # own handling would trust 127.0.0.1 and rewrite the client before the gate.
        proxy_headers=False,
        server_header=False,
        timeout_keep_alive=settings.keep_alive_seconds,
        # On SIGTERM: stop accepting, answer the requests in flight, then close.
        timeout_graceful_shutdown=math.ceil(settings.shutdown_timeout_seconds),
        h11_max_incomplete_event_size=settings.max_header_bytes,
        log_level="warning",
        access_log=False,
    )


def serve_http(
    site: SiteConfig,
    host: str,
    port: int,
    *,
    say: Callable[[str], None],
    progress: Callable[[str], None] | None = None,
) -> None:
    """Serve a site's HTTP API and page on ``host:port`` until SIGTERM or Ctrl-C.

    What ``tablesafe serve`` runs: the port is bound before the data is loaded
    or anything announced (a busy port fails first); each dataset's microdata
    is loaded as its engine keeps it (:meth:`TableService.load`) and the account
    of published figures read before the server says it is ready, not in its
    first table.

    Args:
        site: The site configuration.
        host: The address to listen on.
        port: The port (0: any free one).
        say: Where the server's announcements go (the command line's output).
        progress: Where the loading's progress goes (the command line's standard error).
    """
    sock = listen(host, port)
    if site.server.access_log:
        _log_access()
    try:
        application = create_app(site)
        application.state.service.load(progress)
        application.state.service.warm_accounts()
        connections = open_files_for(site.server.max_connections)
        server = uvicorn.Server(server_config(application, max_connections=connections))
        url = f"http://{host}:{sock.getsockname()[1]}/"
        say(f"tablesafe: serving {', '.join(d.name for d in site.datasets)} at {url}")
        if importlib.util.find_spec("mcp") is not None:
            say(f"tablesafe: agents (MCP, docs/agents.md) at {url}mcp")
        server.run(sockets=[sock])
    finally:
        sock.close()


def _log_access() -> None:
    """Access-log lines (one JSON object each) to standard error, as they are."""
    access = logging.getLogger("tablesafe.access")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    access.propagate = False
