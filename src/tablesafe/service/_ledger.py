"""The privacy ledger's report: what ``tablesafe audit ledger`` and the admin API show.

The state store keeps one row per table that spent something
(:meth:`tablesafe.state.StateStore.ledger_rows`); the report replays them
into a fresh :class:`~tablesafe.rules._ledger.LedgerIndex` and states, for
the dataset (all keys together) and for each key, the largest privacy loss
of any possible record (the figure the budgets cap), and, for the
microdata's own records, how the loss is spread: one tabulation of the
columns the published definitions name, grouped into the codes no
definition tells apart (the owner's figures: admin keys and the owner's
command line only).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ComputationError, RequestError
from tablesafe._settings import SiteConfig
from tablesafe.catalog._dataset import Dataset
from tablesafe.catalog._variables import Code
from tablesafe.cells._plan import DimensionPlan, TabulationPlan
from tablesafe.engines import engine_or_default
from tablesafe.engines._base import Engine
from tablesafe.rules._admission import dataset_identity
from tablesafe.rules._ledger import LedgerIndex, summary
from tablesafe.rules._ledger_loss import Family
from tablesafe.rules._ledger_pld import ACCOUNTANT, DEFAULT_DELTA, epsilon_at
from tablesafe.state import StateStore

__all__ = ["ACCOUNTING", "NOT_DP", "ledger_report", "records_distribution"]

#: How the loss of a record is composed (in every report).
ACCOUNTING = (
    "a record's privacy loss composes the distinct noisy figures whose definition holds it, by "
    f"{ACCOUNTANT}; a figure published again spends nothing; epsilon_spent is the largest loss "
    "of any possible record (every combination of codes), which is what the budgets cap"
)

#: Said wherever a figure's (epsilon, delta) is not a DP mechanism's design.
NOT_DP = (
    "the protection is not differentially private: its figures' privacy loss distributions are "
    "the ptable's between neighbouring counts, so these totals describe a mechanism that is not "
    "DP (and are infinite wherever an outcome only one neighbour can give has a chance above "
    "delta)"
)

#: Most cells of the tabulation behind the records' distribution.
MAX_CELLS = 1 << 22


def ledger_report(
    site: SiteConfig,
    state: StateStore,
    dataset: str,
    *,
    data: Dataset | None = None,
    engine: Engine | None = None,
) -> dict[str, Any]:
    """The ledger of the microdata a dataset serves (every dataset name over them together).

    Args:
        site: The site configuration (the dataset's path and budgets).
        state: The state store holding the ledger.
        dataset: The dataset's name in the site configuration.
        data: The dataset, opened (default: opened from the configuration).
        engine: The engine to read it with (default: a DuckDB engine).

    Raises:
        RequestError: for a dataset the site does not serve.
        ComputationError: when the records' distribution needs a tabulation
            of more than :data:`MAX_CELLS` cells.
    """
    settings = {d.name: d for d in site.datasets}
    if dataset not in settings:
        raise RequestError(
            f"unknown dataset {dataset!r}; this site serves: {', '.join(settings) or 'none'}"
        )
    ds = settings[dataset]
    data = data or Dataset.open(site.resolve(ds.path), name=ds.name)
    engine = engine_or_default(engine)
    ledger = LedgerIndex()
    for row_id, key_id, _, figures in state.ledger_rows(dataset_identity(engine, data)):
        ledger.add(key_id, figures)
        ledger.last_id = row_id
    rules = ds.rules
    out: dict[str, Any] = {"dataset": dataset, "accounting": ACCOUNTING}
    delta = rules.privacy_budget_delta
    out["budget"] = {
        "epsilon": rules.privacy_budget_epsilon,
        "epsilon_per_key": rules.privacy_budget_epsilon_per_key,
        "delta": delta,
    }
    out.update(summary(ledger.dataset, delta))
    budget = rules.privacy_budget_epsilon
    out["epsilon_left"] = None if budget is None else max(budget - out["epsilon_spent"], 0.0)
    out["records"] = records_distribution(engine, data, ledger.dataset.families, delta)
    out["keys"] = [
        _key(key_id, ledger, rules.privacy_budget_epsilon_per_key, delta)
        for key_id in ledger.key_ids()
    ]
    if any(not k["dp"] and k["epsilon"] is not None for k in out["kinds"]):
        out["note"] = NOT_DP
    safe: dict[str, Any] = _json_safe(out)
    return safe


def _json_safe(value: Any) -> Any:
    """The report with an infinite epsilon as ``None`` (JSON has no infinity): no epsilon holds."""
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _key(key_id: str, ledger: LedgerIndex, budget: float | None, delta: float) -> dict[str, Any]:
    account = ledger.key(key_id)
    worst, figures = account.worst(), account.largest(3)
    eps = worst.epsilon(delta)
    return {
        "key_id": key_id,
        "epsilon_spent": eps,
        "epsilon_left": None if budget is None else max(budget - eps, 0.0),
        "figures_per_record": round(figures.value),
        "tables": account.tables,
        "figures": account.figures,
        "exact": worst.exact and figures.exact,
    }


def _atoms(families: list[Family], column: str, codes: tuple[Code, ...]) -> list[tuple[Code, ...]]:
    """The codes of ``column`` grouped into classes no family tells apart."""
    groups: dict[tuple[object, ...], list[Code]] = {}
    for code in codes:
        sig = tuple(
            (
                code in f.box[column] if column in f.box else None,
                f.slots[f.axes.index(column)].get(code, ()) if column in f.axes else None,
            )
            for f in families
        )
        groups.setdefault(sig, []).append(code)
    return [tuple(v) for v in groups.values()]


def records_distribution(
    engine: Engine, data: Dataset, families: list[Family], delta: float = DEFAULT_DELTA
) -> dict[str, Any]:
    """How the epsilon spent is spread over the microdata's records (the owner's figures).

    Each record's figures of each mechanism, composed at ``delta`` as the
    ledger composes them.

    Returns:
        ``records`` (how many), ``epsilon_max`` (the largest loss of a record
        the microdata hold) and ``distribution``: each loss taken by some
        record, with how many records take it, in increasing order.

    Raises:
        ComputationError: when the columns' classes of codes make more than
            :data:`MAX_CELLS` combinations.
    """
    cat = data.catalog
    codes = {v.column: v.codes for v in cat.source_variables}
    used = sorted({c for f in families for c in (*f.box, *f.axes)}) or [
        cat.source_variables[0].column
    ]
    atoms = {c: _atoms(families, c, codes[c]) for c in used}
    # The engine's arrays hold every margin slot too: (classes + 1) per column.
    cells = int(np.prod([len(a) + 1 for a in atoms.values()]))
    if cells > MAX_CELLS:
        raise ComputationError(
            f"the records' distribution needs {cells:,} combinations of the {len(used)} columns "
            f"the published figures name (at most {MAX_CELLS:,}); the epsilon spent over every "
            "possible record does not need it"
        )
    dims = tuple(
        DimensionPlan(c, c, c, tuple(range(len(a))), tuple(map(str, range(len(a)))), tuple(a))
        for c, a in atoms.items()
    )
    plan = TabulationPlan(dims, (), (tuple(range(len(dims))),), cat.record_key, None)
    n = engine.tabulate(data, plan).n[tuple(slice(0, d.size) for d in dims)]
    where = np.nonzero(n)
    weight = n[where]
    descriptors = sorted({f.privacy for f in families if f.privacy})
    counts = np.zeros((len(descriptors), weight.size))
    for f in families:
        if f.privacy:
            counts[descriptors.index(f.privacy)] += _values(f, used, atoms, where)
    # Each distinct combination of counts composed once.
    combos, which = np.unique(np.rint(counts).astype(np.int64).T, axis=0, return_inverse=True)
    per = np.array(
        [epsilon_at(dict(zip(descriptors, map(int, c), strict=True)), delta) for c in combos]
    )
    loss = per[which.reshape(-1)] if weight.size else np.zeros(0)
    values, inverse = np.unique(np.round(loss, 9), return_inverse=True)
    records = np.bincount(inverse.reshape(-1), weights=weight).astype(np.int64)
    return {
        "records": int(weight.sum()),
        "epsilon_max": float(values[-1]) if values.size else 0.0,
        "distribution": [
            {"epsilon": float(v), "records": int(r)} for v, r in zip(values, records, strict=True)
        ],
    }


def _values(
    f: Family,
    used: list[str],
    atoms: dict[str, list[tuple[Code, ...]]],
    where: tuple[npt.NDArray[np.intp], ...],
) -> npt.NDArray[np.float64]:
    """The figures family ``f`` gives each combination of classes at ``where``."""
    ok = np.ones(where[0].size, dtype=bool)
    for c, allowed in f.box.items():
        inside = np.array([a[0] in allowed for a in atoms[c]])
        ok &= inside[where[used.index(c)]]
    held = [
        [f.slots[i].get(a[0], ()) for a in atoms[c]] for i, c in enumerate(f.axes)
    ]  # per axis, per class: the categories holding it
    total = np.zeros(where[0].size)
    # A class is in one category of each axis, or in several where categories overlap.
    for pick in itertools.product(*(range(max(map(len, h), default=1)) for h in held)):
        idx, has = [], ok.copy()
        for h, j, c in zip(held, pick, f.axes, strict=True):
            cls = where[used.index(c)]
            slot = np.array([s[j] if j < len(s) else -1 for s in h])[cls]
            has &= slot >= 0
            idx.append(np.maximum(slot, 0))
        total += np.where(has, f.counts[tuple(idx)] if idx else f.counts, 0)
    return total
