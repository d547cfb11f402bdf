"""Command line: a dataset from a raw survey file (`tablesafe catalog init`)."""

from __future__ import annotations

from pathlib import Path

import click

from tablesafe._cli import PATH, app, number


@app.group(
    "catalog",
    help="Catalogs: draft one from a Parquet, CSV, SPSS, Stata or SAS file.",
    no_args_is_help=True,
)
def catalog_app() -> None:
    """Catalogs: draft one from a Parquet, CSV, SPSS, Stata or SAS file."""


@catalog_app.command("init")
@click.argument(
    "data_file",
    type=PATH,
    help="Parquet, CSV, SPSS (.sav), Stata (.dta) or SAS (.sas7bdat, .xpt).",
)
@click.argument("directory", type=PATH, help="Dataset folder to write.")
@click.option("--weight", default=None, help="Survey-weight column (finite, >= 0).")
@click.option(
    "--record-key",
    default="RKEY",
    help="Record-key column: kept if present, drawn securely if not.",
)
@click.option(
    "--variables",
    default=None,
    help="Comma-separated columns to make variables (default: all that can be).",
)
@click.option(
    "--max-categories",
    type=number("catalog.max_categories"),
    default=50,
    help="Most distinct values of a column without value labels.",
)
@click.option(
    "--zeros-min-records",
    type=number("catalog.zeros_min_records"),
    default=100,
    help="Propose (commented out) the empty combinations of two variables' categories "
    "whose sides each hold at least this many records; 0: none.",
)
@click.option("--overwrite", is_flag=True, help="Replace a dataset already in the folder.")
def catalog_init(
    data_file: Path,
    directory: Path,
    weight: str | None,
    record_key: str,
    variables: str | None,
    max_categories: int,
    zeros_min_records: int,
    overwrite: bool,
) -> None:
    """Write DIR/microdata.parquet and a draft DIR/catalog.toml that validates at once."""
    # Start-up: DuckDB, pandas and pyarrow load only to draft a catalog.
    from tablesafe.prepare._catalog_init import init_catalog

    names = [v.strip() for v in variables.split(",") if v.strip()] if variables else None
    report = init_catalog(
        data_file,
        directory,
        weight=weight,
        record_key=record_key,
        variables=names,
        max_categories=max_categories,
        zeros_min_records=zeros_min_records,
        overwrite=overwrite,
    )
    keys = "drawn" if report.keys_added else "kept"
    click.echo(
        f"wrote {report.records:,} records to {directory / 'microdata.parquet'} (record keys "
        f"{keys} in column {record_key}) and a draft {directory / 'catalog.toml'} with "
        f"{len(report.variables)} variables: {', '.join(report.variables)}"
    )
    for name, reason in report.undecided:
        click.echo(f"  not a variable (see the comment in catalog.toml): {name}: {reason}")
    for old, new in report.renamed:
        click.echo(f"  renamed column {old!r} to {new}")
    if report.proposed_zeros:
        pairs = sorted({" and ".join(n for n, _ in p.codes) for p in report.proposed_zeros})
        click.echo(
            f"  {len(report.proposed_zeros)} structural zeros proposed, commented out in "
            f"catalog.toml ({'; '.join(pairs)}): declaring one publishes it; uncomment only "
            "those the data owner approves"
        )
