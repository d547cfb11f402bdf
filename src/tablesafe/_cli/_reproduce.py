"""Command line: `tablesafe reproduce shlomo2019`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tablesafe._cli import app

reproduce_app = typer.Typer(help="Reproduce the source papers' studies.", no_args_is_help=True)
app.add_typer(reproduce_app, name="reproduce")


@reproduce_app.command("shlomo2019")
def shlomo2019(
    reps: Annotated[int, typer.Option(help="Replications per table type.")] = 500,
    seed: Annotated[int, typer.Option(help="Seed: the output depends only on it.")] = 2019,
    out: Annotated[Path | None, typer.Option(help="Folder for figures and report.html.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    pram: Annotated[
        str,
        typer.Option(
            help="PRAM reading: values, plain, residues, residues-printed-sign, "
            "values-pooled (docs/reproduction.md)."
        ),
    ] = "values",
    pram_alpha: Annotated[
        float, typer.Option(help="Weight of PRAM's invariant matrix against the identity.")
    ] = 1.0,
) -> None:
    """Tables 4 and 5 of Shlomo, Krenzke & Li (2019) beside the paper's values."""
    from rich.console import Console
    from rich.progress import Progress

    from tablesafe._errors import RequestError
    from tablesafe.experiments import run_shlomo2019
    from tablesafe.experiments._report import comparison_text, write_report

    if fmt not in ("text", "json"):
        raise RequestError(f"unknown format {fmt!r}; allowed: text, json")
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
        typer.echo(json.dumps(result.as_dict(), indent=1))
    else:
        typer.echo(comparison_text(result), nl=False)
