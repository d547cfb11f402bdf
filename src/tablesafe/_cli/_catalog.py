"""Command line: a dataset from a raw survey file (`tablesafe catalog init`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tablesafe._cli import app

catalog_app = typer.Typer(
    help="Catalogs: draft one from a Parquet, CSV, SPSS, Stata or SAS file.",
    no_args_is_help=True,
)
app.add_typer(catalog_app, name="catalog")


@catalog_app.command("init")
def catalog_init(
    data_file: Annotated[
        Path,
        typer.Argument(help="Parquet, CSV, SPSS (.sav), Stata (.dta) or SAS (.sas7bdat, .xpt)."),
    ],
    directory: Annotated[Path, typer.Argument(help="Dataset folder to write.")],
    weight: Annotated[str | None, typer.Option(help="Survey-weight column (finite, >= 0).")] = None,
    record_key: Annotated[
        str, typer.Option(help="Record-key column: kept if present, drawn securely if not.")
    ] = "RKEY",
    variables: Annotated[
        str | None,
        typer.Option(help="Comma-separated columns to make variables (default: all that can be)."),
    ] = None,
    max_categories: Annotated[
        int, typer.Option(help="Most distinct values of a column without value labels.")
    ] = 50,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace a dataset already in the folder.")
    ] = False,
) -> None:
    """Write DIR/microdata.parquet and a draft DIR/catalog.toml that validates at once."""
    from tablesafe._catalog_init import init_catalog

    names = [v.strip() for v in variables.split(",") if v.strip()] if variables else None
    report = init_catalog(
        data_file,
        directory,
        weight=weight,
        record_key=record_key,
        variables=names,
        max_categories=max_categories,
        overwrite=overwrite,
    )
    keys = "drawn" if report.keys_added else "kept"
    typer.echo(
        f"wrote {report.records:,} records to {directory / 'microdata.parquet'} (record keys "
        f"{keys} in column {record_key}) and a draft {directory / 'catalog.toml'} with "
        f"{len(report.variables)} variables: {', '.join(report.variables)}"
    )
    for name, reason in report.undecided:
        typer.echo(f"  not a variable (see the comment in catalog.toml): {name}: {reason}")
    for old, new in report.renamed:
        typer.echo(f"  renamed column {old!r} to {new}")
