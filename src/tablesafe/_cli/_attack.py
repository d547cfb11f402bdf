"""Command line: `tablesafe attack sliver`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tablesafe._cli import app

attack_app = typer.Typer(help="Attack simulations against the protection.", no_args_is_help=True)
app.add_typer(attack_app, name="attack")


@attack_app.command("sliver")
def sliver(
    data_dir: Annotated[Path, typer.Argument(help="Dataset folder (with catalog.toml).")],
    table: Annotated[str, typer.Option(help="The table, e.g. AGEGRP*SEX.")],
    universe: Annotated[
        list[str] | None, typer.Option(help="Subgroup A: VAR=CODE,CODE (repeatable).")
    ] = None,
    method: Annotated[
        str, typer.Option(help="Comma-separated: none, ckm, dp, pram, q, q-records, ptable:FILE.")
    ] = "none,ckm,dp,q,q-records",
    epsilon: Annotated[float, typer.Option(help="dp: epsilon.")] = 1.0,
    cap: Annotated[int, typer.Option(help="dp, q: cap.")] = 7,
    rate: Annotated[float, typer.Option(help="q, q-records: rate.")] = 0.01,
    limit: Annotated[int | None, typer.Option(help="Attack a random sample of records.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of that sample.")] = 0,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
) -> None:
    """Difference the table in A and in A minus each record (Li & Krenzke 2016)."""
    import os
    import secrets

    from rich.console import Console
    from rich.progress import Progress, TaskID
    from rich.table import Table

    from tablesafe._cli._methods import protection_from_options
    from tablesafe._cli._table import parse_where
    from tablesafe._dataset import Dataset
    from tablesafe._errors import RequestError
    from tablesafe.attacks import sliver_attack

    if fmt not in ("text", "json"):
        raise RequestError(f"unknown format {fmt!r}; allowed: text, json")
    dims = [d.strip() for d in table.split("*") if d.strip()]
    dataset = Dataset.open(data_dir)
    # The attack is the data owner's experiment: without a configured secret a
    # fresh random one stands in (dynamic seeds behave the same for any secret).
    os.environ.setdefault("TABLESAFE_SECRET", secrets.token_hex(32))
    results = []
    with Progress(console=Console(stderr=True), transient=True) as progress:
        for m in [m.strip() for m in method.split(",") if m.strip()]:
            seeds = "dynamic" if m == "q-records" else "cellkey"
            prot = protection_from_options(m, epsilon=epsilon, cap=cap, rate=rate, seeds=seeds)
            task = progress.add_task(f"{m}: differencing pairs", total=None)

            def tick(done: int, total: int, task: TaskID = task) -> None:
                progress.update(task, completed=done, total=total)

            results.append(
                sliver_attack(
                    dataset,
                    parse_where(universe or []),
                    dims,
                    prot,
                    limit=limit,
                    rng=seed,
                    progress=tick,
                    name=m,
                )
            )
    if fmt == "json":
        typer.echo(json.dumps([r.as_dict() for r in results], indent=1))
        return
    out = Table(title=f"Sliver attack on {' * '.join(dims)} ({results[0].pairs} pairs)")
    out.add_column("measure")
    for r in results:
        out.add_column(r.method, justify="right")
    rows = [
        ("correct zeros %", "correct_zeros"),
        ("correct ones %", "correct_ones"),
        ("correct sliver tables %", "correct_tables"),
        ("weighted: correct zeros %", "weighted_correct_zeros"),
        ("weighted: correct ones %", "weighted_correct_ones"),
        ("weighted: correct tables %", "weighted_correct_tables"),
        ("weighted: strategy 1 success %", "strategy1"),
        ("weighted: strategy 2 success %", "strategy2"),
    ]
    for label, attr in rows:
        out.add_row(label, *[_show(getattr(r, attr)) for r in results])
    Console().print(out)


def _show(v: float | None) -> str:
    return "" if v is None else f"{v:.1f}"
