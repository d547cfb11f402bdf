"""Command line: `tablesafe attack groups` (issue 37: a merged group minus a published cell)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tablesafe._cli import PATH, number, text_or_json
from tablesafe._cli._attack import _guard_ask, _guarded_site, attack_app
from tablesafe._cli._table import parse_where
from tablesafe._errors import RequestError
from tablesafe.catalog._dataset import Dataset

if TYPE_CHECKING:
    from tablesafe.catalog._catalog import Code
    from tablesafe.catalog._dataset import Dataset

_VARIANTS = ("group", "group-2d", "merged-universe", "hierarchy")


@attack_app.command("groups")
@click.argument("data_dir", type=PATH, help="Dataset folder (with catalog.toml).")
@click.option("--variable", default="AGE", help="The attacked variable (default: AGE).")
@click.option(
    "--second", default="SEX", help="The second variable of group-2d and merged-universe."
)
@click.option("--by", "by", default="REGION", help="One universe per category of this variable.")
@click.option("--universe", multiple=True, help="Conditions of every universe: VAR=CODES.")
@click.option(
    "--variants", default=",".join(_VARIANTS), help=f"Comma-separated: {', '.join(_VARIANTS)}."
)
@click.option("--method", default="ckm", help="Without --config: ckm, dp, q or q-records.")
@click.option("--config", type=PATH, default=None, help="Attack this site's settings.")
@click.option(
    "--min-difference",
    type=number("attack.min_difference"),
    default=None,
    help="The site's m (0: no account).",
)
@click.option("--partners", type=number("attack.partners"), default=19, help="Partners per target.")
@text_or_json
def groups(
    data_dir: Path,
    variable: str,
    second: str,
    by: str,
    universe: tuple[str, ...],
    variants: str,
    method: str,
    config: Path | None,
    min_difference: int | None,
    partners: int,
    fmt: str,
) -> None:
    """Recover small counts by a merged group minus a published cell (docs/attacks.md)."""
    import pandas as pd

    chosen = [v.strip() for v in variants.split(",") if v.strip()]
    unknown = sorted(set(chosen) - set(_VARIANTS))
    if unknown:
        raise RequestError(f"unknown variant {unknown[0]!r}; allowed: {', '.join(_VARIANTS)}")
    dataset = Dataset.open(data_dir)
    cat = dataset.catalog
    conditions = {
        k: [cat.variable(k).coerce(c) for c in v] for k, v in parse_where(list(universe)).items()
    }
    universes = [{by: [code], **conditions} for code in cat.variable(by).codes]
    frame = (
        pd.read_parquet(dataset.path) if dataset.format == "parquet" else pd.read_csv(dataset.path)
    )
    results = [
        _one(data_dir, config, min_difference, method, variant, dataset, frame, universes,
             variable=variable, second=second, partners=partners)
        for variant in chosen
    ]  # fmt: skip
    _print(results, fmt)


def _one(
    data_dir: Path,
    config: Path | None,
    min_difference: int | None,
    method: str,
    variant: str,
    dataset: Dataset,
    frame: Any,
    universes: list[dict[str, Any]],
    *,
    variable: str,
    second: str,
    partners: int,
) -> dict[str, Any]:
    """One variant against a site of its own (an empty account)."""
    import tempfile

    # Start-up: the attacks load SciPy and their solvers only when one runs.
    from tablesafe.attacks._groups import group_attack, group_targets
    from tablesafe.service._service import TableService

    cat = dataset.catalog
    with tempfile.TemporaryDirectory() as tmp:
        site = _guarded_site(data_dir, config, min_difference, method, tmp)
        m = site.datasets[0].rules.sliver_min_difference
        service = TableService(site)
        try:
            space = service.served("attacked").builder.definition_space

            def public_zero(cond: Mapping[str, Sequence[Code]]) -> bool:
                box = {cat.variable(k).column: set(v) for k, v in cond.items()}
                return space.canonical(box) is None

            targets = group_targets(
                frame, variable, universes, codes=list(cat.variable(variable).codes),
                second=second if variant == "group-2d" else None, partners=partners,
                m=max(m, 1), public_zero=public_zero,
            )  # fmt: skip
            ask = _guard_ask(service)
            result = group_attack(
                lambda r: ask("attacked", r, "attacker"), dataset, targets,
                variable=variable, variant=variant, second=second, method=method,
            )  # fmt: skip
        finally:
            service.close()
    return {"m": m, **result.as_dict()}


def _print(results: list[dict[str, Any]], fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps(results, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    out = Table(title="A merged group minus a published cell")
    columns = {
        "variant": "variant",
        "m": "m",
        "small": "small targets",
        "exact_published": "exact, cells alone",
        "exact_attack": "exact, attack",
        "targets": "targets",
        "told_published": "empty told, cells alone",
        "told_attack": "empty told, attack",
        "differences": "differences taken",
    }
    for label in columns.values():
        out.add_column(label, justify="left" if label == "variant" else "right")
    for r in results:
        out.add_row(*(str(r[k]) for k in columns))
    Console(width=160).print(out)
