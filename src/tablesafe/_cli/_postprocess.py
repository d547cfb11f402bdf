"""Command line: `tablesafe postprocess fit`: releasable inner cells from margins."""

from __future__ import annotations

from pathlib import Path

import click

from tablesafe._cli import PATH, app


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
@click.option("--weight", type=float, default=1000.0, help="Method C: weight of exact margins.")
@click.option(
    "--loglinear/--no-loglinear",
    default=False,
    help="Refit by the log-linear model of the margins.",
)
@click.option("--round", "round_", default="none", help="none, stochastic or multinomial.")
@click.option("--seed", type=int, default=None, help="Seed for rounding.")
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

    from tablesafe._errors import FormatError, ParameterError
    from tablesafe.output._render import TOTAL_CODE, to_csv
    from tablesafe.postprocess import (
        design_matrix,
        least_absolute_deviation,
        loglinear_refit,
        method_a,
        method_b,
        method_c,
        multinomial_round,
        stochastic_round,
    )

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
    design = design_matrix(shape, margins)
    lookup = {tuple(rec): v for rec, v in zip(records, vals, strict=True)}
    z = []
    for m in margins:
        for combo in np.ndindex(*[shape[j] for j in m]):
            key = [TOTAL_CODE] * len(dims)
            for j, c in zip(m, combo, strict=True):
                key[j] = codes[dims[j]][c]
            if tuple(key) not in lookup:
                raise FormatError(
                    f"{table} lacks the margin cell {dict(zip(dims, key, strict=True))}"
                )
            z.append(float(lookup[tuple(key)]))
    zz = np.array(z)
    m_up = method.upper()
    if m_up == "A":
        y = method_a(design, zz)
    elif m_up == "B":
        y = method_b(design, zz)
    elif m_up == "LAD":
        y = least_absolute_deviation(design, zz)
    elif m_up == "C":
        exact_dims = {dims.index(e) for e in exact if e in dims}
        if exact and len(exact_dims) != len(exact):
            raise ParameterError(f"--exact names unknown variables; dimensions: {', '.join(dims)}")
        w = []
        for m in margins:
            heavy = set(m) <= exact_dims or m == ()
            w += [weight if heavy else 1.0] * int(np.prod([shape[j] for j in m]))
        y = method_c(design, zz, np.array(w))
    else:
        raise ParameterError(f"unknown method {method!r}; allowed: A, B, C, LAD")
    if loglinear:
        y = loglinear_refit(np.maximum(y, 0), margins)
    out_vals: np.ndarray = y
    if round_ == "stochastic":
        out_vals = stochastic_round(np.maximum(y, 0), seed)
    elif round_ == "multinomial":
        out_vals = multinomial_round(np.maximum(y, 0), seed)
    elif round_ != "none":
        raise ParameterError(f"unknown rounding {round_!r}; allowed: none, stochastic, multinomial")
    idx = np.indices(shape).reshape(len(shape), -1)
    result = pd.DataFrame({d: [codes[d][i] for i in idx[j]] for j, d in enumerate(dims)})
    result[value] = out_vals.ravel()
    click.echo(to_csv(result), nl=False)
