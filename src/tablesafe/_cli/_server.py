"""Command line: `tablesafe serve`, `tablesafe audit`, `tablesafe api-key new`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tablesafe._cli import app

api_key_app = typer.Typer(help="API keys for the server.", no_args_is_help=True)
app.add_typer(api_key_app, name="api-key")


@app.command("serve")
def serve(
    config: Annotated[Path, typer.Option(help="Site configuration (TOML).")],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
) -> None:
    """Serve the table builder: HTTP API and web page."""
    import uvicorn

    from tablesafe._settings import load_site_config
    from tablesafe.server import create_app

    site = load_site_config(config)
    application = create_app(site)
    typer.echo(
        f"tablesafe: serving {', '.join(d.name for d in site.datasets)} at http://{host}:{port}/"
    )
    uvicorn.run(application, host=host, port=port, log_level="warning")


audit_app = typer.Typer(help="Read the audit log of a site (newest first).")
app.add_typer(audit_app, name="audit")


@audit_app.callback(invoke_without_command=True)
def audit(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Option(help="Site configuration (TOML).")] = None,
    key_id: Annotated[str | None, typer.Option(help="Only this API key.")] = None,
    dataset: Annotated[str | None, typer.Option(help="Only this dataset.")] = None,
    since: Annotated[str | None, typer.Option(help="Only from this ISO time on.")] = None,
    limit: Annotated[int, typer.Option(help="Most rows to show.")] = 50,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
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
        typer.echo(json.dumps(rows, indent=1))
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
def api_key_new(
    key_id: Annotated[str, typer.Argument(help="Id of the key (shown in the audit log).")],
    role: Annotated[str, typer.Option(help="user or admin.")] = "user",
) -> None:
    """Make a new API key: prints the key (give it to its user) and its [[keys]] entry."""
    from tablesafe._errors import RequestError
    from tablesafe.server import new_key

    if role not in ("user", "admin"):
        raise RequestError(f"unknown role {role!r}; allowed: user, admin")
    key, digest = new_key()
    typer.echo(f"key (shown once; give it to the user): {key}")
    typer.echo("\n[[keys]]")
    typer.echo(f'id = "{key_id}"')
    typer.echo(f'role = "{role}"')
    typer.echo(f'hash = "{digest}"')
