"""Which published tables the ceiling measures a new table with: the nearest that fit the limit.

The tables published that share a variable with a new table, directly or
through each other (its connected component), can span every variable of
the dataset: on the demo survey, 7 ordinary tables of a researcher's session
already spanned 230,400 combinations of categories, and 30 of them 5.2
million, where one solve of the best guess holds a few hundred. So the
measure takes the component's tables nearest the new one, as many as keep
the figures and the open cells of the tables measured together within the
site's limit (``putative_max_cells``):

1. the component's tables in order of distance: those sharing a variable
   with the new table first, then those sharing one with them, and so on;
   at one distance, those sharing more of its variables first, then those
   adding fewer variables, then in the order of their requests;
2. each is added when the tables taken so far, with it, read at most
   ``max_cells`` figures (their cells the best guess reads) and leave at
   most ``max_cells`` open cells (full cells a figure covers and whose
   published intervals let hold a record), and passed over otherwise.

The figures count as well as the cells: on a census-like file of 10,000
records, 13 tables of 4 variables read 1,067 figures over 540 open cells,
nested (an age-by-area table and the age-by-area-by-household-size table
whose cells add up to it), and one solve of the best guess took 17-19 s
at its root node, where the same tables without the age-by-area one took
0.4-0.6 s; some such groups found no table within the solver's 30-second
safety net.

Every step reads published tables and their figures only, in a fixed order:
the same tables give the same selection in every process. When the whole
component fits, it is measured whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tablesafe._protection import Protection
from tablesafe._request import TableRequest
from tablesafe.catalog._catalog import Catalog
from tablesafe.cells._plan import TabulationPlan
from tablesafe.output._table import ProtectedTable
from tablesafe.rules._ceiling._blocks import MAX_CELLS
from tablesafe.rules._ceiling._constraints import Intervals, open_cells
from tablesafe.rules._ceiling._cross import Cross, atoms_of, columns_of
from tablesafe.rules._ceiling._intervals import published_intervals

__all__ = ["Nearest"]


@dataclass
class Nearest:
    """The selection, with what it reads of each table kept (plans, columns, intervals).

    Args:
        catalog: The dataset's catalog.
        protection: The site's protection (public).
        min_cell_size: The small-cell rule's ``k``.
        max_cells: The most open cells of the tables measured together.
    """

    catalog: Catalog
    protection: Protection
    min_cell_size: int
    max_cells: int
    # Kept per request: a request's table is the same in every build (same request, same bytes).
    _plans: dict[TableRequest, TabulationPlan] = field(default_factory=dict)
    _columns: dict[TableRequest, frozenset[str]] = field(default_factory=dict)
    _intervals: dict[TableRequest, Intervals] = field(default_factory=dict)

    def columns(self, table: ProtectedTable) -> frozenset[str]:
        """The microdata columns a table's figures constrain."""
        key = table.request
        if key not in self._columns:
            self._columns[key] = frozenset(columns_of(self.catalog, [table.request]))
        return self._columns[key]

    def _plan(self, table: ProtectedTable) -> TabulationPlan:
        key = table.request
        if key not in self._plans:
            self._plans[key] = table.request.coerced(self.catalog).bind(self.catalog)
        return self._plans[key]

    def _interval(self, table: ProtectedTable) -> Intervals:
        key = table.request
        if key not in self._intervals:
            self._intervals[key] = published_intervals(
                table, self.protection, min_cell_size=self.min_cell_size
            )
        return self._intervals[key]

    def forget(self, table: ProtectedTable) -> None:
        """Drop what is kept of a table not published (a candidate refused)."""
        for kept in (self._plans, self._columns, self._intervals):
            kept.pop(table.request, None)

    def select(
        self, table: ProtectedTable, published: Sequence[ProtectedTable]
    ) -> tuple[list[ProtectedTable], int]:
        """The published tables measured with ``table``, and its component's size.

        Returns:
            ``(nearest, component)``: the tables chosen, in the order
            chosen, and how many published tables the component holds.
        """
        ordered = self._ordered(table, published)
        chosen: list[ProtectedTable] = []
        for other in ordered:
            if self.fits([table, *chosen, other]):
                chosen.append(other)
        return chosen, len(ordered)

    def _ordered(
        self, table: ProtectedTable, published: Sequence[ProtectedTable]
    ) -> list[ProtectedTable]:
        """The component's tables, nearest first (step 1 of the module's rule)."""
        own = self.columns(table)
        reach, left = set(own), list(published)
        levels: list[list[ProtectedTable]] = []
        while left:
            level = [t for t in left if self.columns(t) & reach]
            if not level:
                break
            levels.append(level)
            left = [t for t in left if not self.columns(t) & reach]
            for t in level:
                reach |= self.columns(t)
        return [
            t
            for level in levels
            for t in sorted(
                level,
                key=lambda t: (
                    -len(self.columns(t) & own),
                    len(self.columns(t) - own),
                    repr(t.request),
                ),
            )
        ]

    def fits(self, tables: Sequence[ProtectedTable]) -> bool:
        """Whether ``tables`` read at most ``max_cells`` figures and leave as many open cells.

        The figures are the cells the best guess reads of each table (a
        figure two tables publish counts twice); the open cells are counted
        only when a cheap bound does not settle it.
        """
        if sum(int(self._interval(t)[2].sum()) for t in tables) > self.max_cells:
            return False
        plans = [self._plan(t) for t in tables]
        columns = columns_of(self.catalog, [t.request.coerced(self.catalog) for t in tables])
        atoms = atoms_of(self.catalog, plans, columns)
        size = int(np.prod([len(a) for a in atoms], dtype=np.float64))
        if size > MAX_CELLS:
            return False
        # The cells a table covers are its box: a cheap upper bound on the open cells.
        if min(size, sum(_box(p, columns, atoms) for p in plans)) <= self.max_cells:
            return True
        cross = Cross(columns, atoms, np.zeros(size, dtype=np.int64))
        opened = open_cells(self.catalog, cross, tables, [self._interval(t) for t in tables])
        return opened <= self.max_cells


def _box(
    plan: TabulationPlan,
    columns: tuple[str, ...],
    atoms: tuple[tuple[tuple[object, ...], ...], ...],
) -> int:
    """The full cells a table's universe and categories cover: a box of atoms."""
    allowed: dict[str, list[set[object]]] = {}
    for col, codes in plan.universe:
        allowed.setdefault(col, []).append(set(codes))
    for d in plan.dimensions:
        allowed.setdefault(d.column, []).append({m for ms in d.members for m in ms})
    n = 1
    for col, col_atoms in zip(columns, atoms, strict=True):
        # Atoms refine every plan's conditions: an atom's first code speaks for all of it.
        n *= sum(1 for a in col_atoms if all(a[0] in s for s in allowed.get(col, [])))
    return n
