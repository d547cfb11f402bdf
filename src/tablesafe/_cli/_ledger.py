"""``tablesafe audit ledger``: the privacy ledger of a dataset (issue 28)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from tablesafe._cli import PATH, text_or_json
from tablesafe._cli._server import audit_app
from tablesafe._settings import load_site_config
from tablesafe.state import open_state


@audit_app.command("ledger")
@click.option("--config", type=PATH, required=True, help="Site configuration (TOML).")
@click.option("--dataset", required=True, help="The dataset (its name in the configuration).")
@text_or_json
def audit_ledger(config: Path, dataset: str, fmt: str) -> None:
    """The privacy loss of everything served from a dataset's microdata, all keys and per key."""
    # Start-up: DuckDB and pydantic load only when the ledger is read.
    from tablesafe.service._ledger import ledger_report

    site = load_site_config(config)
    state = open_state(site)
    try:
        out = ledger_report(site, state, dataset)
    finally:
        state.close()
    if fmt == "json":
        click.echo(json.dumps(out, indent=1))
        return
    _report(out)


def _budget(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


def _eps(value: float | None) -> str:
    """An epsilon of the report; ``None`` is one that is infinite (none holds at the delta)."""
    return "infinite" if value is None else f"{value:.6g}"


def _report(out: dict[str, Any]) -> None:
    """The report as text: the dataset's figures, the records' distribution, each key."""
    bound = "" if out["exact"] else " (upper bound: a search stopped, or records differ)"
    lines = [
        f"Privacy ledger of {out['dataset']}: {out['tables']} tables, {out['figures']} distinct "
        "figures",
        f"  epsilon spent (largest loss of any possible record): {_eps(out['epsilon_spent'])} at "
        f"delta {out['delta']:g}{bound}",
        f"  figures per record (most): {out['figures_per_record']}, of which without an epsilon: "
        f"{out['figures_without_epsilon_per_record']}",
        f"  budget: {_budget(out['budget']['epsilon'])} (left: {_budget(out['epsilon_left'])}); "
        f"per key: {_budget(out['budget']['epsilon_per_key'])}",
        f"  records of the microdata ({out['records']['records']}), by epsilon spent:",
    ]
    lines += [
        f"    {_eps(d['epsilon']):>10}  {d['records']}" for d in out["records"]["distribution"]
    ]
    lines.append("  per key: epsilon spent, tables, figures")
    lines += [
        f"    {k['key_id']:<20} {_eps(k['epsilon_spent']):>10} {k['tables']:>6} {k['figures']:>8}"
        for k in out["keys"]
    ]
    if "note" in out:
        lines.append(f"  note: {out['note']}")
    lines.append(f"  ({out['accounting']})")
    click.echo("\n".join(lines))
