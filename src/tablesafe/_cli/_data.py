"""Command line: preparing microdata (`tablesafe keys add`, `tablesafe demo-data`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tablesafe._cli import app

keys_app = typer.Typer(
    help="Record keys: permanent random uint32 keys, one per record.", no_args_is_help=True
)
app.add_typer(keys_app, name="keys")


@keys_app.command("add")
def keys_add(
    source: Annotated[Path, typer.Argument(help="Microdata in Parquet or CSV.")],
    target: Annotated[Path, typer.Argument(help="Output file (.parquet or .csv).")],
    column: Annotated[str, typer.Option(help="Name of the record-key column.")] = "RKEY",
    overwrite_keys: Annotated[
        bool,
        typer.Option(
            "--overwrite-keys",
            help="Replace existing keys (changes every table ever published from the data).",
        ),
    ] = False,
) -> None:
    """Assign permanent uint32 record keys from a secure random source."""
    from tablesafe._keys import add_record_keys

    n = add_record_keys(source, target, column=column, overwrite_keys=overwrite_keys)
    typer.echo(f"wrote {n:,} records with record keys in column {column} to {target}")


@app.command("demo-data")
def demo_data(
    out_dir: Annotated[Path, typer.Argument(help="Folder to write the demo dataset to.")],
    records: Annotated[int, typer.Option(help="Number of records.")] = 100_000,
    seed: Annotated[int, typer.Option(help="Seed: the output depends only on it.")] = 2026,
    replicates: Annotated[int, typer.Option(help="JK1 replicate weights (0 for none).")] = 80,
    fmt: Annotated[str, typer.Option("--format", help="parquet or csv.")] = "parquet",
) -> None:
    """Write a realistic synthetic survey and its catalog."""
    from rich.console import Console

    from tablesafe._demo import write_demo_data

    with Console(stderr=True).status(f"generating {records:,} records"):
        out = write_demo_data(out_dir, records, seed=seed, replicates=replicates, fmt=fmt)
    typer.echo(f"wrote {records:,} demo records and catalog.toml to {out}")
