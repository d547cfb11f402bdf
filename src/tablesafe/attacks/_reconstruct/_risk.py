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
the same figure on every machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tablesafe._errors import RiskCeilingExceeded
from tablesafe._protection import Protection
from tablesafe._request import TableRequest
from tablesafe.attacks._reconstruct._audit import likelihood_of
from tablesafe.attacks._reconstruct._closest import closest_table
from tablesafe.attacks._reconstruct._constraints import constraint_system
from tablesafe.attacks._reconstruct._cross import Cross, atoms_of, columns_of
from tablesafe.attacks._reconstruct._intervals import published_intervals
from tablesafe.attacks._reconstruct._likely import likeliest_table
from tablesafe.attacks._reconstruct._putative import figures
from tablesafe.catalog._catalog import Catalog
from tablesafe.output._table import ProtectedTable

__all__ = ["MAX_CELLS", "RUNS", "PutativeRisk", "putative_risk", "table_columns"]

#: Re-solves with random cell costs a claimed unique must survive.
RUNS = 4
#: The Generator's seed of those costs.
SEED = 28
#: Their largest value per record in a cell (log-probability, or L1, units).
SCALE = 0.5
#: Branch-and-bound nodes per solve.
MAX_NODES = 2_000
#: Seconds per solve: a safety net only (the node limit decides).
TIME_LIMIT = 30.0
#: The largest full cross-classification the measure builds.
MAX_CELLS = 200_000


@dataclass(frozen=True)
class PutativeRisk:
    """The stable claimed uniques of a set of published tables.

    Attributes:
        records: Records in the best guess.
        claimed: Cells the best guess claims as uniques.
        stable: Of those, the cells every re-solve also claims.
    """

    records: int
    claimed: int
    stable: int

    @property
    def share(self) -> float:
        """Stable claimed uniques over the guess's records (0 for no record)."""
        return self.stable / self.records if self.records else 0.0


def table_columns(catalog: Catalog, request: TableRequest) -> frozenset[str]:
    """The microdata columns a table's figures constrain (its dimensions' and universe's)."""
    return frozenset(columns_of(catalog, [request]))


def putative_risk(
    catalog: Catalog,
    tables: Sequence[ProtectedTable],
    protection: Protection,
    *,
    min_cell_size: int = 0,
) -> PutativeRisk:
    """The stable claimed uniques of ``tables`` as published (counts; others add nothing).

    Raises:
        RiskCeilingExceeded: for tables whose full cross-classification has
            more than :data:`MAX_CELLS` cells (too large to measure).
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
        raise RiskCeilingExceeded(
            f"this table is refused: with the tables already published that share a variable "
            f"with it, it spans {size:,} combinations of categories, more than the "
            f"{MAX_CELLS:,} the putative-risk ceiling can measure; a table of fewer or coarser "
            "variables, or of variables no published table shares, may fit"
        )
    cross = Cross(columns, atoms, np.zeros(size, dtype=np.int64))  # no truth: layout only
    intervals = [published_intervals(t, protection, min_cell_size=min_cell_size) for t in tables]
    system, ub0 = constraint_system(catalog, cross, tables, intervals)
    members, values = figures(catalog, cross, tables, intervals, system)
    make = likelihood_of(protection)
    lik = make(int(values.max(initial=0.0))) if make is not None else None

    def solve(costs: npt.NDArray[np.float64] | None) -> npt.NDArray[np.int64] | None:
        if lik is None:
            return closest_table(
                system, ub0, members, values,
                time_limit=TIME_LIMIT, perturbation=costs, max_nodes=MAX_NODES,
            )[0]  # fmt: skip
        return likeliest_table(
            system, ub0, members, values, lik,
            time_limit=TIME_LIMIT, perturbation=costs, max_nodes=MAX_NODES,
        )[0]  # fmt: skip

    guess = solve(None)
    if guess is None:
        return PutativeRisk(0, 0, 0)
    stable = guess == 1
    rng = np.random.default_rng(SEED)
    for _ in range(RUNS):
        other = solve(SCALE * rng.uniform(0.0, 1.0, size))
        if other is not None:
            stable &= other == 1
    return PutativeRisk(int(guess.sum()), int((guess == 1).sum()), int(stable.sum()))
