"""The measure's layout: the open cells the published figures speak of, in independent blocks.

The best guess solves for one count per full cell that a published figure
covers and whose published intervals let hold a record (an *open* cell); a
cell no figure covers is left out (nothing published speaks of it, and no
solve can claim it: every re-solve's random costs push it to 0). Two open
cells are in one **block** when a chain of figures links them: figures of
tables of disjoint universes (one region, another region) or a single table's
inner cells (under ``aggregate`` additivity each is its own figure) fall in
separate blocks. The guess's objective is a sum over blocks (each figure,
each cell's prior and its random costs belong to one block; the prior's
log-linear fit scales each block's cells by its own figures only), so a
block is solved on its own and the measure adds the blocks' claims and
records up.

Before any solve, each block has a bound from the published intervals alone
(:func:`block_bounds`): its claims are at most its open cells that bound
propagation over the intervals leaves able to hold exactly one record, its
records at least the largest sum of the lower ends of one grouping set's
cells in it (those cells hold disjoint records).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tablesafe._errors import RiskCeilingExceeded
from tablesafe._protection import Protection
from tablesafe.catalog._catalog import Catalog
from tablesafe.output._table import ProtectedTable
from tablesafe.rules._ceiling._constraints import (
    Intervals,
    System,
    constraint_system,
    figures,
    propagate,
)
from tablesafe.rules._ceiling._cross import Cross, atoms_of, columns_of, table_rows
from tablesafe.rules._ceiling._intervals import published_intervals

__all__ = ["MAX_CELLS", "Layout", "block_bounds", "layout", "subsystem", "unmeasurable"]

#: The largest full cross-classification the measure lays out (memory).
MAX_CELLS = 200_000


def unmeasurable(what: str) -> RiskCeilingExceeded:
    """The refusal of a table whose putative risk cannot be measured within the site's limit."""
    return RiskCeilingExceeded(
        "this table is refused: its putative risk cannot be measured within this site's "
        f"limit: {what}. Tables already published are still answered; a table of fewer or "
        "coarser categories, or of a smaller universe, may fit"
    )


@dataclass
class Layout:
    """A set of published tables as the measure solves them.

    Attributes:
        cross: The full cross-classification (layout only: its ``truth`` is zeros).
        tables: The tables, in the measure's order.
        intervals: Per table, what the intruder knows of each cell.
        system: The published intervals as constraints on the open cells.
        ub0: Each full cell's upper bound.
        members: Per figure the best guess reads, its open cells (indices
            into ``system.alive``); figures of no open cell are left out.
        values: Per figure, its published value.
        block: Per open cell, its block (0 .. ``blocks`` - 1, in order of
            the blocks' first cells).
        blocks: How many blocks.
    """

    cross: Cross
    tables: list[ProtectedTable]
    intervals: list[Intervals]
    system: System
    ub0: npt.NDArray[np.float64]
    members: list[npt.NDArray[np.int64]]
    values: npt.NDArray[np.float64]
    block: npt.NDArray[np.int64]
    blocks: int


def layout(
    catalog: Catalog,
    tables: Sequence[ProtectedTable],
    protection: Protection,
    min_cell_size: int,
) -> Layout:
    """The open cells of ``tables`` (published counts), their constraints, figures and blocks.

    Raises:
        RiskCeilingExceeded: for a full cross-classification of more than
            :data:`MAX_CELLS` cells.
    """
    requests = [t.request.coerced(catalog) for t in tables]
    columns = columns_of(catalog, requests)
    atoms = atoms_of(catalog, [r.bind(catalog) for r in requests], columns)
    size = int(np.prod([len(a) for a in atoms], dtype=np.float64))
    if size > MAX_CELLS:
        raise unmeasurable(
            f"with the tables measured with it, it spans {size:,} combinations of categories, "
            f"more than {MAX_CELLS:,}"
        )
    cross = Cross(columns, atoms, np.zeros(size, dtype=np.int64))
    intervals = [published_intervals(t, protection, min_cell_size=min_cell_size) for t in tables]
    system, ub0 = constraint_system(catalog, cross, tables, intervals)
    covered = np.zeros(system.alive.size, dtype=bool)
    covered[system.cols] = True
    system, _ = subsystem(system, np.flatnonzero(covered))
    members, values = figures(catalog, cross, tables, intervals, system)
    keep = [i for i, v in enumerate(members) if v.size]
    members, values = [members[i] for i in keep], values[keep]
    block, blocks = _blocks(system)
    return Layout(cross, list(tables), intervals, system, ub0, members, values, block, blocks)


def subsystem(
    system: System, variables: npt.NDArray[np.int64]
) -> tuple[System, npt.NDArray[np.int64]]:
    """The constraints on ``variables`` (sorted indices into ``system.alive``) alone.

    Every constraint holding one of them must hold only them (a block's, or
    blocks'); constraints holding none are left out.

    Returns:
        The smaller system, and each old variable's new index (-1: left out).
    """
    new = np.full(system.alive.size, -1, dtype=np.int64)
    new[variables] = np.arange(variables.size)
    keep = new[system.cols] >= 0
    used = np.unique(system.rows[keep])
    row_new = np.full(system.lo.size, -1, dtype=np.int64)
    row_new[used] = np.arange(used.size)
    return System(
        alive=system.alive[variables],
        rows=row_new[system.rows[keep]],
        cols=new[system.cols[keep]],
        lo=system.lo[used],
        hi=system.hi[used],
    ), new


def _blocks(system: System) -> tuple[npt.NDArray[np.int64], int]:
    """Each open cell's block: connected components of the cells and the constraints."""
    from scipy import sparse
    from scipy.sparse.csgraph import connected_components

    m, r = int(system.alive.size), int(system.lo.size)
    if m == 0:
        return np.zeros(0, dtype=np.int64), 0
    graph = sparse.coo_matrix(
        (np.ones(system.rows.size), (system.cols, m + system.rows)), shape=(m + r, m + r)
    )
    _, labels = connected_components(graph, directed=False)
    # Number the blocks in order of their first cells: the same on every run.
    _, first, inverse = np.unique(labels[:m], return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse].astype(np.int64), int(first.size)


def block_bounds(
    catalog: Catalog, lay: Layout
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Per block, from the published intervals alone: most claims, fewest records.

    Every table the measure solves for meets every published interval, so a
    cell it claims as a unique is one that bound propagation over the
    intervals leaves able to hold exactly one record; and a block's records
    are at least the lower ends of one grouping set's cells in it added up.

    Returns:
        ``(claims, records)``: per block, the open cells that may hold one
        record, and a lower bound on its records.
    """
    system = lay.system
    lb, ub = propagate(system, np.zeros(system.alive.size), lay.ub0[system.alive], math.inf)
    one = ((lb <= 1) & (ub >= 1)).astype(np.int64)
    claims = np.bincount(lay.block, weights=one, minlength=lay.blocks).astype(np.int64)
    var_of = np.full(lay.cross.truth.size, -1, dtype=np.int64)
    var_of[system.alive] = np.arange(system.alive.size)
    records = np.zeros(lay.blocks, dtype=np.int64)
    for table, (lo, _hi, used) in zip(lay.tables, lay.intervals, strict=True):
        lo_f, used_f = lo.reshape(-1), used.reshape(-1)
        for _gs, flat in table_rows(catalog, lay.cross, table):
            ok = (flat >= 0) & (var_of >= 0)
            cells, blocks = flat[ok], lay.block[var_of[ok]]
            keep = used_f[cells]
            # Each read cell's open cells lie in one block (its figure links them).
            pairs = np.unique(np.c_[cells[keep], blocks[keep]], axis=0)
            if pairs.size:
                sums = np.bincount(pairs[:, 1], weights=lo_f[pairs[:, 0]], minlength=lay.blocks)
                records = np.maximum(records, sums.astype(np.int64))
    return claims, records
