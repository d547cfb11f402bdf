"""Command line: `tablesafe attack sliver`, `weighted`, `guard` and `refusals`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tablesafe._builder import TableBuilder
from tablesafe._cli import PATH, app, number, text_or_json
from tablesafe._cli._methods import METHODS, protection_from_options, protection_options
from tablesafe._cli._table import parse_where
from tablesafe._errors import RequestError
from tablesafe._protection_limits import RANGES, ProtectionMethod
from tablesafe._request import TableRequest
from tablesafe._seeds import SeedScheme
from tablesafe._settings import load_site_config
from tablesafe.catalog._dataset import DataFormat, Dataset

if TYPE_CHECKING:
    from tablesafe._protection import Protection
    from tablesafe._request import TableRequest
    from tablesafe.catalog._dataset import Dataset


@app.group("attack", help="Attack simulations against the protection.", no_args_is_help=True)
def attack_app() -> None:
    """Attack simulations against the protection."""


@attack_app.command("sliver")
@click.argument("data_dir", type=PATH, help="Dataset folder (with catalog.toml).")
@click.option("--table", required=True, help="The table, e.g. AGEGRP*SEX.")
@click.option("--universe", multiple=True, help="Subgroup A: VAR=CODE,CODE (repeatable).")
@click.option(
    "--method",
    default="none,ckm,dp,q,q-records",
    help=f"Comma-separated: {', '.join(METHODS)}.",
)
@protection_options("epsilon", "cap", "rate")
@click.option(
    "--limit", type=number("attack.limit"), default=None, help="Attack a random sample of records."
)
@click.option("--seed", type=number("seed"), default=0, help="Seed of that sample.")
@text_or_json
def sliver(
    data_dir: Path,
    table: str,
    universe: tuple[str, ...],
    method: str,
    epsilon: float,
    cap: int,
    rate: float,
    limit: int | None,
    seed: int,
    fmt: str,
) -> None:
    """Difference the table in A and in A minus each record (Li & Krenzke 2016)."""
    import os
    import secrets

    from rich.console import Console
    from rich.progress import Progress, TaskID
    from rich.table import Table

    # Start-up: the attacks load SciPy and their solvers only when one runs.
    from tablesafe.attacks import sliver_attack

    dims = [d.strip() for d in table.split("*") if d.strip()]
    dataset = Dataset.open(data_dir)
    # The attack is the data owner's experiment: without a configured secret a
    # fresh random one stands in (dynamic seeds behave the same for any secret).
    os.environ.setdefault("TABLESAFE_SECRET", secrets.token_hex(32))
    results = []
    with Progress(console=Console(stderr=True), transient=True) as progress:
        for m in [m.strip() for m in method.split(",") if m.strip()]:
            seeds = SeedScheme.DYNAMIC if m == ProtectionMethod.Q_RECORDS else SeedScheme.CELLKEY
            prot = protection_from_options(m, epsilon=epsilon, cap=cap, rate=rate, seeds=seeds)
            task = progress.add_task(f"{m}: differencing pairs", total=None)

            def tick(done: int, total: int, task: TaskID = task) -> None:
                progress.update(task, completed=done, total=total)

            results.append(
                sliver_attack(
                    dataset,
                    parse_where(list(universe)),
                    dims,
                    prot,
                    limit=limit,
                    rng=seed,
                    progress=tick,
                    name=m,
                )
            )
    if fmt == "json":
        click.echo(json.dumps([r.as_dict() for r in results], indent=1))
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


@attack_app.command("weighted")
@click.argument("data_dir", type=PATH, help="Dataset folder (with catalog.toml).")
@click.option("--table", required=True, help="The table, e.g. AGEGRP*REGION*SEX.")
@click.option("--universe", multiple=True, help="Universe: VAR=CODE,CODE (repeatable).")
@click.option(
    "--method",
    default="ckm,dp,pram,q,q-records",
    help="Comma-separated: ckm, dp, pram, q, q-records, ptable:FILE.",
)
@protection_options("epsilon", "cap", "rate")
@click.option(
    "--weight-noise",
    type=number("protection.weight_noise"),
    default=0.5,
    help="Noise on weighted figures, in mean weights.",
)
@click.option("--rounding", default="1", help="Rounding of weighted figures.")
@click.option(
    "--integer-weights",
    is_flag=True,
    help="Attack a copy of the data with weights rounded to integers.",
)
@text_or_json
def weighted(
    data_dir: Path,
    table: str,
    universe: tuple[str, ...],
    method: str,
    epsilon: float,
    cap: int,
    rate: float,
    weight_noise: float,
    rounding: str,
    integer_weights: bool,
    fmt: str,
) -> None:
    """Try to recover true counts from published weighted figures (docs/weighted.md)."""
    import os
    import secrets
    import tempfile

    dims = tuple(d.strip() for d in table.split("*") if d.strip())
    dataset = Dataset.open(data_dir)
    request = TableRequest(dims, universe=parse_where(list(universe)), statistic="both")
    request.bind(dataset.catalog)
    if dataset.catalog.weight is None:
        raise RequestError(f"dataset {dataset.name} has no weight column: nothing to attack")
    os.environ.setdefault("TABLESAFE_SECRET", secrets.token_hex(32))
    with tempfile.TemporaryDirectory() as tmp:
        if integer_weights:
            dataset = _with_integer_weights(dataset, Path(tmp))
        results = []
        for m in [m.strip() for m in method.split(",") if m.strip()]:
            prot = protection_from_options(
                m,
                epsilon=epsilon,
                cap=cap,
                rate=rate,
                seeds=SeedScheme.DYNAMIC if m == ProtectionMethod.Q_RECORDS else SeedScheme.CELLKEY,
                weight_noise=weight_noise,
                rounding=rounding,
            )
            results.append({"method": m, **_weighted_row(dataset, request, prot)})
    if fmt == "json":
        click.echo(json.dumps(results, indent=1))
        return
    _print_weighted(results, dims)


def _weighted_row(dataset: Dataset, request: TableRequest, prot: Protection) -> dict[str, object]:
    """The weighted-figures attack on one protection, and on seed 000's eqs. 4 and 5."""
    from dataclasses import replace

    # Start-up: the attacks load SciPy and their solvers only when one runs.
    from tablesafe.attacks import mechanism_support, weighted_attack
    from tablesafe.attacks._weighted import seed000_figures

    builder = TableBuilder(dataset, prot)
    published = builder.build(request)
    truth = builder.tabulate(request).aggregates.n
    assert published.counts is not None
    support = mechanism_support(prot, int(published.counts.max()))
    mean_weight = builder.overall_mean_weights()[0]
    res = weighted_attack(published, truth, support=support, mean_weight=mean_weight)
    row: dict[str, object] = {**res.as_dict()}
    # For comparison: the same attack on seed 000's eqs. 4 and 5 at full precision.
    agg = builder.tabulate(request).aggregates
    assert agg.weight_sum is not None
    for eq in (4, 5):
        figures = seed000_figures(agg.weight_sum, truth, published.counts, mean_weight, eq)
        leaky = weighted_attack(
            replace(published, weighted=figures),
            truth,
            support=support,
            mean_weight=mean_weight,
        )
        row[f"eq{eq}_best"] = leaky.best
    return row


def _print_weighted(results: list[dict[str, object]], dims: tuple[str, ...]) -> None:
    """The text report: one row per protection, the percent of cells each guess got right."""
    from rich.console import Console
    from rich.table import Table

    out = Table(title=f"Weighted-figures attack on {'*'.join(dims)} (percent of cells right)")
    cols = (
        "method",
        "cells",
        "baseline",
        "residue",
        "cell_mean",
        "continuous",
        "best",
        "eq4_best",
        "eq5_best",
    )
    for col in cols:
        out.add_column(col, justify="left" if col == "method" else "right")
    for r in results:
        out.add_row(*(str(r[c]) for c in cols))
    Console(width=140).print(out)


def _with_integer_weights(dataset: Dataset, folder: Path) -> Dataset:
    """A copy of a dataset whose weights (and replicate weights) are rounded to integers."""
    import shutil

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    cat = dataset.catalog
    names = [cat.weight] if cat.weight else []
    names += list(cat.replicates.columns) if cat.replicates else []
    data = pq.read_table(dataset.path) if dataset.format == DataFormat.PARQUET else None
    if data is None:
        import pyarrow.csv as pacsv

        data = pacsv.read_csv(dataset.path)
    for name in names:
        i = data.column_names.index(name)
        data = data.set_column(i, name, pc.round(data.column(name).cast(pa.float64())))
    shutil.copytree(dataset.path.parent, folder / "data", dirs_exist_ok=True)
    target = folder / "data" / dataset.path.name
    if dataset.format == DataFormat.PARQUET:
        pq.write_table(data, target)
    else:
        import pyarrow.csv as pacsv

        pacsv.write_csv(data, target)
    return Dataset.open(folder / "data")


def _guarded_site(data_dir: Path, config: Path | None, m: int | None, method: str, tmp: str) -> Any:
    """A site serving DATA_DIR under two names, its guard state in ``tmp``.

    With ``--config``: that site's settings for the dataset (its audit database is
    not touched); else ``--method`` with keyed seeds and the guard at ``m``.
    """
    import os
    import secrets

    base: dict[str, Any] = {"base": str(Path.cwd())}
    if config is not None:
        site = load_site_config(config)
        settings = site.dataset_at(data_dir).model_dump()
        settings["path"] = str(Path(data_dir).resolve())
        base = {"base": site.base, "engine": site.engine.model_dump()}
    else:
        os.environ.setdefault("TABLESAFE_SECRET", secrets.token_hex(32))
        protection: dict[str, Any] = {"method": method}
        if method != ProtectionMethod.NONE:
            protection |= {"seeds": SeedScheme.KEYED, "secret_env": "TABLESAFE_SECRET"}
        settings = {"path": str(Path(data_dir).resolve()), "protection": protection, "rules": {}}
    if m is not None:
        settings["rules"] = {**settings.get("rules", {}), "sliver_min_difference": m}
    server = {
        "title": "attack",
        "audit_db": str(Path(tmp) / "audit.sqlite"),
        "cache_tables": 0,
        # The most the setting allows: the attacker's tables are never rate limited.
        "rate_limit_per_minute": int(RANGES["server.rate_limit_per_minute"].high),
    }
    datasets = [{**settings, "name": "attacked"}, {**settings, "name": "attacked_again"}]
    return load_site_config(data={**base, "server": server, "datasets": datasets})


def _guard_ask(service: Any) -> Any:
    # Start-up: the service (DuckDB, pydantic) loads only when a site is attacked.
    from tablesafe.service import Principal

    def ask(name: str, request: Any, key: str) -> Any:
        return service.table(Principal(key, "user", 1_000_000_000), name, request)

    return ask


_GUARD_ATTACKS = ("concurrent", "names", "slices", "children")


@attack_app.command("guard")
@click.argument("data_dir", type=PATH, help="Dataset folder (with catalog.toml).")
@click.option(
    "--attacks",
    default=",".join(_GUARD_ATTACKS),
    help="Comma-separated: concurrent, names, slices, children.",
)
@click.option(
    "--config", type=PATH, default=None, help="Attack this site's settings for the dataset."
)
@click.option(
    "--min-difference",
    type=number("attack.min_difference"),
    default=None,
    help="The guard's m (default: 10).",
)
@click.option(
    "--pairs", type=number("attack.pairs"), default=100, help="Sliver pairs (concurrent, names)."
)
@click.option(
    "--tries", type=number("attack.tries"), default=20, help="Slivers tried (slices, children)."
)
@text_or_json
def guard(
    data_dir: Path,
    attacks: str,
    config: Path | None,
    min_difference: int | None,
    pairs: int,
    tries: int,
    fmt: str,
) -> None:
    """Try to publish slivers past the sliver guard of a site (docs/attacks.md)."""
    import tempfile

    # Start-up: the attacks load SciPy and their solvers only when one runs.
    from tablesafe.attacks._guard import (
        children_attack,
        concurrent_attack,
        names_attack,
        slices_attack,
    )

    # Start-up: the service (DuckDB, pydantic) loads only when a site is attacked.
    from tablesafe.service._service import TableService

    chosen = [a.strip() for a in attacks.split(",") if a.strip()]
    unknown = sorted(set(chosen) - set(_GUARD_ATTACKS))
    if unknown:
        raise RequestError(f"unknown attack {unknown[0]!r}; allowed: {', '.join(_GUARD_ATTACKS)}")
    dataset = Dataset.open(data_dir)
    results: list[Any] = []
    m = 0
    for kind in chosen:
        # Each attack against a site of its own (an empty guard store), so that one
        # attack's tables do not refuse another's.
        with tempfile.TemporaryDirectory() as tmp:
            site = _guarded_site(data_dir, config, min_difference, "ckm", tmp)
            m = site.datasets[0].rules.sliver_min_difference
            service = TableService(site)
            ask = _guard_ask(service)
            try:
                if kind == "concurrent":
                    results += concurrent_attack(ask, dataset, "attacked", m=m, pairs=pairs)
                elif kind == "names":
                    names = ("attacked", "attacked_again")
                    results.append(names_attack(ask, dataset, names, m=m, pairs=pairs // 2))
                elif kind == "slices":
                    results.append(slices_attack(ask, dataset, "attacked", m=m, tries=tries))
                else:
                    results.append(children_attack(ask, dataset, "attacked", m=m, tries=tries))
            finally:
                service.close()
    if fmt == "json":
        click.echo(json.dumps([r.as_dict() for r in results], indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    out = Table(title=f"Attacks on the sliver guard (m = {m})")
    for col in ("attack", "slivers tried", "published"):
        out.add_column(col, justify="left" if col == "attack" else "right")
    for r in results:
        out.add_row(r.attack, str(r.tries), str(r.published))
    Console().print(out)


@attack_app.command("refusals")
@click.argument("data_dir", type=PATH, help="Dataset folder (with catalog.toml).")
@click.option(
    "--config", type=PATH, default=None, help="Attack this site's settings for the dataset."
)
@click.option("--method", default="ckm", help="Without --config: ckm, dp, q, q-records or none.")
@click.option(
    "--min-difference",
    type=number("attack.min_difference"),
    default=None,
    help="The guard's m (default: 10).",
)
@click.option(
    "--tables",
    type=number("attack.tables"),
    default=10,
    help="2-way tables whose zeros are probed.",
)
@click.option("--seed", type=number("seed"), default=0, help="Seed of the tables' choice.")
@text_or_json
def refusals(
    data_dir: Path,
    config: Path | None,
    method: str,
    min_difference: int | None,
    tables: int,
    seed: int,
    fmt: str,
) -> None:
    """Tell cells published as 0 from empty ones by the guard's refusals (docs/attacks.md)."""
    import tempfile

    # Start-up: the attacks load SciPy and their solvers only when one runs.
    from tablesafe.attacks._guard import refusal_zeros
    from tablesafe.service._service import TableService

    dataset = Dataset.open(data_dir)
    with tempfile.TemporaryDirectory() as tmp:
        site = _guarded_site(data_dir, config, min_difference, method, tmp)
        m = site.datasets[0].rules.sliver_min_difference
        service = TableService(site)
        try:
            res = refusal_zeros(
                _guard_ask(service), dataset, "attacked", m=m, tables=tables, rng=seed
            )
        finally:
            service.close()
    if fmt == "json":
        click.echo(json.dumps(res.as_dict(), indent=1))
        return

    def pct(a: int, b: int) -> str:
        return f"{a} of {b} ({100.0 * a / b:.1f}%)" if b else "0 of 0"

    click.echo(f"cells published as 0 and probed: {res.zeros}")
    click.echo(f"  holding 1..{m - 1} records, shown non-empty by a refusal: "
               f"{pct(res.hidden_refused, res.hidden)}")  # fmt: skip
    click.echo(f"  empty, refused all the same: {pct(res.empty_refused, res.empty)}")
