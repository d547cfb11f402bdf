"""Command line: preparing microdata (`tablesafe keys add`, `tablesafe demo-data`)."""

from __future__ import annotations

from pathlib import Path

import click

from tablesafe._cli import PATH, app, number
from tablesafe._keys import add_record_keys


@app.group(
    "keys", help="Record keys: permanent random uint32 keys, one per record.", no_args_is_help=True
)
def keys_app() -> None:
    """Record keys: permanent random uint32 keys, one per record."""


@keys_app.command("add")
@click.argument("source", type=PATH, help="Microdata in Parquet or CSV.")
@click.argument("target", type=PATH, help="Output file (.parquet or .csv).")
@click.option("--column", default="RKEY", help="Name of the record-key column.")
@click.option(
    "--overwrite-keys",
    is_flag=True,
    help="Replace existing keys (changes every table ever published from the data).",
)
def keys_add(source: Path, target: Path, column: str, overwrite_keys: bool) -> None:
    """Assign permanent uint32 record keys from a secure random source."""
    n = add_record_keys(source, target, column=column, overwrite_keys=overwrite_keys)
    click.echo(f"wrote {n:,} records with record keys in column {column} to {target}")


@app.command("demo-data")
@click.argument("out_dir", type=PATH, help="Folder to write the demo dataset to.")
@click.option(
    "--records", type=number("demo-data.records"), default=100_000, help="Number of records."
)
@click.option(
    "--seed", type=number("seed"), default=2026, help="Seed: the output depends only on it."
)
@click.option(
    "--replicates",
    type=number("demo-data.replicates"),
    default=80,
    help="JK1 replicate weights (0 for none).",
)
@click.option("--format", "fmt", default="parquet", help="parquet or csv.")
def demo_data(out_dir: Path, records: int, seed: int, replicates: int, fmt: str) -> None:
    """Write a realistic synthetic survey and its catalog."""
    from rich.console import Console

    # Start-up: pyarrow loads only to write demo data.
    from tablesafe.prepare._demo import write_demo_data

    with Console(stderr=True).status(f"generating {records:,} records"):
        out = write_demo_data(out_dir, records, seed=seed, replicates=replicates, fmt=fmt)
    click.echo(f"wrote {records:,} demo records and catalog.toml to {out}")
