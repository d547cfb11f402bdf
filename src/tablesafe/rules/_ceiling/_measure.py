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
the same figure on every machine. The open cells fall in independent blocks
(:mod:`._blocks`), solved one batch of blocks at a time, the blocks that may
hold the most claims first, each batch of at most ``max_cells`` open cells
(the site's ``putative_max_cells``, a count that bounds the work of one
solve). A gate needs only to know whether the share exceeds its ceiling:
given one, the measure stops as soon as it cannot (a block's claims only
shrink with each re-solve; an unsolved block's are at most its bound, its
records at least its bound) and solves nothing when the blocks' bounds, from
the published intervals alone, keep it under.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tablesafe._protection import Protection
from tablesafe._request import TableRequest
from tablesafe.catalog._catalog import Catalog
from tablesafe.output._table import ProtectedTable
from tablesafe.rules._ceiling._blocks import (
    MAX_CELLS,
    Layout,
    block_bounds,
    layout,
    subsystem,
    unmeasurable,
)
from tablesafe.rules._ceiling._closest import closest_table
from tablesafe.rules._ceiling._constraints import System
from tablesafe.rules._ceiling._cross import columns_of
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
#: The default limit on the open cells of one solve (``putative_max_cells``).
MAX_OPEN_CELLS = 600
#: HiGHS options of the measure's solves: a cut pool of one cut. The same optimum; on a
#: census-like file's hardest solve (540 open cells, 1,067 figures, proven optimal at the
#: root) HiGHS spent 17-19 s separating 939 cuts, 5.5-7.4 s with this pool.
OPTIONS = {"mip_pool_soft_limit": 1}


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


def _counted(catalog: Catalog, tables: Sequence[ProtectedTable]) -> list[ProtectedTable]:
    """The tables with counts (the attack reads counts), in a fixed order: one set, one figure."""
    return sorted((t for t in tables if t.counts is not None), key=lambda t: repr(t.request))


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
        max_cells: The most open cells one solve holds (its integer
            columns): a deterministic limit on the work.

    Raises:
        RiskCeilingExceeded: for tables too large to measure: a full
            cross-classification of more than :data:`MAX_CELLS` cells, a block
            of more than ``max_cells`` open cells to solve, or no table found
            within :data:`MAX_NODES` nodes.
    """
    counted = _counted(catalog, tables)
    if not counted:
        return PutativeRisk(0, 0, 0)
    lay = layout(catalog, counted, protection, min_cell_size)
    claims, records = block_bounds(catalog, lay)
    return _Measure(lay, protection, claims, records, ceiling, max_cells).run()


def risk_bound(
    catalog: Catalog,
    tables: Sequence[ProtectedTable],
    protection: Protection,
    *,
    min_cell_size: int = 0,
) -> PutativeRisk:
    """An upper bound on the share, from the published intervals alone (no solve).

    Returns:
        A :class:`PutativeRisk` not ``exact``: ``records`` the blocks' lower
        bounds added up, ``claimed`` and ``stable`` the open cells that may
        hold one record.
    """
    counted = _counted(catalog, tables)
    if not counted:
        return PutativeRisk(0, 0, 0, exact=False)
    claims, records = block_bounds(catalog, layout(catalog, counted, protection, min_cell_size))
    return PutativeRisk(int(records.sum()), int(claims.sum()), int(claims.sum()), exact=False)


class _Measure:
    """The blocks' claims and records: bounds at first, replaced by solves until it decides.

    The re-solves are not started from the guess: its cost under their
    random costs is far from their optimum, and HiGHS, pruning with it,
    spent 13.8 s at a 1,536-cell component's root against 1.8 s without it.
    """

    def __init__(
        self,
        lay: Layout,
        protection: Protection,
        claims: npt.NDArray[np.int64],
        records: npt.NDArray[np.int64],
        ceiling: float | None,
        max_cells: int,
    ) -> None:
        self.lay, self.ceiling, self.max_cells = lay, ceiling, max_cells
        self.stable, self.records = claims.copy(), records.copy()
        self.claimed = claims.copy()
        self.solved = np.zeros(lay.blocks, dtype=bool)
        make = likelihood_of(protection)
        self.lik = make(int(lay.values.max(initial=0.0))) if make is not None else None
        rng = np.random.default_rng(SEED)
        # Drawn over every full cell, in order, whatever is solved: the same costs per cell.
        self.costs = [SCALE * rng.uniform(0.0, 1.0, lay.ub0.size) for _ in range(RUNS)]

    def under(self) -> bool:
        """Whether the share cannot exceed the ceiling (never without one)."""
        if self.ceiling is None:
            return False
        return int(self.stable.sum()) <= self.ceiling * int(self.records.sum())

    def result(self, exact: bool) -> PutativeRisk:
        return PutativeRisk(
            int(self.records.sum()), int(self.claimed.sum()), int(self.stable.sum()), exact=exact
        )

    def run(self) -> PutativeRisk:
        """Solve the blocks that may claim uniques, most first; then the others' records."""
        if self.under():
            return self.result(exact=False)
        # The blocks that may claim most first (the earliest on ties): the same order everywhere.
        order = np.lexsort((np.arange(self.lay.blocks), -self.stable))
        claiming = [int(b) for b in order if self.stable[b] > 0]
        for batch in self._batches(claiming):
            if self._solve(batch, RUNS):
                return self.result(exact=False)
        if self.under():
            return self.result(exact=False)
        # No claim is possible in the rest; their records make the share exact.
        rest = [int(b) for b in order if not self.solved[b]]
        for batch in self._batches(rest):
            self._solve(batch, 0)
            if self.under():
                return self.result(exact=False)
        return self.result(exact=True)

    def _batches(self, blocks: list[int]) -> list[list[int]]:
        """Consecutive blocks packed into solves of at most ``max_cells`` open cells."""
        sizes = np.bincount(self.lay.block, minlength=self.lay.blocks)
        out: list[list[int]] = []
        cells = 0
        for b in blocks:
            if sizes[b] > self.max_cells:
                raise unmeasurable(
                    f"with the tables measured with it, its published figures leave "
                    f"{int(sizes[b]):,} linked combinations of categories open, more than the "
                    f"{self.max_cells:,} this site solves for at once"
                )
            if not out or cells + sizes[b] > self.max_cells:
                out.append([])
                cells = 0
            out[-1].append(b)
            cells += int(sizes[b])
        return out

    def _solve(self, batch: list[int], runs: int) -> bool:
        """The guess and ``runs`` re-solves of ``batch``; True once the share is decided under."""
        lay = self.lay
        variables = np.flatnonzero(np.isin(lay.block, batch))
        system, new = subsystem(lay.system, variables)
        chosen = [i for i, v in enumerate(lay.members) if new[v[0]] >= 0]
        members = [new[lay.members[i]] for i in chosen]
        solve = self._solver(system, members, lay.values[chosen])
        block = lay.block[variables]
        guess = solve(None)
        if guess is None:
            raise unmeasurable(
                "no table meeting its figures was found within the solver's limits "
                f"({MAX_NODES:,} nodes, {TIME_LIMIT:g} seconds)"
            )
        x = guess[system.alive]
        stable = x == 1
        self.records[batch] = np.bincount(block, weights=x, minlength=lay.blocks)[batch]
        self.claimed[batch] = np.bincount(block, weights=stable, minlength=lay.blocks)[batch]
        self.stable[batch] = self.claimed[batch]
        self.solved[batch] = True
        for costs in self.costs[:runs]:
            if self.under():
                # Every re-solve can only take claims away: the share stays at most this.
                return True
            other = solve(costs)
            if other is not None:
                stable &= other[system.alive] == 1
                self.stable[batch] = np.bincount(block, weights=stable, minlength=lay.blocks)[batch]
        return self.under()

    def _solver(
        self,
        system: System,
        members: list[npt.NDArray[np.int64]],
        values: npt.NDArray[np.float64],
    ) -> Callable[[npt.NDArray[np.float64] | None], npt.NDArray[np.int64] | None]:
        """The best guess's solve of one batch under given random costs (None: none)."""
        ub0 = self.lay.ub0
        model = Posterior(system, ub0, members, values, self.lik) if self.lik is not None else None

        def solve(costs: npt.NDArray[np.float64] | None) -> npt.NDArray[np.int64] | None:
            if model is None:
                return closest_table(
                    system, ub0, members, values,
                    time_limit=TIME_LIMIT, perturbation=costs, max_nodes=MAX_NODES,
                    options=OPTIONS,
                )[0]  # fmt: skip
            return model.solve(costs, time_limit=TIME_LIMIT, max_nodes=MAX_NODES, options=OPTIONS)[
                0
            ]

        return solve
