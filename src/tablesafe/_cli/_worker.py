"""Command line: `tablesafe worker`, which builds the tables asked for as jobs."""

from __future__ import annotations

from pathlib import Path

import click

from tablesafe._cli import PATH, app, number
from tablesafe._settings import load_site_config


@app.command("worker")
@click.option("--config", type=PATH, required=True, help="Site configuration (TOML).")
@click.option(
    "--poll-seconds",
    type=number("worker.poll_seconds"),
    default=1.0,
    show_default=True,
    help="Wait between looks at an empty queue.",
)
@click.option("--once", is_flag=True, help="Build the jobs queued now, then stop.")
def worker(config: Path, poll_seconds: float, once: bool) -> None:
    """Build queued jobs: large tables asked for with POST /api/datasets/{name}/jobs.

    Takes jobs one at a time from the site's state store ([state] url's
    PostgreSQL, or the SQLite audit_db on one machine) and builds each as a
    direct table is built, with the dataset's job limits. Any number of
    workers may share one store. SIGTERM or Ctrl-C: the job being built is
    finished first, then the worker stops.
    """
    # Start-up: FastAPI and uvicorn load only for the commands that start the server.
    from tablesafe.server import run_worker

    run_worker(load_site_config(config), poll_seconds=poll_seconds, once=once, say=click.echo)
