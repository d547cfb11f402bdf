"""Command line: `tablesafe postprocess fit`: releasable inner cells from margins."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tablesafe._cli import PATH, app, number
from tablesafe._errors import FormatError, ParameterError
from tablesafe.output._render import TOTAL_CODE, to_csv

if TYPE_CHECKING:
    import numpy as np

    from tablesafe.postprocess import DesignMatrix


@app.group(
    "postprocess",
    help="Post-process protected tables into releasable inner cells (Langsrud 2019).",
    no_args_is_help=True,
)
def pp_app() -> None:
    """Post-process protected tables into releasable inner cells (Langsrud 2019)."""


FLAGS = {"structural_zero", "suppressed", "perturbed", "adjusted", "se", "ci_low", "ci_high"}


@pp_app.command("fit")
@click.argument(
    "table", type=PATH, help="Long CSV: dimension columns, a value column, _T for totals."
)
@click.option("--value", default="n", help="The value column.")
@click.option("--method", default="B", help="A, B, C or LAD.")
@click.option(
    "--exact",
    multiple=True,
    help="Method C: margins over these variables are exact (repeatable).",
)
@click.option(
    "--weight",
    type=number("postprocess.weight"),
    default=1000.0,
    help="Method C: weight of exact margins.",
)
@click.option(
    "--loglinear/--no-loglinear",
    default=False,
    help="Refit by the log-linear model of the margins.",
)
@click.option("--round", "round_", default="none", help="none, stochastic or multinomial.")
@click.option("--seed", type=number("seed"), default=None, help="Seed for rounding.")
def fit(
    table: Path,
    value: str,
    method: str,
    exact: tuple[str, ...],
    weight: float,
    loglinear: bool,
    round_: str,
    seed: int | None,
) -> None:
    """Estimate inner cells from the margins of a table (inner cells in the file are ignored)."""
    import numpy as np
    import pandas as pd

    # Start-up: SciPy and pandas load only when a method runs.
    from tablesafe.postprocess import design_matrix, loglinear_refit

    long = _read_long(table, value)
    design = design_matrix(long.shape, long.margins)
    y = _estimate(method, design, long.margin_values(), long, exact, weight)
    if loglinear:
        y = loglinear_refit(np.maximum(y, 0), long.margins)
    out_vals = _rounded(y, round_, seed)
    idx = np.indices(long.shape).reshape(len(long.shape), -1)
    result = pd.DataFrame({d: [long.codes[d][i] for i in idx[j]] for j, d in enumerate(long.dims)})
    result[value] = out_vals.ravel()
    click.echo(to_csv(result), nl=False)


@dataclass
class _LongTable:
    """A table read from a long CSV: its dimensions, their codes, and its values by row."""

    path: Path
    dims: list[str]
    codes: dict[str, list[str]]  # per dimension, its codes in file order (no total)
    shape: tuple[int, ...]
    records: list[list[str]]  # per row, its codes (TOTAL_CODE for a margin)
    values: np.ndarray  # per row, its value (NaN if not a number)
    margins: list[tuple[int, ...]]  # the margins present, as the dimensions they keep

    def margin_values(self) -> np.ndarray:
        """The value of every cell of every margin, in ``design_matrix``'s order.

        Raises:
            FormatError: for a margin cell missing from the file.
        """
        import numpy as np

        lookup = {tuple(rec): v for rec, v in zip(self.records, self.values, strict=True)}
        z = []
        for m in self.margins:
            for combo in np.ndindex(*[self.shape[j] for j in m]):
                key = [TOTAL_CODE] * len(self.dims)
                for j, c in zip(m, combo, strict=True):
                    key[j] = self.codes[self.dims[j]][c]
                if tuple(key) not in lookup:
                    raise FormatError(
                        f"{self.path} lacks the margin cell "
                        f"{dict(zip(self.dims, key, strict=True))}"
                    )
                z.append(float(lookup[tuple(key)]))
        return np.array(z)


def _read_long(table: Path, value: str) -> _LongTable:
    """Read the long CSV: dimensions, codes and the margins it holds.

    Raises:
        FormatError: for an unreadable file, no value column, no dimension
            column or no margin.
    """
    import numpy as np
    import pandas as pd

    try:
        frame = pd.read_csv(table, dtype=str, comment="#")
    except (OSError, ValueError) as exc:
        raise FormatError(f"cannot read {table}: {exc}") from None
    if value not in frame.columns:
        raise FormatError(
            f"{table} has no value column {value!r}; columns: {', '.join(frame.columns)}"
        )
    dims = [c for c in frame.columns if c != value and c not in FLAGS and not c.endswith("_label")]
    if not dims:
        raise FormatError(f"{table} has no dimension columns")
    codes = {d: [c for c in dict.fromkeys(frame[d]) if c != TOTAL_CODE] for d in dims}
    shape = tuple(len(codes[d]) for d in dims)
    vals = pd.to_numeric(frame[value], errors="coerce").to_numpy(dtype=float)
    records = [[str(x) for x in rec] for rec in frame[dims].itertuples(index=False)]
    found: set[tuple[int, ...]] = set()
    for rec, v in zip(records, vals, strict=True):
        kept = tuple(j for j, c in enumerate(rec) if c != TOTAL_CODE)
        if len(kept) < len(dims) and not np.isnan(v):
            found.add(kept)
    margins = sorted(found, key=lambda m: (len(m), m))
    if not margins:
        raise FormatError(f"{table} has no margins (rows with {TOTAL_CODE}) to fit to")
    return _LongTable(table, dims, codes, shape, records, vals, margins)


def _estimate(
    method: str,
    design: DesignMatrix,
    z: np.ndarray,
    long: _LongTable,
    exact: tuple[str, ...],
    weight: float,
) -> np.ndarray:
    """The inner cells by method A, B, C or LAD.

    Raises:
        ParameterError: for an unknown method, or ``--exact`` naming an unknown variable.
    """
    import numpy as np

    # Start-up: SciPy and pandas load only when a method runs.
    from tablesafe.postprocess import least_absolute_deviation, method_a, method_b, method_c

    m_up = method.upper()
    if m_up == "A":
        return method_a(design, z)
    if m_up == "B":
        return method_b(design, z)
    if m_up == "LAD":
        return least_absolute_deviation(design, z)
    if m_up != "C":
        raise ParameterError(f"unknown method {method!r}; allowed: A, B, C, LAD")
    dims = long.dims
    exact_dims = {dims.index(e) for e in exact if e in dims}
    if exact and len(exact_dims) != len(exact):
        raise ParameterError(f"--exact names unknown variables; dimensions: {', '.join(dims)}")
    w = []
    for m in long.margins:
        heavy = set(m) <= exact_dims or m == ()
        w += [weight if heavy else 1.0] * int(np.prod([long.shape[j] for j in m]))
    return method_c(design, z, np.array(w))


def _rounded(y: np.ndarray, round_: str, seed: int | None) -> np.ndarray:
    """The estimates as released: unrounded, or rounded stochastically or multinomially.

    Raises:
        ParameterError: for an unknown rounding.
    """
    import numpy as np

    # Start-up: SciPy and pandas load only when a method runs.
    from tablesafe.postprocess import multinomial_round, stochastic_round

    if round_ == "stochastic":
        return stochastic_round(np.maximum(y, 0), seed)
    if round_ == "multinomial":
        return multinomial_round(np.maximum(y, 0), seed)
    if round_ != "none":
        raise ParameterError(f"unknown rounding {round_!r}; allowed: none, stochastic, multinomial")
    return y
