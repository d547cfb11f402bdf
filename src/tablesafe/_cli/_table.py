"""Command line: `tablesafe table`, the table builder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tablesafe._cli import app
from tablesafe._errors import RequestError


def parse_where(items: list[str]) -> dict[str, tuple[str, ...]]:
    """Parse ``VAR=CODE,CODE`` conditions into a universe mapping."""
    universe: dict[str, list[str]] = {}
    for item in items:
        name, sep, codes = item.partition("=")
        if not sep or not name.strip():
            raise RequestError(
                f"--where {item!r} is not of the form VAR=CODE[,CODE...], e.g. REGION=1,2"
            )
        values = [c.strip() for c in codes.split(",") if c.strip()]
        if not values:
            raise RequestError(f"--where {item!r} lists no category; give at least one code")
        universe.setdefault(name.strip(), []).extend(values)
    return {k: tuple(v) for k, v in universe.items()}


@app.command("table")
def table(
    data_dir: Annotated[Path, typer.Argument(help="Dataset folder (with catalog.toml).")],
    rows: Annotated[str, typer.Option(help="Row variable.")],
    cols: Annotated[str | None, typer.Option(help="Column variable.")] = None,
    layers: Annotated[
        list[str] | None, typer.Option(help="Layer variable(s); repeat for a 4-way table.")
    ] = None,
    where: Annotated[
        list[str] | None, typer.Option(help="Universe condition VAR=CODE,CODE (repeatable).")
    ] = None,
    statistic: Annotated[str, typer.Option(help="count, weighted or both.")] = "both",
    margins: Annotated[str, typer.Option(help="all, none or total.")] = "all",
    fmt: Annotated[str, typer.Option("--format", help="text, csv or json.")] = "text",
    engine: Annotated[str, typer.Option(help="duckdb or memory.")] = "duckdb",
) -> None:
    """Build a table: rows by columns (by layers) inside a universe."""
    from tablesafe._dataset import Dataset
    from tablesafe._request import TableRequest
    from tablesafe._tabulation import tabulate
    from tablesafe.engines import DuckDBEngine, MemoryEngine

    if fmt not in ("text", "csv", "json"):
        raise RequestError(f"unknown format {fmt!r}; allowed: text, csv, json")
    dims = [rows, *([cols] if cols else []), *(layers or [])]
    request = TableRequest(
        tuple(dims),
        universe=parse_where(where or []),
        statistic=statistic,  # type: ignore[arg-type]
        margins=margins,  # type: ignore[arg-type]
    )
    dataset = Dataset.open(data_dir)
    if engine == "duckdb":
        eng: DuckDBEngine | MemoryEngine = DuckDBEngine()
    elif engine == "memory":
        eng = MemoryEngine()
    else:
        raise RequestError(f"unknown engine {engine!r}; allowed: duckdb, memory")
    result = tabulate(dataset, request, engine=eng)
    typer.echo(result.render(fmt), nl=False)
