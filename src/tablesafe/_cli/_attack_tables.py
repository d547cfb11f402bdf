"""Command line: `tablesafe attack averaging` and `tablesafe attack zeros` (issue 25)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tablesafe._builder import TableBuilder
from tablesafe._cli import PATH, number, text_or_json
from tablesafe._cli._attack import attack_app
from tablesafe._cli._methods import METHODS, protection_from_options, protection_options
from tablesafe._cli._table import parse_where
from tablesafe._errors import RequestError
from tablesafe._protection import Protection as P
from tablesafe._protection import site_protection
from tablesafe._protection_limits import ProtectionMethod
from tablesafe._request import TableRequest
from tablesafe._settings import load_site_config
from tablesafe.catalog._dataset import Dataset
from tablesafe.state._open import open_state

if TYPE_CHECKING:
    from tablesafe._protection import Protection
    from tablesafe._settings import SiteConfig
    from tablesafe.catalog._dataset import Dataset

_METHODS_HELP = f"Comma-separated: {', '.join(m for m in METHODS if m != ProtectionMethod.NONE)}."


def _codes(text: str, what: str) -> list[str]:
    """``81..89`` or ``81,82,83`` (or both, comma-separated) as code texts."""
    out: list[str] = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        lo, dots, hi = part.partition("..")
        if dots:
            try:
                out.extend(str(c) for c in range(int(lo), int(hi) + 1))
            except ValueError:
                raise RequestError(
                    f"{what} {part!r}: a range is LO..HI with whole numbers, e.g. 81..89"
                ) from None
        else:
            out.append(part)
    if not out:
        raise RequestError(f"{what} lists no category; give codes such as 81..89 or 1,2")
    return out


def _protections(
    data_dir: Path, config: Path | None, method: str, seeds: str, options: dict[str, Any]
) -> list[tuple[str, Protection, SiteConfig | None]]:
    """The protections to attack: the site's for this dataset, or one per ``--method``."""
    import os
    import secrets

    if config is not None:
        site = load_site_config(config)
        served = site.dataset_at(data_dir)
        return [(f"site {served.name}", site_protection(served, site), site)]
    # The attack is the data owner's experiment: without a configured secret a
    # fresh random one stands in (keyed seeds behave the same for any secret).
    os.environ.setdefault("TABLESAFE_SECRET", secrets.token_hex(32))
    out: list[tuple[str, Protection, SiteConfig | None]] = []
    for m in [m.strip() for m in method.split(",") if m.strip()]:
        prot = protection_from_options(m, seeds=seeds, **options)
        out.append((f"{m}/{prot.seeds}", prot, None))
    return out


@contextmanager
def _attacked(
    dataset: Dataset, protections: list[tuple[str, Protection, SiteConfig | None]]
) -> Iterator[list[tuple[str, Protection, Any, Any]]]:
    """Each protection's name, the protection, its build and the unprotected build.

    A ``dp-marginals`` site's tables are read from the release its state store
    keeps, the one its server publishes from (made and stored there if the
    server has not made it yet).
    """
    with ExitStack() as stack:
        out = []
        for name, prot, site in protections:
            builder = TableBuilder(dataset, prot)
            if site is not None and prot.fixed_budget:
                builder.release_store = stack.enter_context(closing(open_state(site)))
            out.append((name, prot, builder.build, TableBuilder(dataset, P(None)).build))
        yield out


@attack_app.command("averaging")
@click.argument("data_dir", type=PATH, help="Dataset folder (with catalog.toml).")
@click.option("--variable", required=True, help="Variable of the target cells, e.g. AGE.")
@click.option("--targets", required=True, help="Target categories, e.g. 81..89 or 1,2.")
@click.option("--pad", required=True, help="Categories that widen the universe, e.g. 20..60.")
@click.option("--second", required=True, help="The second dimension, e.g. SEX.")
@click.option("--universe", multiple=True, help="Other conditions: VAR=CODE,CODE (repeatable).")
@click.option("--grouping-of", default=None, help="Variable of one-category groupings.")
@click.option("--magnitude", default=None, help="Continuous variable whose sums to average.")
@click.option(
    "--tables", type=number("attack.tables"), default=250, help="How many equivalent tables to ask."
)
@click.option("--method", default="ckm,dp,q-records", help=_METHODS_HELP)
@click.option("--seeds", default="keyed", help="cellkey, keyed or dynamic (the before).")
@protection_options("epsilon", "cap", "rate")
@click.option("--config", type=PATH, default=None, help="Attack the protection a site fixes.")
@click.option("--seed", type=number("seed"), default=0, help="Seed of the widening and the order.")
@text_or_json
def averaging(
    data_dir: Path,
    variable: str,
    targets: str,
    pad: str,
    second: str,
    universe: tuple[str, ...],
    grouping_of: str | None,
    magnitude: str | None,
    tables: int,
    method: str,
    seeds: str,
    epsilon: float,
    cap: int,
    rate: float,
    config: Path | None,
    seed: int,
    fmt: str,
) -> None:
    """Average the target cells over equivalent tables (docs/attacks.md, averaging)."""
    import numpy as np

    # Start-up: the attacks load SciPy and their solvers only when one runs.
    from tablesafe.attacks import averaging_attack

    dataset = Dataset.open(data_dir)
    cat = dataset.catalog
    var = cat.variable(variable)
    target_codes = [var.coerce(c) for c in _codes(targets, "--targets")]
    pad_codes = [var.coerce(c) for c in _codes(pad, "--pad") if var.coerce(c) not in target_codes]
    grouping_codes = list(cat.variable(grouping_of).codes) if grouping_of else []
    if magnitude is not None:
        cat.magnitude(magnitude)
    options = {"epsilon": epsilon, "cap": cap, "rate": rate}
    protections = _protections(data_dir, config, method, seeds, options)
    with _attacked(dataset, protections) as attacked:
        results = [
            averaging_attack(
                build,
                truth,
                # A release's figures have no likelihood; each is taken as published.
                None if prot.fixed_budget else prot.effective_mechanism(),
                method=name,
                variable=variable,
                targets=target_codes,
                pad=pad_codes,
                universe=parse_where(list(universe)),
                second=second,
                grouping_of=grouping_of,
                grouping_codes=grouping_codes,
                magnitude=magnitude,
                tables=tables,
                rng=np.random.default_rng(seed),
            )
            for name, prot, build, truth in attacked
        ]
    if fmt == "json":
        click.echo(json.dumps([r.to_dict() for r in results], indent=1))
        return
    for r in results:
        click.echo(
            f"{r.method}: {r.tables} tables, {r.refused} refused; of {len(r.cells)} target "
            f"cells, {r.exact_first} estimated exactly from the first table and {r.exact_all} "
            f"from all; at most {r.max_distinct} distinct values per cell"
        )
        if magnitude is not None:
            worst = max((c.sum_distinct for c in r.cells), default=0)
            click.echo(f"  sum:{magnitude}: at most {worst} distinct values per cell")


@attack_app.command("zeros")
@click.argument("data_dir", type=PATH, help="Dataset folder (with catalog.toml).")
@click.option(
    "--variables",
    default=None,
    help="Comma-separated variables whose 3-way tables are asked (default: every source variable).",
)
@click.option(
    "--tables",
    type=number("attack.tables"),
    default=60,
    help="How many 3-way tables to ask at most.",
)
@click.option("--exclude", default=None, help="Variable for the definition attack, e.g. EDUC.")
@click.option("--base", default=None, help="Its target table, e.g. AGE*SEX.")
@click.option("--universe", multiple=True, help="Its universe: VAR=CODE,CODE (repeatable).")
@click.option("--method", default="dp", help=_METHODS_HELP)
@click.option("--seeds", default="keyed", help="cellkey, keyed or dynamic.")
@protection_options("epsilon", "cap", "rate")
@click.option("--config", type=PATH, default=None, help="Attack the protection a site fixes.")
@text_or_json
def zeros(
    data_dir: Path,
    variables: str | None,
    tables: int,
    exclude: str | None,
    base: str | None,
    universe: tuple[str, ...],
    method: str,
    seeds: str,
    epsilon: float,
    cap: int,
    rate: float,
    config: Path | None,
    fmt: str,
) -> None:
    """Tell empty from one-record cells: shares against the stated (epsilon, delta)."""
    import itertools

    # Start-up: the attacks load SciPy and their solvers only when one runs.
    from tablesafe.attacks import definition_attack, zero_attack

    if (exclude is None) != (base is None):
        raise RequestError("--exclude and --base go together (the definition attack)")
    dataset = Dataset.open(data_dir)
    cat = dataset.catalog
    names = (
        [v.strip() for v in variables.split(",") if v.strip()]
        if variables
        else [v.name for v in cat.source_variables if len(v.codes) <= 20]
    )
    for n in names:
        cat.variable(n)
    requests = [TableRequest(c) for c in itertools.combinations(names, 3)][:tables]
    if not requests:
        raise RequestError("--variables needs at least three variables")
    options = {"epsilon": epsilon, "cap": cap, "rate": rate}
    out = []
    with _attacked(dataset, _protections(data_dir, config, method, seeds, options)) as attacked:
        for name, prot, build, truth in attacked:
            figures = prot.describe()
            res: dict[str, Any] = zero_attack(
                build,
                truth,
                requests,
                method=name,
                epsilon=float(figures.get("epsilon", float("inf"))),
                delta=float(figures.get("delta", 1.0)),
            ).to_dict()
            if exclude is not None and base is not None:
                dims = tuple(d.strip() for d in base.split("*") if d.strip())
                target = TableRequest(dims, universe=parse_where(list(universe)))
                codes = list(cat.variable(exclude).codes)
                res["definitions"] = definition_attack(
                    build, truth, target, variable=exclude, codes=codes, method=name
                ).to_dict()
            out.append(res)
    if fmt == "json":
        click.echo(json.dumps(out, indent=1))
        return
    for r in out:
        click.echo(
            f"{r['method']}: stated epsilon {r['epsilon']:g}, delta {r['delta']:g}; "
            f"{r['empty_published_nonzero']} of {r['empty_cells']} empty cells and "
            f"{r['one_record_published_nonzero']} of {r['one_record_cells']} one-record cells "
            f"published non-zero; the stated figures "
            f"{'hold' if r['stated_figures_hold'] else 'DO NOT hold'}"
        )
        d = r.get("definitions")
        if d:
            click.echo(
                f"  asked under {d['definitions']} definitions: {d['empty_called_nonempty']} of "
                f"{d['empty_cells']} empty and {d['one_record_called_nonempty']} of "
                f"{d['one_record_cells']} one-record cells called non-empty"
            )
