"""Command line: `tablesafe reproduce shlomo2019`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tablesafe._cli import PATH, app, number, text_or_json


@app.group("reproduce", help="Reproduce the source papers' studies.", no_args_is_help=True)
def reproduce_app() -> None:
    """Reproduce the source papers' studies."""


@reproduce_app.command("shlomo2019")
@click.option(
    "--reps", type=number("reproduce.reps"), default=500, help="Replications per table type."
)
@click.option(
    "--seed", type=number("seed"), default=2019, help="Seed: the output depends only on it."
)
@click.option("--out", type=PATH, default=None, help="Folder for figures and report.html.")
@text_or_json
@click.option(
    "--pram",
    default="values",
    help="PRAM reading: values, plain, residues, residues-printed-sign, "
    "values-pooled (docs/reproduction.md).",
)
@click.option(
    "--pram-alpha",
    type=number("reproduce.pram_alpha"),
    default=1.0,
    help="Weight of PRAM's invariant matrix against the identity.",
)
def shlomo2019(
    reps: int, seed: int, out: Path | None, fmt: str, pram: str, pram_alpha: float
) -> None:
    """Tables 4 and 5 of Shlomo, Krenzke & Li (2019) beside the paper's values."""
    from rich.console import Console
    from rich.progress import Progress

    # Start-up: the experiments load SciPy only when one runs.
    from tablesafe.experiments import run_shlomo2019
    from tablesafe.experiments._report import comparison_text, write_report

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("replications", total=2 * reps)
        result = run_shlomo2019(
            reps,
            rng=seed,
            progress=lambda done, total: progress.update(task, completed=done),
            pram=pram,
            pram_alpha=pram_alpha,
        )
    if out is not None:
        path = write_report(result, out)
        Console(stderr=True).print(f"report written to {path}")
    if fmt == "json":
        click.echo(json.dumps(result.as_dict(), indent=1))
    else:
        click.echo(comparison_text(result), nl=False)
