"""Command line: ``tablesafe resample bootstrap|binomial`` (Domingo-Ferrer & Mateo-Sanz, seed 001).

Tables are read as for ``tablesafe cyclic`` (a CSV matrix without header, or
a long CSV with a header).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from tablesafe._cli import PATH, app, number, text_or_json
from tablesafe._cli._tablefiles import format_table, read_table
from tablesafe._errors import ParameterError


@app.group(
    "resample",
    help="Resampling (Domingo-Ferrer & Mateo-Sanz): Heer's bootstrap table or the "
    "cell-oriented binomial method, with the quality condition S.",
    no_args_is_help=True,
)
def resample_app() -> None:
    """Resampling (Domingo-Ferrer & Mateo-Sanz)."""


_table = click.argument(
    "table", type=PATH, help="CSV matrix of counts (no header), or a long CSV with a header."
)
_s = click.option(
    "--S",
    "s",
    type=number("resample.quality"),
    default=2.0,
    help="Quality bound S of condition (1), > 0.",
)
_seed = click.option(
    "--seed",
    type=number("seed"),
    default=None,
    help="Seed, for reproducible runs (default: unpredictable).",
)
_format = text_or_json


def _print(table_path: Path, res: object, fmt: str) -> None:
    # Start-up: SciPy loads only when a resampling runs.
    from tablesafe.mechanisms import ResamplingResult
    from tablesafe.mechanisms._resampling import Resampling

    assert isinstance(res, ResamplingResult)
    data = read_table(table_path)
    pub = res.published()
    if fmt == "json":
        pub["cost"] = {
            "tables_drawn": res.tables_drawn,
            "cell_draws": res.cell_draws,
            "compensation_units": res.compensation_units,
        }
        click.echo(json.dumps({"published": pub}, indent=1))
        return
    click.echo("# released table")
    click.echo(format_table(data, res.table), nl=False)
    params = f"S {res.s:g}" + (f", M {res.m}" if res.method == Resampling.BOOTSTRAP else "")
    click.echo(
        f"# published: {pub['method']}; {params}; preserved: {res.preserved}; zeros stay zero"
    )
    cost = (
        f"{res.tables_drawn} bootstrap tables drawn"
        if res.method == Resampling.BOOTSTRAP
        else f"{res.cell_draws} binomial draws, {res.compensation_units} units compensated"
    )
    click.echo(f"# cost (not for publication): {cost}")


@resample_app.command("bootstrap")
@_table
@_s
@click.option(
    "--M", "m", type=number("resample.tables"), default=1, help="Bootstrap tables averaged (odd)."
)
@click.option(
    "--round/--no-round",
    "round_average",
    default=True,
    help="Round an average of M > 1 tables.",
)
@_seed
@_format
def bootstrap(
    table: Path, s: float, m: int, round_average: bool, seed: int | None, fmt: str
) -> None:
    """Heer's bootstrap table: redraw the records until every cell meets the quality condition."""
    # Start-up: SciPy loads only when a resampling runs.
    from tablesafe.mechanisms import heer_bootstrap

    data = read_table(table)
    res = heer_bootstrap(data.counts, s, m, round_average=round_average, rng=seed)
    _print(table, res, fmt)


@resample_app.command("binomial")
@_table
@_s
@click.option(
    "--preserve",
    default="total",
    help="What to keep exactly: total, or the margins of one dimension: rows, columns, "
    "layers, a dimension number (1, 2, 3) or a long table's dimension name.",
)
@_seed
@_format
def binomial(table: Path, s: float, preserve: str, seed: int | None, fmt: str) -> None:
    """The cell-oriented binomial method with compensation (keeps the total or one margin)."""
    # Start-up: SciPy loads only when a resampling runs.
    from tablesafe.mechanisms import binomial_resample

    data = read_table(table)
    ndim = data.counts.ndim
    names = {"rows": 0, "columns": 1, "layers": 2}
    if data.names is not None:
        names.update({name: d for d, name in enumerate(data.names)})
    names.update({str(d + 1): d for d in range(ndim)})
    if preserve == "total":
        axis = None
    elif preserve in names and names[preserve] < ndim:
        axis = names[preserve]
    else:
        allowed = ["total", *[k for k, v in names.items() if v < ndim]]
        raise ParameterError(f"unknown --preserve {preserve!r}; allowed: {', '.join(allowed)}")
    res = binomial_resample(data.counts, s, preserve_axis=axis, rng=seed)
    _print(table, res, fmt)
