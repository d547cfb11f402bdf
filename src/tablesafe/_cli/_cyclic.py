"""Command line: ``tablesafe cyclic perturb|posterior`` (Duncan & Roehrig, seed 002).

Table files (shared with ``tablesafe resample``):

* a 2-way table is a plain CSV matrix of counts, no header;
* a 2-way or 3-way table may also be a long CSV with a header: one column
  per dimension (category labels) and a last column of counts. Missing
  combinations are zero cells; a combination given twice is an error.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from tablesafe._cli import app
from tablesafe._errors import FormatError, ParameterError

cyclic_app = typer.Typer(
    help="Cyclic perturbation (Duncan & Roehrig): perturb a table, or compute the posterior "
    "of the original cells from a published one.",
    no_args_is_help=True,
)
app.add_typer(cyclic_app, name="cyclic")


# ---------------------------------------------------------------------------
# Table files
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CountTable:
    """A table of counts read from a file, with what is needed to write it back.

    Attributes:
        counts: The counts (float, validated by the mechanism).
        names: Dimension names (long format) or None (a headerless matrix).
        labels: Category labels per dimension (long format) or None.
        count_name: Name of the count column (long format).
    """

    counts: np.ndarray
    names: tuple[str, ...] | None = None
    labels: tuple[tuple[str, ...], ...] | None = None
    count_name: str = "count"


def _number(text: str, path: Path, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise FormatError(f"{path}, line {line}: {text.strip()!r} is not a count") from None
    if not math.isfinite(value):
        raise FormatError(f"{path}, line {line}: {text.strip()!r} is not a finite count")
    return value


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _label_key(label: str) -> tuple[int, float, str]:
    # Numeric labels in numeric order, then the others alphabetically.
    return (0, float(label), label) if _is_number(label) else (1, 0.0, label)


def read_table(path: Path) -> CountTable:
    """Read a 2-way CSV matrix (no header) or a long CSV with a header (see the module docstring).

    Raises:
        FormatError: for an unreadable, empty, ragged or otherwise malformed file.
    """
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = [
                [c.strip() for c in r]
                for r in csv.reader(fh)
                if r and not r[0].startswith("#") and any(c.strip() for c in r)
            ]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise FormatError(f"cannot read {path}: {exc}") from None
    if not rows:
        raise FormatError(f"{path} is empty; expected a CSV matrix of counts or a long CSV")
    if all(_is_number(c) for c in rows[0]):
        width = len(rows[0])
        for i, r in enumerate(rows, start=1):
            if len(r) != width:
                raise FormatError(
                    f"{path}, line {i}: {len(r)} values, but line 1 has {width}; a matrix "
                    "needs the same number of counts on every line"
                )
        return CountTable(
            np.array([[_number(c, path, i) for c in r] for i, r in enumerate(rows, 1)])
        )
    header = rows[0]
    if len(header) not in (3, 4):
        raise FormatError(
            f"{path}: a long table has one column per dimension (2 or 3) and a count column; "
            f"the header has {len(header)} columns"
        )
    if len(set(header)) != len(header):
        raise FormatError(f"{path}: repeated column names in the header")
    dims = len(header) - 1
    records = []
    for i, r in enumerate(rows[1:], start=2):
        if len(r) != len(header):
            raise FormatError(f"{path}, line {i}: {len(r)} values, the header has {len(header)}")
        records.append((tuple(r[:dims]), _number(r[dims], path, i)))
    if not records:
        raise FormatError(f"{path} has a header but no cells")
    labels = tuple(
        tuple(sorted({rec[0][d] for rec in records}, key=_label_key)) for d in range(dims)
    )
    index = [{lab: j for j, lab in enumerate(labs)} for labs in labels]
    counts = np.zeros(tuple(len(labs) for labs in labels))
    seen: set[tuple[str, ...]] = set()
    for key, value in records:
        if key in seen:
            raise FormatError(f"{path}: the cell {', '.join(key)} is given twice")
        seen.add(key)
        counts[tuple(index[d][key[d]] for d in range(dims))] = value
    return CountTable(counts, tuple(header[:dims]), labels, header[dims])


def format_table(table: CountTable, values: np.ndarray) -> str:
    """Write ``values`` in the layout of ``table``'s file (matrix or long CSV)."""

    def fmt(v: Any) -> str:
        f = float(v)
        return str(int(f)) if f == int(f) else f"{f:g}"

    if table.names is None or table.labels is None:
        return "\n".join(",".join(fmt(v) for v in row) for row in values) + "\n"
    lines = [",".join([*table.names, table.count_name])]
    for idx in np.ndindex(*values.shape):
        labs = [table.labels[d][i] for d, i in enumerate(idx)]
        lines.append(",".join([*labs, fmt(values[idx])]))
    return "\n".join(lines) + "\n"


def cell_name(table: CountTable, idx: tuple[int, ...]) -> str:
    """``t(1,2)`` for a matrix (1-based), ``t(a,b,c)`` with labels for a long table."""
    if table.labels is None:
        return "t(" + ",".join(str(i + 1) for i in idx) + ")"
    return "t(" + ",".join(table.labels[d][i] for d, i in enumerate(idx)) + ")"


def check_format(fmt: str) -> None:
    """Accept ``text`` or ``json``."""
    if fmt not in ("text", "json"):
        raise ParameterError(f"unknown format {fmt!r}; allowed: text, json")


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
        value = _number(r["value"] or "", path, line)
        weight = _number(r["weight"] or "", path, line)
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

TableArg = Annotated[
    Path,
    typer.Argument(help="CSV matrix of counts (no header), or a long CSV with a header."),
]
Alpha = Annotated[float, typer.Option("--alpha", help="Probability of adding a cycle.")]
Beta = Annotated[float, typer.Option("--beta", help="Probability of subtracting a cycle.")]
CyclesOpt = Annotated[
    Path | None,
    typer.Option(
        "--cycles",
        help="JSON list of cycles, in order (or the JSON of 'cyclic perturb'); default: the "
        "standard set for the table's shape.",
    ),
]
Skip = Annotated[str, typer.Option("--skip", help="Skip rule: zero or negative.")]
Format = Annotated[str, typer.Option("--format", help="text or json.")]


@cyclic_app.command("perturb")
def perturb(
    table: TableArg,
    alpha: Alpha = 0.25,
    beta: Beta = 0.25,
    cycles: CyclesOpt = None,
    skip: Skip = "zero",
    seed: Annotated[
        int | None, typer.Option(help="Seed, for reproducible runs (default: unpredictable).")
    ] = None,
    fmt: Format = "text",
) -> None:
    """Perturb a table and print it with the parameters to publish (cycles, alpha, beta)."""
    from tablesafe.mechanisms import cyclic_perturb

    check_format(fmt)
    data = read_table(table)
    cyc = _read_cycles(cycles, data.counts.shape) if cycles is not None else None
    res = cyclic_perturb(data.counts, alpha, beta, cycles=cyc, skip=skip, rng=seed)  # type: ignore[arg-type]
    if fmt == "json":
        typer.echo(json.dumps({"published": res.published()}, indent=1))
        return
    typer.echo("# perturbed table")
    typer.echo(format_table(data, res.table), nl=False)
    typer.echo(
        f"# published: alpha {res.alpha:g}, beta {res.beta:g}, gamma {res.gamma:g}; "
        f"{len(res.cycles)} cycles (below, in order); skip rule: {res.skip} "
        f"({res.published()['skip_rule']})"
    )
    for i, c in enumerate(res.cycles, start=1):
        typer.echo(f"# cycle {i}")
        typer.echo(
            format_table(CountTable(c), c) if c.ndim == 2 else format_table(data, c), nl=False
        )


@cyclic_app.command("posterior")
def posterior(
    table: Annotated[Path, typer.Argument(help="The published (perturbed) table, as for perturb.")],
    alpha: Alpha = 0.25,
    beta: Beta = 0.25,
    cycles: CyclesOpt = None,
    prior: Annotated[
        Path | None,
        typer.Option(
            "--prior",
            help="CSV prior per cell: dimension columns (row,col for a matrix), value, weight; "
            "unlisted values weigh 1. Default: uniform.",
        ),
    ] = None,
    skip: Skip = "zero",
    likelihood: Annotated[
        str,
        typer.Option(
            help="exact (the mechanism's likelihood) or slides (the convention behind the "
            "slides' printed numbers)."
        ),
    ] = "exact",
    tables: Annotated[
        bool, typer.Option("--tables", help="Also enumerate the possible original tables.")
    ] = False,
    fmt: Format = "text",
) -> None:
    """Posterior distribution of every original cell, given the published table and parameters."""
    from tablesafe.mechanisms import cyclic_posterior

    check_format(fmt)
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
        typer.echo(json.dumps(out, indent=1))
        return
    gamma = max(0.0, 1 - post.alpha - post.beta)
    typer.echo(
        f"# posterior: alpha {post.alpha:g}, beta {post.beta:g}, gamma {gamma:g}; skip rule "
        f"{post.skip}; likelihood {post.likelihood}; prior "
        f"{'from ' + str(prior) if prior else 'uniform'}"
    )
    extra = f", {len(post.tables)} distinct tables" if post.tables is not None else ""
    typer.echo(f"# {post.hypotheses:,} possible coin histories{extra}")
    mode = post.mode()
    for idx in np.ndindex(*post.published.shape):
        dist = "  ".join(f"{v}: {p:.2f}" for v, p in post.cell(idx).items())
        typer.echo(
            f"{cell_name(data, idx)} published {post.published[idx]}, mode {mode[idx]}: {dist}"
        )
