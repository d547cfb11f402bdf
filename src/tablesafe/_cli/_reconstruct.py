"""Command line: `tablesafe attack reconstruct` and `tablesafe audit reconstruct`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tablesafe._cli import PATH, number, text_or_json
from tablesafe._cli._attack import attack_app
from tablesafe._cli._methods import protection_from_options, protection_options
from tablesafe._cli._server import audit_app
from tablesafe._errors import FormatError, ParameterError, RequestError
from tablesafe._protection import Protection
from tablesafe._protection_limits import ProtectionMethod
from tablesafe._seeds import SeedScheme
from tablesafe._settings import load_site_config
from tablesafe.catalog._dataset import Dataset
from tablesafe.state import open_state

if TYPE_CHECKING:
    from tablesafe._request import TableRequest
    from tablesafe.attacks._reconstruct import Progress
    from tablesafe.catalog._dataset import Dataset

#: Rows of the text report: (label, key).
_ROWS = (
    ("tables", "tables"),
    ("cells of the full cross-classification", "cells"),
    ("records", "records"),
    ("sample-unique records", "uniques"),
    ("cells pinned exactly", "cells_exact_share"),
    ("cells holding records pinned", "nonzero_cells_exact_share"),
    ("records in pinned cells", "records_exact_share"),
    ("sample uniques re-identified", "uniques_exact_share"),
    ("cells undecided (time limit)", "undecided"),
    ("seconds", "seconds"),
)

#: Rows of the best-guess block: (label, key).
_GUESS_ROWS = (
    ("cells exactly right", "cells_exact_share"),
    ("records in exactly-right cells", "records_exact_share"),
    ("sample uniques guessed as uniques", "uniques_exact_share"),
    ("cells guessed to hold one record", "uniques_claimed"),
    ("precision of those", "uniques_precision"),
)


@contextmanager
def _progress() -> Iterator[Progress]:
    from rich.console import Console
    from rich.progress import Progress as Bar

    with Bar(console=Console(stderr=True), transient=True) as bar:
        tasks: dict[str, Any] = {}

        def tick(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield tick


def _show(value: Any, key: str) -> str:
    if key.endswith(("_share", "_precision")):
        return f"{100 * float(value):.1f}%"
    return str(value)


def _report(result: dict[str, Any], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Table(title=title)
    out.add_column("measure")
    out.add_column(str(result["method"]), justify="right")
    out.add_column("unprotected", justify="right")
    plain = result["unprotected"]
    for label, key in _ROWS:
        mine, theirs = _show(result[key], key), _show(plain[key], key)
        if key + "_upper" in result and not result["complete"]:
            mine += f" to {_show(result[key + '_upper'], key)}"
        if key + "_upper" in plain and not plain["complete"]:
            theirs += f" to {_show(plain[key + '_upper'], key)}"
        out.add_row(label, mine, theirs)
    Console(width=120).print(out)
    _report_guess(result, plain)
    if not (result["complete"] and plain["complete"]):
        click.echo(
            "The time limit stopped the attack: shares are given as a range (cells decided "
            "pinned, to pinned or undecided).",
            err=True,
        )


def _report_guess(result: dict[str, Any], plain: dict[str, Any]) -> None:
    """The best guess's scores, next to the unprotected guess's and the baseline's."""
    from rich.console import Console
    from rich.table import Table

    mine, theirs = result.get("putative") or {}, plain.get("putative") or {}
    if not mine.get("found"):
        return
    base = mine["baseline"]
    title = (
        "Best guess: the most probable integer table under the ptable"
        if mine.get("objective") == "posterior"
        else "Best guess: the integer table closest to every published figure (L1)"
    )
    out = Table(title=title)
    out.add_column("measure")
    out.add_column(str(result["method"]), justify="right")
    out.add_column("unprotected", justify="right")
    out.add_column("one-way margins only", justify="right")
    for label, key in _GUESS_ROWS:
        shown = _show(theirs[key], key) if theirs.get("found") else "-"
        out.add_row(label, _show(mine[key], key), shown, _show(base[key], key))
    Console(width=120).print(out)
    click.echo(f"Cells holding one record: {100 * float(mine['base_rate']):.1f}% of all cells.")
    ranked = mine.get("ranked_precision")
    if ranked:
        click.echo(
            f"Claimed uniques ranked by recurrence over {ranked['runs']} near-optimal tables: "
            f"precision {100 * ranked['top_1']:.0f}% in the top 1%, "
            f"{100 * ranked['top_10']:.0f}% in the top 10%, {100 * ranked['all']:.0f}% in all "
            f"{ranked['claimed']}."
        )
    if not mine.get("optimal"):
        click.echo("The time limit stopped the best guess before it was proven closest.", err=True)


@attack_app.command("reconstruct")
@click.argument("data_dir", type=PATH, help="Dataset folder (with catalog.toml).")
@click.option(
    "--tables",
    type=PATH,
    default=None,
    help="JSON file: a list of table requests in the HTTP API's format.",
)
@click.option(
    "--all-k-way",
    type=number("attack.all_k_way"),
    default=None,
    help="Instead of --tables: every K-way table of --variables.",
)
@click.option("--variables", default=None, help="Variables of --all-k-way, e.g. AGEGRP,SEX,REGION.")
@click.option(
    "--method",
    default="ckm",
    help="Protection: ckm, dp, pram, q, q-records, ptable:FILE, none.",
)
@protection_options(
    "epsilon",
    "cap",
    "rate",
    "max-deviation",
    "variance",
    "seeds",
    "secret-env",
    "additivity",
)
@click.option(
    "--min-cell-size",
    type=number("attack.min_cell_size"),
    default=0,
    help="Small-cell rule: protected counts below this are suppressed.",
)
@click.option(
    "--time-limit",
    type=number("attack.time_limit"),
    default=60.0,
    help="Seconds for each attack; partial bounds after that.",
)
@click.option(
    "--ranked",
    type=number("attack.ranked"),
    default=0,
    help="Perturbed re-solves ranking the best guess's uniques by recurrence (0: none).",
)
@text_or_json
def reconstruct(
    data_dir: Path,
    tables: Path | None,
    all_k_way: int | None,
    variables: str | None,
    method: str,
    epsilon: float,
    cap: int,
    rate: float,
    max_deviation: int,
    variance: float,
    seeds: str,
    secret_env: str | None,
    additivity: str,
    min_cell_size: int,
    time_limit: float,
    ranked: int,
    fmt: str,
) -> None:
    """Rebuild the full cross-classification from published tables (integer programming)."""
    import os
    import secrets

    # Start-up: the attacks load SciPy and their solvers only when one runs.
    from tablesafe.attacks._reconstruct import reconstruction_attack

    _check_time_limit(time_limit)
    if min_cell_size < 0:
        raise ParameterError(f"--min-cell-size must be 0 (off) or more, not {min_cell_size}")
    if not 0 <= ranked <= 1000:
        raise ParameterError(f"--ranked must be 0 (off) to 1000 re-solves, not {ranked}")
    if (tables is None) == (all_k_way is None):
        raise RequestError("give the published tables: either --tables FILE or --all-k-way K")
    dataset = Dataset.open(data_dir)
    requests = _published_requests(dataset, tables, all_k_way, variables)
    # The attack is the data owner's experiment: without a configured secret a
    # fresh random one stands in (dynamic seeds behave the same for any secret).
    if (seeds == SeedScheme.DYNAMIC or method == ProtectionMethod.Q_RECORDS) and secret_env is None:
        os.environ.setdefault("TABLESAFE_SECRET", secrets.token_hex(32))
    protection = protection_from_options(
        method,
        epsilon=epsilon,
        cap=cap,
        rate=rate,
        max_deviation=max_deviation,
        variance=variance,
        seeds=seeds,
        secret_env=secret_env,
        additivity=additivity,
    )
    with _progress() as tick:
        result = reconstruction_attack(
            dataset,
            requests,
            protection,
            min_cell_size=min_cell_size,
            time_limit=time_limit,
            progress=tick,
            name=method,
            ranked=ranked,
        )
        plain = reconstruction_attack(
            dataset, requests, Protection(None), time_limit=time_limit, progress=tick, name="none"
        )
    out = {**result.as_dict(), "unprotected": plain.as_dict()}
    if fmt == "json":
        click.echo(json.dumps(out, indent=1))
        return
    _report(out, f"Reconstruction of {' x '.join(result.variables)} from {len(requests)} tables")


def _published_requests(
    dataset: Dataset, tables: Path | None, all_k_way: int | None, variables: str | None
) -> list[TableRequest]:
    """The attacked tables' requests: read from ``--tables``, or every ``--all-k-way`` table.

    Raises:
        RequestError: for an unreadable file, or ``--all-k-way`` without ``--variables``.
        FormatError: for a file that is not JSON.
    """
    # Start-up: the attacks load SciPy and their solvers only when one runs.
    from tablesafe.attacks._reconstruct import all_k_way_requests
    from tablesafe.attacks._reconstruct._cumulative import requests_from_bodies

    if tables is not None:
        try:
            bodies = json.loads(Path(tables).read_text())
        except OSError as exc:
            raise RequestError(f"cannot read --tables {tables}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise FormatError(
                f"--tables {tables} is not JSON: {exc.msg} at line {exc.lineno}"
            ) from None
        return requests_from_bodies(bodies, where=f"--tables {tables}")
    if not variables:
        raise RequestError("--all-k-way needs --variables, e.g. --variables AGEGRP,SEX,REGION")
    assert all_k_way is not None
    return all_k_way_requests(dataset.catalog, variables.split(","), all_k_way)


@audit_app.command("reconstruct")
@click.option("--config", type=PATH, required=True, help="Site configuration (TOML).")
@click.option("--dataset", required=True, help="The dataset (its name in the configuration).")
@click.option(
    "--time-limit",
    type=number("attack.time_limit"),
    default=60.0,
    help="Seconds for each attack; partial bounds after that.",
)
@click.option(
    "--store/--no-store",
    default=True,
    help="Store the result in the audit log (the figure over time).",
)
@text_or_json
def audit_reconstruct(config: Path, dataset: str, time_limit: float, store: bool, fmt: str) -> None:
    """Attack every table the audit log says was served for a dataset, across all keys."""
    # Start-up: the attacks load SciPy and their solvers only when one runs.
    from tablesafe.attacks._reconstruct._cumulative import audit_reconstruction

    _check_time_limit(time_limit)
    site = load_site_config(config)
    log = open_state(site)
    try:
        with _progress() as tick:
            out = audit_reconstruction(
                site, log, dataset, time_limit=time_limit, progress=tick, store=store
            )
    finally:
        log.close()
    if fmt == "json":
        click.echo(json.dumps(out, indent=1))
        return
    _report(
        out,
        f"Reconstruction of {dataset} from the {out['tables']} tables served until "
        f"{out['served_until']}",
    )


def _check_time_limit(time_limit: float) -> None:
    """The time limit both reconstruction commands take."""
    if not time_limit > 0:
        raise ParameterError(
            f"--time-limit must be a positive number of seconds, not {time_limit:g}"
        )
