"""Command line: replicate weights from the sample design (`tablesafe replicates add`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tablesafe._cli import app

replicates_app = typer.Typer(
    help="Replicate weights: made from strata and PSUs, for standard errors and intervals.",
    no_args_is_help=True,
)
app.add_typer(replicates_app, name="replicates")


@replicates_app.command("add")
def replicates_add(
    directory: Annotated[Path, typer.Argument(help="Dataset folder (catalog.toml and microdata).")],
    psu: Annotated[str, typer.Option(help="PSU column (identified within its stratum).")],
    method: Annotated[str, typer.Option(help="JK1, JK2, BRR or bootstrap.")],
    strata: Annotated[
        str | None, typer.Option(help="Stratum column (leave out for an unstratified design).")
    ] = None,
    replicates: Annotated[
        int | None,
        typer.Option(help="Replicates: BRR a power of two above the strata; bootstrap (200)."),
    ] = None,
    fay: Annotated[float, typer.Option(help="Fay's factor in [0, 1), BRR only.")] = 0.0,
    prefix: Annotated[str, typer.Option(help="Prefix of the replicate-weight columns.")] = "RW",
    seed: Annotated[
        int | None, typer.Option(help="Bootstrap seed (default: from the secure source).")
    ] = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="Replace the dataset's replicate weights.")
    ] = False,
) -> None:
    """Write replicate weights to the microdata and declare them in the catalog."""
    from tablesafe._replicates import add_replicates

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
    typer.echo(
        f"wrote {len(report.columns)} {report.method} replicate weights "
        f"({report.columns[0]} .. {report.columns[-1]}; {report.strata} strata, {report.psus} "
        f"PSUs, {report.records:,} records; variance coefficient {report.coefficient:.6g}) "
        f"to {directory}"
    )
