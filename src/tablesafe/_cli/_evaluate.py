"""Command line: `tablesafe evaluate`: choose a protection and its parameters."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tablesafe._cli import PATH, app, text_or_json
from tablesafe._errors import ParameterError
from tablesafe._protection_limits import check_number
from tablesafe.catalog._dataset import Dataset


@app.command("evaluate")
@click.argument("data_dir", type=PATH, help="Dataset folder (with catalog.toml).")
@click.option(
    "--table", required=True, multiple=True, help="A table, e.g. AGEGRP*SEX (repeatable)."
)
@click.option("--methods", default="dp,pram,q,ckm", help="Comma-separated: dp, pram, q, ckm.")
@click.option(
    "--epsilon",
    default="0.5,1,2",
    help="dp: comma-separated epsilons (each as --epsilon of table).",
)
@click.option(
    "--cap", default="3,5,7", help="dp and q: comma-separated caps (each as --cap of table)."
)
@click.option(
    "--out", type=PATH, default=None, help="Folder for results.json, PNG and report.html."
)
@text_or_json
@click.option(
    "--magnitude",
    multiple=True,
    help="A continuous variable whose sums and means to measure (repeatable).",
)
def evaluate_cmd(
    data_dir: Path,
    table: tuple[str, ...],
    methods: str,
    epsilon: str,
    cap: str,
    out: Path | None,
    fmt: str,
    magnitude: tuple[str, ...],
) -> None:
    """Risk and utility of each mechanism and parameter on a dataset's tables."""
    from rich.console import Console

    # Start-up: the experiments load SciPy only when one runs.
    from tablesafe.experiments._evaluate import evaluate, mechanism_grid
    from tablesafe.experiments._report import evaluation_text, write_evaluation_report

    try:
        eps = [float(x) for x in epsilon.split(",") if x.strip()]
        caps = [int(x) for x in cap.split(",") if x.strip()]
    except ValueError:
        raise ParameterError("--epsilon and --cap take comma-separated numbers") from None
    # Each in its documented range, before any ptable is built.
    eps = [check_number("protection.epsilon", e, "--epsilon") for e in eps]
    caps = [check_number("protection.cap", c, "--cap") for c in caps]
    configs = mechanism_grid([m.strip() for m in methods.split(",") if m.strip()], eps, caps)
    tables = [[d.strip() for d in t.split("*") if d.strip()] for t in table]
    with Console(stderr=True).status("protecting and measuring"):
        results = evaluate(Dataset.open(data_dir), tables, configs, magnitudes=magnitude or ())
    rows = [r.as_dict() for r in results]
    if out is not None:
        write_evaluation_report(rows, out)
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
        return
    click.echo(evaluation_text(rows), nl=False)
