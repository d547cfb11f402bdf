"""Command line: replicate weights from the sample design (`tablesafe replicates add`)."""

from __future__ import annotations

from pathlib import Path

import click

from tablesafe._cli import PATH, app, number
from tablesafe.prepare._replicates import add_replicates


@app.group(
    "replicates",
    help="Replicate weights: made from strata and PSUs, for standard errors and intervals.",
    no_args_is_help=True,
)
def replicates_app() -> None:
    """Replicate weights: made from strata and PSUs, for standard errors and intervals."""


@replicates_app.command("add")
@click.argument("directory", type=PATH, help="Dataset folder (catalog.toml and microdata).")
@click.option("--psu", required=True, help="PSU column (identified within its stratum).")
@click.option("--method", required=True, help="JK1, JK2, BRR or bootstrap.")
@click.option(
    "--strata", default=None, help="Stratum column (leave out for an unstratified design)."
)
@click.option(
    "--replicates",
    type=number("replicates.replicates"),
    default=None,
    help="Replicates: BRR a power of two above the strata; bootstrap (200).",
)
@click.option(
    "--fay", type=number("replicates.fay"), default=0.0, help="Fay's factor in [0, 1), BRR only."
)
@click.option("--prefix", default="RW", help="Prefix of the replicate-weight columns.")
@click.option(
    "--seed",
    type=number("seed"),
    default=None,
    help="Bootstrap seed (default: from the secure source).",
)
@click.option("--replace", is_flag=True, help="Replace the dataset's replicate weights.")
def replicates_add(
    directory: Path,
    psu: str,
    method: str,
    strata: str | None,
    replicates: int | None,
    fay: float,
    prefix: str,
    seed: int | None,
    replace: bool,
) -> None:
    """Write replicate weights to the microdata and declare them in the catalog."""
    report = add_replicates(
        directory,
        strata=strata,
        psu=psu,
        method=method,
        replicates=replicates,
        fay=fay,
        prefix=prefix,
        seed=seed,
        replace=replace,
    )
    click.echo(
        f"wrote {len(report.columns)} {report.method} replicate weights "
        f"({report.columns[0]} .. {report.columns[-1]}; {report.strata} strata, {report.psus} "
        f"PSUs, {report.records:,} records; variance coefficient {report.coefficient:.6g}) "
        f"to {directory}"
    )
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
