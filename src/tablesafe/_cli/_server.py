"""Command line: `tablesafe serve`, `tablesafe audit`, `tablesafe api-key new`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tablesafe._cli import PATH, app


@app.group("api-key", help="API keys for the server.", no_args_is_help=True)
def api_key_app() -> None:
    """API keys for the server."""


@app.command("serve")
@click.option("--config", type=PATH, required=True, help="Site configuration (TOML).")
@click.option("--host", default="127.0.0.1", help="Address to listen on.")
@click.option("--port", type=int, default=8000, help="Port to listen on.")
def serve(config: Path, host: str, port: int) -> None:
    """Serve the table builder: HTTP API and web page."""
    import uvicorn

    from tablesafe._settings import load_site_config
    from tablesafe.server import create_app
    from tablesafe.server._protocol import listen, open_files_for, server_config

    site = load_site_config(config)
    # Bound before the data is loaded or anything announced: a busy port fails first.
    sock = listen(host, port)
    try:
        application = create_app(site)
        connections = open_files_for(site.server.max_connections)
        server = uvicorn.Server(server_config(application, max_connections=connections))
        click.echo(
            f"tablesafe: serving {', '.join(d.name for d in site.datasets)} at "
            f"http://{host}:{sock.getsockname()[1]}/"
        )
        server.run(sockets=[sock])
    finally:
        sock.close()


@app.group(
    "audit", help="Read the audit log of a site (newest first).", invoke_without_command=True
)
@click.option("--config", type=PATH, default=None, help="Site configuration (TOML).")
@click.option("--key-id", default=None, help="Only this API key.")
@click.option("--dataset", default=None, help="Only this dataset.")
@click.option("--since", default=None, help="Only from this ISO time on.")
@click.option("--limit", type=int, default=50, help="Most rows to show.")
@click.option("--format", "fmt", default="text", help="text or json.")
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
    from rich.console import Console
    from rich.table import Table

    from tablesafe._errors import RequestError
    from tablesafe._settings import load_site_config
    from tablesafe.server import AuditLog

    if ctx.invoked_subcommand is not None:
        return
    if config is None:
        raise RequestError("--config is required: the site configuration (TOML)")
    site = load_site_config(config)
    log = AuditLog(site.resolve(site.server.audit_db))
    rows = log.query(key_id=key_id, dataset=dataset, since=since, limit=limit)
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
        return
    if fmt != "text":
        raise RequestError(f"unknown format {fmt!r}; allowed: text, json")
    table = Table("time", "key", "dataset", "endpoint", "status", "outcome", "request")
    for r in rows:
        table.add_row(
            r["time"],
            r["key_id"],
            r["dataset"] or "",
            r["endpoint"],
            str(r["status"]),
            r["outcome"][:60],
            json.dumps(r["request"])[:80] if r["request"] else "",
        )
    Console().print(table)


@api_key_app.command("new")
@click.argument("key_id", help="Id of the key (shown in the audit log).")
@click.option("--role", default="user", help="user or admin.")
def api_key_new(key_id: str, role: str) -> None:
    """Make a new API key: prints the key (give it to its user) and its [[keys]] entry."""
    from tablesafe._errors import RequestError
    from tablesafe.server import new_key

    if role not in ("user", "admin"):
        raise RequestError(f"unknown role {role!r}; allowed: user, admin")
    key, digest = new_key()
    click.echo(f"key (shown once; give it to the user): {key}")
    click.echo("\n[[keys]]")
    click.echo(f'id = "{key_id}"')
    click.echo(f'role = "{role}"')
    click.echo(f'hash = "{digest}"')
