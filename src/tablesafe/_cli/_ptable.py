"""Command line: ``tablesafe ptable``: write and show perturbation tables."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from tablesafe._cli import PATH, app, number
from tablesafe._errors import choice
from tablesafe.mechanisms import destatis, dp_geometric, drop_add_q, pram_shlomo_young
from tablesafe.ptable._io import read_ptable, write_ptable
from tablesafe.ptable._ptable import Layout

if TYPE_CHECKING:
    from tablesafe.ptable._ptable import PTable


@app.group(
    "ptable",
    help=(
        "Perturbation tables: write those of DP, PRAM, drop/add-up-to-q and the Destatis "
        "cell-key method in the Destatis (probability) or ABS/ONS (sampled) layout; show one."
    ),
    no_args_is_help=True,
)
def ptable_app() -> None:
    """Perturbation tables."""


_out = click.option("--out", type=PATH, required=True, help="File to write (CSV).")
_layout = click.option(
    "--layout",
    default="destatis",
    help="destatis (i,j,p,v,p_int_lb,p_int_ub,type; default) or abs (pcv,ckey,pvalue).",
)
_keys = click.option(
    "--keys",
    type=number("ptable.keys"),
    default=256,
    help="abs layout: cell keys per count (256 or 4096).",
)


def _write(table: PTable, out: Path, layout: str, keys: int) -> None:
    # Converted in memory first, so a ptable the layout cannot hold leaves no file behind.
    write_ptable(table, out, choice(Layout, layout, "layout"), keys=keys)
    fig = table.privacy()
    click.echo(
        f"wrote {table.name} ptable ({table.n_rows} rows, {layout} layout) to {out}; "
        f"epsilon {fig.epsilon:.4g}, delta {fig.delta:.3g}"
    )


@ptable_app.command("dp")
@_out
@click.option(
    "--epsilon", type=number("protection.epsilon"), default=2.0, help="Privacy parameter (> 0)."
)
@click.option(
    "--sensitivity", type=number("ptable.sensitivity"), default=1.0, help="Sensitivity Δu (> 0)."
)
@click.option(
    "--cap", type=number("protection.cap"), default=7, help="Largest |perturbation| (>= 1)."
)
@_layout
@_keys
def dp(out: Path, epsilon: float, sensitivity: float, cap: int, layout: str, keys: int) -> None:
    """The DP discretised Laplace ptable (seed 000, Section 3.1, Table 1)."""
    _write(dp_geometric(epsilon, sensitivity, cap), out, layout, keys)


@ptable_app.command("pram")
@_out
@click.option(
    "--epsilon",
    type=number("protection.epsilon"),
    default=2.0,
    help="Epsilon of the geometric rows.",
)
@click.option(
    "--cap", type=number("ptable.pram_cap"), default=7, help="Cap of the geometric rows (>= 2)."
)
@_layout
def pram(out: Path, epsilon: float, cap: int, layout: str) -> None:
    """PRAM of Shlomo & Young (seed 000, Tables 2 and 3).

    Small-cell rows are ordinary rows i = 0..cap-1; the residue rows follow
    with type mod<2 cap + 1> (a tablesafe extension of the Destatis layout).
    """
    _write(pram_shlomo_young(epsilon, cap), out, layout, 256)


@ptable_app.command("q")
@_out
@click.option(
    "--rate",
    type=number("protection.rate"),
    default=0.01,
    help="q = ceil(rate * count), 0 < rate <= 1.",
)
@click.option("--cap", type=number("protection.cap"), default=7, help="Largest q (>= 1).")
@_layout
@_keys
def q(out: Path, rate: float, cap: int, layout: str, keys: int) -> None:
    """Cell-wise drop/add-up-to-q (seed 000, Section 2.3)."""
    _write(drop_add_q(rate, cap), out, layout, keys)


@ptable_app.command("destatis")
@_out
@click.option(
    "--D",
    "d",
    type=number("protection.max_deviation"),
    default=3,
    help="Maximum deviation D (>= 1).",
)
@click.option("--V", "v", type=number("protection.variance"), default=1.0, help="Variance V (> 0).")
@click.option("--js", type=number("protection.js"), default=0, help="No perturbed counts in 1..js.")
@click.option(
    "--pstay",
    type=number("ptable.pstay"),
    default=None,
    help="Probability that a count stays (0 < pstay < 1).",
)
@click.option("--mono/--no-mono", default=True, help="Monotony condition left of v = 0.")
@_layout
@_keys
def destatis_cmd(
    out: Path,
    d: int,
    v: float,
    js: int,
    pstay: float | None,
    mono: bool,
    layout: str,
    keys: int,
) -> None:
    """The maximum-entropy ptable of the cell-key method (R package ptable)."""
    _write(destatis(d, v, js, pstay=pstay, mono=mono), out, layout, keys)


@ptable_app.command("show")
@click.argument("file", type=PATH, help="A ptable CSV (either layout).")
@click.option("--rows", type=number("ptable.rows"), default=40, help="Show at most this many rows.")
def show(file: Path, rows: int) -> None:
    """Print a ptable: privacy figures, and per row v, p, share changed and variance."""
    from rich.console import Console
    from rich.table import Table

    table = read_ptable(file)
    fig = table.privacy()
    console = Console()
    sampled = table.sampled is not None
    kind = (
        f"sampled, {table.sampled.shape[1]} cell keys"
        if table.sampled is not None
        else "probabilities"
    )
    console.print(f"[bold]{file}[/bold]: {table.n_rows} rows ({table.selector}; {kind})")
    console.print(
        f"epsilon {fig.epsilon:.4g} (largest log-ratio of neighbouring counts), "
        f"delta {fig.delta:.4g} at that epsilon (worst counts {fig.worst_count} and "
        f"{fig.worst_count + 1}); mass only one neighbour can publish: {fig.unbounded_mass:.4g}"
    )
    out = Table("row", "perturbations v", "probabilities", "P(v != 0)", "Var(v)")
    shares, variances = table.share_changed(), table.variance()
    labels = table.row_labels()
    all_rows = list(table.rows) + list(table.residue_rows)
    for r, (v, p) in enumerate(all_rows[:rows]):
        out.add_row(
            labels[r],
            " ".join(str(x) for x in v.tolist()),
            " ".join(f"{x:.4g}" for x in p.tolist()),
            f"{shares[r]:.4f}",
            f"{variances[r]:.4f}",
        )
    console.print(out)
    if len(all_rows) > rows:
        console.print(f"... {len(all_rows) - rows} more rows (--rows to show more)")
    if sampled:
        console.print("counts above 750 use rows 501-750 (ONS rule)")
