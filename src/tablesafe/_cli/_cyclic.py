"""Command line: ``tablesafe cyclic perturb|posterior`` (Duncan & Roehrig, seed 002).

Table files (matrix or long CSV) are read and written by
:mod:`tablesafe._cli._tablefiles`, shared with ``tablesafe resample``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import numpy as np

from tablesafe._cli import PATH, app, number, text_or_json
from tablesafe._cli._tablefiles import (
    CountTable,
    cell_name,
    format_table,
    parse_count,
    read_table,
)
from tablesafe._errors import FormatError
from tablesafe.mechanisms import cyclic_perturb, cyclic_posterior


@app.group(
    "cyclic",
    help="Cyclic perturbation (Duncan & Roehrig): perturb a table, or compute the posterior "
    "of the original cells from a published one.",
    no_args_is_help=True,
)
def cyclic_app() -> None:
    """Cyclic perturbation (Duncan & Roehrig)."""


def _read_cycles(path: Path, shape: tuple[int, ...]) -> list[np.ndarray]:
    """Cycles as JSON: a list of nested lists, or the JSON of ``tablesafe cyclic perturb``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(f"cannot read the cycles in {path}: {exc}") from None
    if isinstance(data, dict):
        data = data.get("published", data).get("cycles")
    if not isinstance(data, list) or not data:
        raise FormatError(
            f"{path}: expected a JSON list of cycles (nested lists of +1, -1, 0), or the JSON "
            "written by 'tablesafe cyclic perturb --format json'"
        )
    out = []
    for i, c in enumerate(data, start=1):
        try:
            arr = np.array(c, dtype=float)
        except (TypeError, ValueError):
            raise FormatError(f"{path}: cycle {i} is not a table of numbers") from None
        if arr.shape != shape:
            raise FormatError(f"{path}: cycle {i} has shape {arr.shape}, the table {shape}")
        out.append(arr)
    return out


def _read_prior(
    path: Path, table: CountTable
) -> Callable[[tuple[int, ...], np.ndarray], np.ndarray]:
    """A product prior from a CSV: dimension columns, ``value``, ``weight``.

    Dimension columns are ``row,col`` (1-based positions) for a matrix table
    and the table's own dimension names and labels for a long table. Values
    not listed for a cell keep weight 1.
    """
    shape = table.counts.shape
    dims = list(table.names) if table.names is not None else ["row", "col"]
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            fields = reader.fieldnames or []
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise FormatError(f"cannot read the prior in {path}: {exc}") from None
    missing = [c for c in [*dims, "value", "weight"] if c not in fields]
    if missing:
        raise FormatError(
            f"{path}: the prior needs the columns {', '.join([*dims, 'value', 'weight'])}; "
            f"missing {', '.join(missing)}"
        )
    weights: dict[tuple[int, ...], dict[int, float]] = {}
    for line, r in enumerate(rows, start=2):
        idx = []
        for d, name in enumerate(dims):
            key = (r[name] or "").strip()
            if table.labels is None:
                if not key.isdigit() or not 1 <= int(key) <= shape[d]:
                    raise FormatError(f"{path}, line {line}: {name} must be 1 to {shape[d]}")
                idx.append(int(key) - 1)
            else:
                if key not in table.labels[d]:
                    raise FormatError(f"{path}, line {line}: {key!r} is not a category of {name}")
                idx.append(table.labels[d].index(key))
        value = parse_count(r["value"] or "", path, line)
        weight = parse_count(r["weight"] or "", path, line)
        if weight < 0 or value != int(value):
            raise FormatError(f"{path}, line {line}: value must be whole and weight >= 0")
        weights.setdefault(tuple(idx), {})[int(value)] = weight

    def prior(index: tuple[int, ...], values: np.ndarray) -> np.ndarray:
        cell = weights.get(tuple(index))
        if cell is None:
            return np.ones(values.shape)
        return np.array([cell.get(int(v), 1.0) for v in values.ravel()]).reshape(values.shape)

    return prior


@contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on standard error (only on a terminal)."""
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------


def _shared(f: Any) -> Any:
    """The options both commands take: --alpha, --beta and --cycles."""
    for decorator in reversed(
        (
            click.option(
                "--alpha",
                type=number("cyclic.probability"),
                default=0.25,
                help="Probability of adding a cycle.",
            ),
            click.option(
                "--beta",
                type=number("cyclic.probability"),
                default=0.25,
                help="Probability of subtracting a cycle.",
            ),
            click.option(
                "--cycles",
                type=PATH,
                default=None,
                help="JSON list of cycles, in order (or the JSON of 'cyclic perturb'); default: "
                "the standard set for the table's shape.",
            ),
        )
    ):
        f = decorator(f)
    return f


_skip = click.option("--skip", default="zero", help="Skip rule: zero or negative.")
_format = text_or_json


@cyclic_app.command("perturb")
@click.argument(
    "table", type=PATH, help="CSV matrix of counts (no header), or a long CSV with a header."
)
@_shared
@_skip
@click.option(
    "--seed",
    type=number("seed"),
    default=None,
    help="Seed, for reproducible runs (default: unpredictable).",
)
@_format
def perturb(
    table: Path,
    alpha: float,
    beta: float,
    cycles: Path | None,
    skip: str,
    seed: int | None,
    fmt: str,
) -> None:
    """Perturb a table and print it with the parameters to publish (cycles, alpha, beta)."""
    data = read_table(table)
    cyc = _read_cycles(cycles, data.counts.shape) if cycles is not None else None
    res = cyclic_perturb(data.counts, alpha, beta, cycles=cyc, skip=skip, rng=seed)  # type: ignore[arg-type]
    if fmt == "json":
        click.echo(json.dumps({"published": res.published()}, indent=1))
        return
    click.echo("# perturbed table")
    click.echo(format_table(data, res.table), nl=False)
    click.echo(
        f"# published: alpha {res.alpha:g}, beta {res.beta:g}, gamma {res.gamma:g}; "
        f"{len(res.cycles)} cycles (below, in order); skip rule: {res.skip} "
        f"({res.published()['skip_rule']})"
    )
    for i, c in enumerate(res.cycles, start=1):
        click.echo(f"# cycle {i}")
        click.echo(
            format_table(CountTable(c), c) if c.ndim == 2 else format_table(data, c), nl=False
        )


@cyclic_app.command("posterior")
@click.argument("table", type=PATH, help="The published (perturbed) table, as for perturb.")
@_shared
@click.option(
    "--prior",
    type=PATH,
    default=None,
    help="CSV prior per cell: dimension columns (row,col for a matrix), value, weight; "
    "unlisted values weigh 1. Default: uniform.",
)
@_skip
@click.option(
    "--likelihood",
    default="exact",
    help="exact (the mechanism's likelihood) or slides (the convention behind the "
    "slides' printed numbers).",
)
@click.option("--tables", is_flag=True, help="Also enumerate the possible original tables.")
@_format
def posterior(
    table: Path,
    alpha: float,
    beta: float,
    cycles: Path | None,
    prior: Path | None,
    skip: str,
    likelihood: str,
    tables: bool,
    fmt: str,
) -> None:
    """Posterior distribution of every original cell, given the published table and parameters."""
    data = read_table(table)
    cyc = _read_cycles(cycles, data.counts.shape) if cycles is not None else None
    cell_prior = _read_prior(prior, data) if prior is not None else None
    with progress_bar("posterior") as update:
        post = cyclic_posterior(
            data.counts,
            alpha,
            beta,
            cycles=cyc,
            skip=skip,  # type: ignore[arg-type]
            likelihood=likelihood,  # type: ignore[arg-type]
            cell_prior=cell_prior,
            enumerate_tables=tables,
            progress=update,
        )
    if fmt == "json":
        out = post.to_dict()
        for c in out["cells"]:
            c["name"] = cell_name(data, tuple(i - 1 for i in c["cell"]))
        click.echo(json.dumps(out, indent=1))
        return
    gamma = max(0.0, 1 - post.alpha - post.beta)
    click.echo(
        f"# posterior: alpha {post.alpha:g}, beta {post.beta:g}, gamma {gamma:g}; skip rule "
        f"{post.skip}; likelihood {post.likelihood}; prior "
        f"{'from ' + str(prior) if prior else 'uniform'}"
    )
    extra = f", {len(post.tables)} distinct tables" if post.tables is not None else ""
    click.echo(f"# {post.hypotheses:,} possible coin histories{extra}")
    mode = post.mode()
    for idx in np.ndindex(*post.published.shape):
        dist = "  ".join(f"{v}: {p:.2f}" for v, p in post.cell(idx).items())
        click.echo(
            f"{cell_name(data, idx)} published {post.published[idx]}, mode {mode[idx]}: {dist}"
        )
