"""The audit's entry points: the tables to publish, and the attack on what they publish."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._builder import TableBuilder
from tablesafe._errors import ParameterError, RequestError
from tablesafe._protection import Protection
from tablesafe._request import TableRequest
from tablesafe._settings import RuleSettings
from tablesafe.attacks._reconstruct._decide import reconstruct
from tablesafe.attacks._reconstruct._putative import putative_attack
from tablesafe.attacks._reconstruct._result import Progress, ReconstructionResult, report
from tablesafe.attacks._reconstruct._truth import read_truth
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._dataset import Dataset
from tablesafe.output._table import ProtectedTable
from tablesafe.rules._ceiling._constraints import constraint_system
from tablesafe.rules._ceiling._cross import atoms_of, columns_of
from tablesafe.rules._ceiling._intervals import published_intervals
from tablesafe.rules._ceiling._likely import likelihood_of
from tablesafe.rules._rules import apply_small_cell_rule

_Intervals = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]


def all_k_way_requests(catalog: Catalog, variables: Sequence[str], k: int) -> list[TableRequest]:
    """Every ``k``-way table of ``variables`` (counts, all margins), in a fixed order.

    Raises:
        RequestError: for an unknown variable, a repeated one, or ``k`` out of range.
    """
    names = [v.strip() for v in variables if v.strip()]
    if not names:
        raise RequestError("give the variables of the k-way tables, e.g. --variables AGEGRP,SEX")
    for name in names:
        catalog.variable(name)
    if len(set(names)) != len(names):
        raise RequestError(f"the variables {', '.join(names)} repeat one; give each once")
    if not 1 <= k <= min(4, len(names)):
        raise RequestError(
            f"--all-k-way must be 1 to {min(4, len(names))} for {len(names)} variables, not {k}"
        )
    return [TableRequest(combo, statistic="count") for combo in itertools.combinations(names, k)]


def reconstruction_attack(
    dataset: Dataset,
    requests: Sequence[TableRequest],
    protection: Protection,
    *,
    min_cell_size: int = 0,
    small_cell_action: str = "suppress",
    time_limit: float = 60.0,
    progress: Progress | None = None,
    name: str | None = None,
    engine: Any = None,
    putative: bool = True,
    ranked: int = 0,
) -> ReconstructionResult:
    """Publish ``requests`` under ``protection`` and try to rebuild the full cross-classification.

    The tables are built as the server builds them (the builder, then the
    small-cell rule when ``min_cell_size`` is set); the attack reads only
    what is published and what is public about the protection.

    Args:
        dataset: The dataset (the data owner's: the harness reads records to score).
        requests: The published tables' requests.
        protection: The protection (``Protection(None)`` for none).
        min_cell_size: The small-cell rule's ``k`` (0: off).
        small_cell_action: ``"suppress"`` or ``"show_less_than"`` (both hide the value).
        time_limit: Seconds the solving may take; partial bounds after that.
        progress: Called with (stage, done, total).
        name: A name for the report (default: the mechanism's).
        engine: The engine building the tables (DuckDB by default).
        putative: Also run the best-guess (most probable) reconstruction and
            score it (the result's ``putative`` block); it gets its own
            ``time_limit``.
        ranked: Perturbed re-solves for the confidence-ranked reconstruction
            (0: none; needs ``putative``).

    Raises:
        RequestError: for no request, a request without counts, an unknown
            variable or category, or a cross-classification too large.
        ParameterError: for a time limit that is not positive.
    """
    start = time.monotonic()
    _check_arguments(requests, time_limit)
    catalog = dataset.catalog
    bound = _count_requests(catalog, requests)
    columns = columns_of(catalog, bound)
    cross = read_truth(
        dataset, columns, atoms_of(catalog, [r.bind(catalog) for r in bound], columns)
    )
    tables, intervals = _publish(
        TableBuilder(dataset, protection, engine=engine),
        bound,
        protection,
        min_cell_size=min_cell_size,
        small_cell_action=small_cell_action,
        progress=progress,
    )
    system, ub0 = constraint_system(catalog, cross, tables, intervals)
    remaining = time_limit - (time.monotonic() - start)
    state, stages = reconstruct(
        system,
        ub0,
        cross.truth,
        time_limit=max(remaining, 0.01),
        shape=cross.shape,
        width=max(len(r.dimensions) for r in bound) + 2,
        blocks=max(len(r.dimensions) + len(r.universe) for r in bound) + 1,
        progress=progress,
    )
    if putative and progress is not None:
        progress("best-guess reconstruction", 0, 1)
    guess: dict[str, Any] = putative_attack(
        catalog, cross, tables, intervals, system, ub0,
        time_limit=time_limit, ranked=ranked, likelihood=likelihood_of(protection),
    ) if putative else {}  # fmt: skip
    method = name or str(protection.describe().get("name", "none"))
    seconds = round(time.monotonic() - start, 3)
    result = report(method, len(tables), columns, state, cross.truth, stages, seconds)
    return replace(result, putative=guess)


def _check_arguments(requests: Sequence[TableRequest], time_limit: float) -> None:
    """Refuse no request, or a time limit that is not positive."""
    if not requests:
        raise RequestError("the reconstruction attack needs at least one table request")
    if not time_limit > 0:
        raise ParameterError(
            f"the time limit must be a positive number of seconds, not {time_limit}"
        )


def _count_requests(catalog: Catalog, requests: Sequence[TableRequest]) -> list[TableRequest]:
    """The requests as count tables, checked against the catalog (raising on a bad one)."""
    bound = []
    for r in requests:
        # The attack reads counts only; they do not depend on the statistic asked.
        r = replace(r, statistic="count", rounding=None, replicates=False)
        r = r.coerced(catalog)
        r.bind(catalog)
        bound.append(r)
    return bound


def _publish(
    builder: TableBuilder,
    requests: Sequence[TableRequest],
    protection: Protection,
    *,
    min_cell_size: int,
    small_cell_action: str,
    progress: Progress | None,
) -> tuple[list[ProtectedTable], list[_Intervals]]:
    """Build each table as the site publishes it, and read it as the intruder does.

    Returns:
        The published tables and, per table, the interval of true counts
        each cell allows (see :func:`published_intervals`).
    """
    tables: list[ProtectedTable] = []
    intervals = []
    if min_cell_size > 0:
        rules = RuleSettings.model_validate(
            {"min_cell_size": min_cell_size, "small_cell_action": small_cell_action}
        )
    for i, r in enumerate(requests):
        if progress is not None:
            progress("publishing tables", i, len(requests))
        table = builder.build(r)
        if min_cell_size > 0:
            table = apply_small_cell_rule(table, rules)
        tables.append(table)
        intervals.append(published_intervals(table, protection, min_cell_size=min_cell_size))
    return tables, intervals
