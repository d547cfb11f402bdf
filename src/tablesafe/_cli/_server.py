"""Command line: `tablesafe serve`, `tablesafe mcp`, `tablesafe audit`, `tablesafe api-key ...`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from tablesafe._cli import PATH, app, number, text_or_json
from tablesafe._errors import RequestError
from tablesafe._settings import ApiKeySettings, load_site_config
from tablesafe.catalog._catalog import dump_toml
from tablesafe.state import open_state


@app.group("api-key", help="API keys for the server.", no_args_is_help=True)
def api_key_app() -> None:
    """API keys for the server."""


@app.command("serve")
@click.option("--config", type=PATH, required=True, help="Site configuration (TOML).")
@click.option("--host", default="127.0.0.1", help="Address to listen on.")
@click.option("--port", type=number("serve.port"), default=8000, help="Port to listen on.")
def serve(config: Path, host: str, port: int) -> None:
    """Serve the table builder: HTTP API and web page.

    With the SQLite state store it also builds the tables asked for as jobs,
    one at a time ([server] embedded_worker; PostgreSQL sites run `tablesafe
    worker`). SIGTERM or Ctrl-C: requests in flight and the job being built
    get [server] shutdown_timeout_seconds; a job not done goes back to the queue.
    """
    # Start-up: FastAPI and uvicorn load only for the commands that start the server.
    from tablesafe.server import serve_http

    serve_http(
        load_site_config(config),
        host,
        port,
        say=click.echo,
        progress=lambda line: click.echo(f"tablesafe: {line}", err=True),
    )


@app.command("mcp")
@click.option("--config", type=PATH, required=True, help="Site configuration (TOML).")
@click.option(
    "--api-key",
    envvar="TABLESAFE_API_KEY",
    default=None,
    show_default=False,
    help="The caller's API key, where the site configures keys (default: the "
    "TABLESAFE_API_KEY environment variable, which keeps it out of process listings).",
)
def mcp(config: Path, api_key: str | None) -> None:
    """Serve the agent interface (Model Context Protocol) over standard input and output.

    An assistant starts this command and talks to it over its standard input
    and output (docs/agents.md); its tables take the site's one path, as
    `tablesafe serve`'s do.
    """
    # Start-up: FastAPI and uvicorn load only for the commands that start the server.
    from tablesafe.server import serve_agents

    serve_agents(load_site_config(config), api_key=api_key)


@app.group(
    "audit", help="Read the audit log of a site (newest first).", invoke_without_command=True
)
@click.option("--config", type=PATH, default=None, help="Site configuration (TOML).")
@click.option("--key-id", default=None, help="Only this API key.")
@click.option("--dataset", default=None, help="Only this dataset.")
@click.option("--since", default=None, help="Only from this ISO time on.")
@click.option("--limit", type=number("audit.limit"), default=50, help="Most rows to show.")
@text_or_json
@click.pass_context
def audit_app(
    ctx: click.Context,
    config: Path | None,
    key_id: str | None,
    dataset: str | None,
    since: str | None,
    limit: int,
    fmt: str,
) -> None:
    """Read the audit log of a site (newest first); `audit reconstruct` attacks what it served."""
    if ctx.invoked_subcommand is not None:
        return
    if config is None:
        raise RequestError("--config is required: the site configuration (TOML)")
    site = load_site_config(config)
    log = open_state(site)
    try:
        rows = log.query(key_id=key_id, dataset=dataset, since=since, limit=limit)
    finally:
        log.close()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
        return
    _audit_text(rows)


_AUDIT_COLUMNS = ("time", "key", "client", "dataset", "endpoint", "status", "outcome", "request")


def _audit_text(rows: list[dict[str, Any]]) -> None:
    """The audit rows as text: a table on a terminal, whole tab-separated lines otherwise.

    A terminal gets a table of its width (long outcomes and requests cut);
    piped into a file, ``grep`` or ``cut``, each request is one line with every
    field whole (tabs and newlines inside a field written as spaces), so
    nothing is cut to rich's default 80 columns.
    """
    fields = [
        [
            r["time"],
            r["key_id"],
            r["client"] or "",
            r["dataset"] or "",
            r["endpoint"],
            str(r["status"]),
            r["outcome"],
            json.dumps(r["request"]) if r["request"] else "",
        ]
        for r in rows
    ]
    if not sys.stdout.isatty():
        lines = [_AUDIT_COLUMNS, *fields]
        click.echo("\n".join("\t".join(" ".join(f.split()) for f in line) for line in lines))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(*_AUDIT_COLUMNS)
    for row in fields:
        table.add_row(*row[:6], row[6][:60], row[7][:80])
    Console().print(table)


@api_key_app.command("new")
@click.argument("key_id", help="Id of the key (shown in the audit log).")
@click.option("--role", default="user", help="user or admin.")
@click.option(
    "--expires",
    default=None,
    help="Date (2027-01-01, from 00:00 UTC) or date-time (2027-01-01T12:00:00Z) from which "
    "the key stops working; default: never.",
)
def api_key_new(key_id: str, role: str, expires: str | None) -> None:
    """Make a new API key: prints the key (give it to its user) and its [[keys]] entry."""
    # Start-up: FastAPI and uvicorn load only for the commands that start the server.
    from tablesafe.server import new_key

    if role not in ("user", "admin"):
        raise RequestError(f"unknown role {role!r}; allowed: user, admin")
    key, digest = new_key()
    entry = _key_entry(key_id, digest, role, expires)
    click.echo(f"key (shown once; give it to the user): {key}")
    # The values written by tomli-w, so the entry reads back as checked; the header by
    # hand (tomli-w writes a short array of tables inline, which appended to a site
    # file would land in the table before it).
    click.echo("\n[[keys]]\n" + dump_toml(entry), nl=False)


def _key_entry(key_id: str, digest: str, role: str, expires: str | None) -> dict[str, Any]:
    """The ``[[keys]]`` entry, checked as the site configuration will read it.

    Raises:
        RequestError: for an id the configuration does not allow, or an
            ``expires`` that is not a TOML date or date-time.
    """
    import tomllib

    from pydantic import ValidationError

    entry: dict[str, Any] = {"id": key_id, "role": role, "hash": digest}
    bad_date = RequestError(
        f"--expires {expires!r} is not a date or date-time; give 2027-01-01 or 2027-01-01T12:00:00Z"
    )
    if expires is not None:
        try:
            entry["expires"] = tomllib.loads(f"expires = {expires.strip()}")["expires"]
        except tomllib.TOMLDecodeError:
            raise bad_date from None
    try:
        ApiKeySettings(**entry)
    except ValidationError as error:
        if any(e["loc"][:1] == ("id",) for e in error.errors()):
            raise RequestError(
                f"key id {key_id!r} is not allowed: 1 to 40 letters, digits, '_', '.' or '-'"
            ) from None
        raise bad_date from None
    return entry


@api_key_app.command("revoke")
@click.argument("key_id", help="Id of the key, as in the site configuration.")
@click.option("--config", type=PATH, required=True, help="Site configuration (TOML).")
@click.option("--reason", default=None, help="Why (kept with the revocation).")
def api_key_revoke(key_id: str, config: Path, reason: str | None) -> None:
    """Revoke a key now: the running server refuses it from its next request (no restart)."""
    site = load_site_config(config)
    key = next((k for k in site.keys if k.id == key_id), None)
    if key is None:
        known = ", ".join(k.id for k in site.keys) or "none"
        raise RequestError(f"no key {key_id!r} in {config}; its keys: {known}")
    log = open_state(site)
    try:
        done = log.revoke_key(key.id, key.hash, reason)
        when = log.revoked(key.hash)
    finally:
        log.close()
    if done:
        click.echo(f"revoked key {key_id}: the server refuses it from its next request")
    else:
        click.echo(f"key {key_id} was already revoked on {when}")


@api_key_app.command("list")
@click.option("--config", type=PATH, required=True, help="Site configuration (TOML).")
@text_or_json
def api_key_list(config: Path, fmt: str) -> None:
    """The site's keys: role, expiry, revocation and last use (from the audit log)."""
    site = load_site_config(config)
    log = open_state(site)
    try:
        used = log.last_used()
        rows = [
            {
                "id": k.id,
                "role": k.role,
                "expires": None if k.expires is None else k.expires.isoformat(),
                "revoked": log.revoked(k.hash),
                "last_used": used.get(k.id),
            }
            for k in site.keys
        ]
    finally:
        log.close()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("id", "role", "expires", "revoked", "last used")
    for r in rows:
        table.add_row(
            r["id"], r["role"], r["expires"] or "never", r["revoked"] or "", r["last_used"] or ""
        )
    Console().print(table)
