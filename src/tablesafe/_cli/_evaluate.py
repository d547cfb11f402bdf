"""Command line: `tablesafe evaluate`: choose a protection and its parameters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tablesafe._cli import app


@app.command("evaluate")
def evaluate_cmd(
    data_dir: Annotated[Path, typer.Argument(help="Dataset folder (with catalog.toml).")],
    table: Annotated[list[str], typer.Option(help="A table, e.g. AGEGRP*SEX (repeatable).")],
    methods: Annotated[
        str, typer.Option(help="Comma-separated: dp, pram, q, ckm.")
    ] = "dp,pram,q,ckm",
    epsilon: Annotated[str, typer.Option(help="dp: comma-separated epsilons.")] = "0.5,1,2",
    cap: Annotated[str, typer.Option(help="dp and q: comma-separated caps.")] = "3,5,7",
    out: Annotated[
        Path | None, typer.Option(help="Folder for results.json, PNG and report.html.")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    magnitude: Annotated[
        list[str] | None,
        typer.Option(help="A continuous variable whose sums and means to measure (repeatable)."),
    ] = None,
) -> None:
    """Risk and utility of each mechanism and parameter on a dataset's tables."""
    from rich.console import Console

    from tablesafe._dataset import Dataset
    from tablesafe._errors import ParameterError, RequestError
    from tablesafe.experiments._evaluate import evaluate, mechanism_grid
    from tablesafe.experiments._report import evaluation_text, write_evaluation_report

    if fmt not in ("text", "json"):
        raise RequestError(f"unknown format {fmt!r}; allowed: text, json")
    try:
        eps = [float(x) for x in epsilon.split(",") if x.strip()]
        caps = [int(x) for x in cap.split(",") if x.strip()]
    except ValueError:
        raise ParameterError("--epsilon and --cap take comma-separated numbers") from None
    configs = mechanism_grid([m.strip() for m in methods.split(",") if m.strip()], eps, caps)
    tables = [[d.strip() for d in t.split("*") if d.strip()] for t in table]
    with Console(stderr=True).status("protecting and measuring"):
        results = evaluate(Dataset.open(data_dir), tables, configs, magnitudes=magnitude or ())
    rows = [r.as_dict() for r in results]
    if out is not None:
        write_evaluation_report(rows, out)
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=1))
        return
    typer.echo(evaluation_text(rows), nl=False)
