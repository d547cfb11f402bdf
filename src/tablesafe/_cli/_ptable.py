"""Command line: `tablesafe ptable`: write and show perturbation tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tablesafe._cli import app

ptable_app = typer.Typer(
    help="Perturbation tables: write them in the Destatis or ABS layout, show them.",
    no_args_is_help=True,
)
app.add_typer(ptable_app, name="ptable")

Out = Annotated[Path, typer.Option("--out", help="File to write (CSV).")]
Layout = Annotated[str, typer.Option(help="destatis (probabilities) or abs (sampled).")]


def _write(table: object, out: Path, layout: str) -> None:
    from tablesafe._errors import ParameterError
    from tablesafe._ptable import PTable

    assert isinstance(table, PTable)
    if layout not in ("destatis", "abs"):
        raise ParameterError(f"unknown layout {layout!r}; allowed: destatis, abs")
    out.write_text(table.to_csv(layout))  # type: ignore[arg-type]
    fig = table.privacy()
    typer.echo(
        f"wrote {table.name} ptable ({len(table.rows)} rows) to {out}; epsilon "
        f"{fig.epsilon:.4g}, delta {fig.delta:.3g}"
    )


@ptable_app.command("dp")
def dp(
    out: Out,
    epsilon: Annotated[float, typer.Option(help="Privacy parameter.")] = 2.0,
    sensitivity: Annotated[float, typer.Option(help="Sensitivity.")] = 1.0,
    cap: Annotated[int, typer.Option(help="Largest |perturbation|.")] = 7,
    layout: Layout = "destatis",
) -> None:
    """The DP discretised Laplace ptable (seed 000, Table 1)."""
    from tablesafe.mechanisms import dp_geometric

    _write(dp_geometric(epsilon, sensitivity, cap), out, layout)


@ptable_app.command("pram")
def pram(out: Out, layout: Layout = "destatis") -> None:
    """PRAM of Shlomo & Young (seed 000, Tables 2 and 3; residue rows as type mod15)."""
    from tablesafe.mechanisms import pram_shlomo_young

    _write(pram_shlomo_young(), out, layout)


@ptable_app.command("q")
def q(
    out: Out,
    rate: Annotated[float, typer.Option(help="q = ceil(rate * count).")] = 0.01,
    cap: Annotated[int, typer.Option(help="Largest q.")] = 7,
    layout: Layout = "destatis",
) -> None:
    """Cell-wise drop/add-up-to-q (seed 000, Section 2.3)."""
    from tablesafe.mechanisms import drop_add_q

    _write(drop_add_q(rate, cap), out, layout)


@ptable_app.command("destatis")
def destatis_cmd(
    out: Out,
    d: Annotated[int, typer.Option("--D", help="Maximum deviation.")] = 3,
    v: Annotated[float, typer.Option("--V", help="Variance.")] = 1.0,
    js: Annotated[int, typer.Option(help="No perturbed counts in 1..js.")] = 0,
    layout: Layout = "destatis",
) -> None:
    """The maximum-entropy ptable of the Destatis ptable method."""
    from tablesafe.mechanisms import destatis

    _write(destatis(d, v, js), out, layout)


@ptable_app.command("show")
def show(file: Annotated[Path, typer.Argument(help="A ptable CSV (either layout).")]) -> None:
    """Print a ptable with its privacy figures, share changed and variance per row."""
    from rich.console import Console
    from rich.table import Table

    from tablesafe._ptable import PTable

    table = PTable.read_csv(file)
    fig = table.privacy()
    console = Console()
    console.print(
        f"{file}: {len(table.rows)} rows ({table.selector}); epsilon {fig.epsilon:.4g}, "
        f"delta {fig.delta:.4g} (worst neighbouring counts {fig.worst_count} and "
        f"{fig.worst_count + 1})"
    )
    out = Table("row", "perturbations v", "probabilities", "P(v != 0)", "Var(v)")
    shares, variances = table.share_changed(), table.variance()
    all_rows = list(table.rows) + list(table.residue_rows)
    for r, (v, p) in enumerate(all_rows[:40]):
        label = str(r) if r < len(table.rows) else f"mod {r - len(table.rows)}"
        out.add_row(
            label,
            " ".join(str(x) for x in v.tolist()),
            " ".join(f"{x:.4g}" for x in p.tolist()),
            f"{shares[r]:.4f}",
            f"{variances[r]:.4f}",
        )
    console.print(out)
    if len(all_rows) > 40:
        console.print(f"... {len(all_rows) - 40} more rows")
