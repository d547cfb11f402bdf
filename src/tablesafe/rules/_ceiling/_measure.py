"""The putative risk of a set of published tables, from published figures alone.

The audit scores its best guess against the truth (:mod:`._putative`): the
share of sample uniques it gets right. A rule that refuses tables cannot
decide on that: a refusal would tell the intruder that their guess, which
anyone can compute from the published tables, is largely right. So the
putative-risk ceiling (``putative_uniques_ceiling``) reads a figure the
intruder can compute too:

**stable claimed uniques**: the full cells the best guess (the most probable
table under the ptable, :mod:`._likely`; the L1-closest one for record-level
drop/add-up-to-q) puts exactly one record in, and that every one of
:data:`RUNS` re-solves also puts one record in, each with random costs of up
to :data:`SCALE` (half a unit of log-probability) per record in each cell,
drawn from a fixed numpy Generator: so the tables within a few units of the
best. Their share is over the records of the guess. From one-way margins
alone the best guess claims many uniques, but the nearly-as-good tables put
them elsewhere; as tables pin the full cells down, the claims become stable.
The intruder's confidence in a claimed unique is what it measures, not its
truth (tests/test_risk_gate.py: on the 300-record test file under ckm the
figure is 0 with the four one-way tables and largest, of the sets measured,
with all four 3-way tables).

The solves stop at a node limit, not a time limit, so the same tables give
the same figure on every machine. A gate needs only to know whether the
share exceeds its ceiling: given one, the measure stops as soon as it
cannot (claims only shrink with each re-solve) and solves nothing when
:func:`risk_bound`, from the published intervals alone, keeps it under; it
refuses to solve for more open cells than ``max_cells`` (the site's
``putative_max_cells``), a count that bounds the work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tablesafe._errors import RiskCeilingExceeded
from tablesafe._protection import Protection
from tablesafe._request import TableRequest
from tablesafe.catalog._catalog import Catalog
from tablesafe.output._table import ProtectedTable
from tablesafe.rules._ceiling._closest import closest_table
from tablesafe.rules._ceiling._constraints import System, constraint_system, figures, propagate
from tablesafe.rules._ceiling._cross import Cross, atoms_of, columns_of, table_rows
from tablesafe.rules._ceiling._intervals import published_intervals
from tablesafe.rules._ceiling._likely import Posterior, likelihood_of

__all__ = [
    "MAX_CELLS",
    "MAX_OPEN_CELLS",
    "RUNS",
    "PutativeRisk",
    "putative_risk",
    "risk_bound",
    "table_columns",
]

#: Re-solves with random cell costs a claimed unique must survive.
RUNS = 4
#: The Generator's seed of those costs.
SEED = 28
#: Their largest value per record in a cell (log-probability, or L1, units).
SCALE = 0.5
#: Branch-and-bound nodes per solve.
MAX_NODES = 2_000
#: Seconds per solve: a safety net only (the node limit and the cell limit decide).
TIME_LIMIT = 30.0
#: The largest full cross-classification the measure lays out (memory).
MAX_CELLS = 200_000
#: The default limit on the cells a measure's solves hold (``putative_max_cells``).
MAX_OPEN_CELLS = 600


@dataclass(frozen=True)
class PutativeRisk:
    """The stable claimed uniques of a set of published tables.

    Attributes:
        records: Records in the best guess (a lower bound when not ``exact``).
        claimed: Cells the best guess claims as uniques (an upper bound when not ``exact``).
        stable: Of those, the cells every re-solve also claims (an upper
            bound when not ``exact``).
        exact: False when the measure stopped once the share could not
            exceed the ceiling it was given: ``share`` is then an upper bound
            on the exact share, at most that ceiling.
    """

    records: int
    claimed: int
    stable: int
    exact: bool = True

    @property
    def share(self) -> float:
        """Stable claimed uniques over the guess's records (0 for no record)."""
        return self.stable / self.records if self.records else 0.0


def table_columns(catalog: Catalog, request: TableRequest) -> frozenset[str]:
    """The microdata columns a table's figures constrain (its dimensions' and universe's)."""
    return frozenset(columns_of(catalog, [request]))


def _unmeasurable(what: str) -> RiskCeilingExceeded:
    return RiskCeilingExceeded(
        "this table is refused: its putative risk cannot be measured within this site's "
        f"limit: with the tables already published that share a variable with it, {what}. "
        "Tables already published are still answered; a table of fewer or coarser "
        "variables, or of variables no published table shares, may fit"
    )


def putative_risk(
    catalog: Catalog,
    tables: Sequence[ProtectedTable],
    protection: Protection,
    *,
    min_cell_size: int = 0,
    ceiling: float | None = None,
    max_cells: int = MAX_OPEN_CELLS,
) -> PutativeRisk:
    """The stable claimed uniques of ``tables`` as published (counts; others add nothing).

    Args:
        catalog: The dataset's catalog.
        tables: The published tables.
        protection: The site's protection (public).
        min_cell_size: The small-cell rule's ``k``.
        ceiling: Stop as soon as the share cannot exceed it (the result is
            then not ``exact``); None: measure it exactly.
        max_cells: The most cells the published figures may leave open (the
            solves' integer columns): a deterministic limit on the work.

    Raises:
        RiskCeilingExceeded: for tables too large to measure: a full
            cross-classification of more than :data:`MAX_CELLS` cells, more
            than ``max_cells`` open ones, or no table found within
            :data:`MAX_NODES` nodes.
    """
    # The attack reads counts; in a fixed order, the figure is one of the set of tables.
    tables = sorted((t for t in tables if t.counts is not None), key=lambda t: repr(t.request))
    if not tables:
        return PutativeRisk(0, 0, 0)
    requests = [t.request.coerced(catalog) for t in tables]
    columns = columns_of(catalog, requests)
    atoms = atoms_of(catalog, [r.bind(catalog) for r in requests], columns)
    size = int(np.prod([len(a) for a in atoms], dtype=np.float64))
    if size > MAX_CELLS:
        raise _unmeasurable(
            f"it spans {size:,} combinations of categories, more than {MAX_CELLS:,}"
        )
    cross = Cross(columns, atoms, np.zeros(size, dtype=np.int64))  # no truth: layout only
    intervals = [published_intervals(t, protection, min_cell_size=min_cell_size) for t in tables]
    system, ub0 = constraint_system(catalog, cross, tables, intervals)
    if ceiling is not None:
        bound = risk_bound(catalog, cross, tables, intervals, system, ub0)
        if bound.share <= ceiling:
            return bound
    if system.alive.size > max_cells:
        raise _unmeasurable(
            f"its published figures leave {system.alive.size:,} combinations of categories "
            f"open, more than the {max_cells:,} this site measures"
        )
    members, values = figures(catalog, cross, tables, intervals, system)
    return _stable_claims(system, ub0, members, values, protection, ceiling)


def _stable_claims(
    system: System,
    ub0: npt.NDArray[np.float64],
    members: list[npt.NDArray[np.int64]],
    values: npt.NDArray[np.float64],
    protection: Protection,
    ceiling: float | None,
) -> PutativeRisk:
    """The guess and its :data:`RUNS` re-solves, on one model.

    The re-solves are not started from the guess: its cost under their
    random costs is far from their optimum, and HiGHS, pruning with it,
    spent 13.8 s at a 1,536-cell component's root against 1.8 s without it.
    """
    make = likelihood_of(protection)
    lik = make(int(values.max(initial=0.0))) if make is not None else None
    model = Posterior(system, ub0, members, values, lik) if lik is not None else None

    def solve(costs: npt.NDArray[np.float64] | None) -> npt.NDArray[np.int64] | None:
        if model is None:
            return closest_table(
                system, ub0, members, values,
                time_limit=TIME_LIMIT, perturbation=costs, max_nodes=MAX_NODES,
            )[0]  # fmt: skip
        return model.solve(costs, time_limit=TIME_LIMIT, max_nodes=MAX_NODES)[0]

    guess = solve(None)
    if guess is None:
        raise _unmeasurable(f"no table meeting its figures was found within {MAX_NODES:,} nodes")
    records = int(guess.sum())
    stable = guess == 1
    claimed = int(stable.sum())
    rng = np.random.default_rng(SEED)
    for _ in range(RUNS):
        if ceiling is not None and int(stable.sum()) <= ceiling * records:
            # Every re-solve can only take claims away: the share stays at most this.
            return PutativeRisk(records, claimed, int(stable.sum()), exact=False)
        other = solve(SCALE * rng.uniform(0.0, 1.0, ub0.size))
        if other is not None:
            stable &= other == 1
    return PutativeRisk(records, claimed, int(stable.sum()))


def risk_bound(
    catalog: Catalog,
    cross: Cross,
    tables: Sequence[ProtectedTable],
    intervals: Sequence[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]],
    system: System,
    ub0: npt.NDArray[np.float64],
) -> PutativeRisk:
    """An upper bound on the share, from the published intervals alone (no solve).

    Every table the measure solves for meets every published interval, so a
    cell it claims as a unique is one that bound propagation over the
    intervals leaves able to hold exactly one record, and its records are
    at least the largest sum of the lower ends of one grouping set's cells
    (those cells hold disjoint records). The stable claims are at most the
    first count, the guess's records at least the second.

    Returns:
        A :class:`PutativeRisk` not ``exact``: ``records`` the lower bound,
        ``claimed`` and ``stable`` the cells that may hold one record.
    """
    lb, ub = propagate(system, np.zeros(system.alive.size), ub0[system.alive], math.inf)
    open_one = int(((lb <= 1) & (ub >= 1)).sum())
    records = 0
    for table, (lo, _hi, used) in zip(tables, intervals, strict=True):
        lo_f, used_f = lo.reshape(-1), used.reshape(-1)
        for _gs, flat in table_rows(catalog, cross, table):
            cells = np.unique(flat[flat >= 0])
            records = max(records, int(lo_f[cells[used_f[cells]]].sum()))
    # With no records bounded, any open cell bounds the share by 1 at best (the most it is).
    return PutativeRisk(max(records, 1 if open_one else 0), open_one, open_one, exact=False)
