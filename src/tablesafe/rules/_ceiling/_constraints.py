"""The published cells as constraints on the full cross-classification, and bound propagation."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe.catalog._catalog import Catalog
from tablesafe.output._table import ProtectedTable
from tablesafe.rules._ceiling._cross import Cross, table_rows

#: Per table: the lowest and highest true count of each cell, and the cells the attack reads.
Intervals = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]


@dataclass
class System:
    """Constraints ``lo <= A x <= hi`` on the cells that may hold records."""

    alive: npt.NDArray[np.int64]  # full-cell index of each variable
    rows: npt.NDArray[np.int64]  # COO: constraint of each entry
    cols: npt.NDArray[np.int64]  # COO: variable of each entry
    lo: npt.NDArray[np.float64]
    hi: npt.NDArray[np.float64]

    def matrix(self, *, csc: bool = False) -> Any:
        """``A`` as a scipy CSR (or CSC) matrix (built once)."""
        name = "_csc" if csc else "_csr"
        cached = getattr(self, name, None)
        if cached is None:
            from scipy import sparse

            cached = sparse.csr_matrix(
                (np.ones(self.rows.size), (self.rows, self.cols)),
                shape=(self.lo.size, self.alive.size),
            )
            if csc:
                cached = cached.tocsc()
            setattr(self, name, cached)
        return cached


def constraint_system(
    catalog: Catalog,
    cross: Cross,
    tables: Sequence[ProtectedTable],
    intervals: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> tuple[System, npt.NDArray[np.float64]]:
    """The constraints of every published cell, and each full cell's upper bound."""
    n = cross.truth.size
    layouts = [table_rows(catalog, cross, t) for t in tables]
    ub, _ = _upper_bounds(n, layouts, intervals)
    alive = np.flatnonzero(ub > 0)
    var_of = np.full(n, -1, dtype=np.int64)
    var_of[alive] = np.arange(alive.size)
    groups: dict[bytes, int] = {}
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    los: list[float] = []
    his: list[float] = []
    for layout, (lo, hi, used) in zip(layouts, intervals, strict=True):
        lo_f, hi_f, used_f = lo.reshape(-1), hi.reshape(-1), used.reshape(-1)
        for _gs, flat in layout:
            ok = flat >= 0
            ok[ok] = used_f[flat[ok]]
            ok &= var_of >= 0
            cells = flat[ok]
            variables = var_of[ok]
            if cells.size == 0:
                continue
            order = np.argsort(cells, kind="stable")
            cells, variables = cells[order], variables[order]
            starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
            ends = np.r_[starts[1:], cells.size]
            for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
                members = np.sort(variables[s:e])
                key = members.tobytes()
                c = int(cells[s])
                r = groups.get(key)
                if r is None:
                    r = len(los)
                    groups[key] = r
                    rows.append(np.full(members.size, r, dtype=np.int64))
                    cols.append(members)
                    los.append(float(lo_f[c]))
                    his.append(float(hi_f[c]))
                else:
                    los[r] = max(los[r], float(lo_f[c]))
                    his[r] = min(his[r], float(hi_f[c]))
    system = System(
        alive=alive,
        rows=np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64),
        cols=np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64),
        lo=np.asarray(los, dtype=np.float64),
        hi=np.asarray(his, dtype=np.float64),
    )
    return system, ub


def _upper_bounds(
    n: int,
    layouts: Sequence[list[tuple[tuple[int, ...], npt.NDArray[np.int64]]]],
    intervals: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Each full cell's upper bound (inf: no figure), and whether a figure read covers it."""
    ub = np.full(n, np.inf)
    covered = np.zeros(n, dtype=bool)
    for layout, (_lo, hi, used) in zip(layouts, intervals, strict=True):
        hi_f, used_f = hi.reshape(-1), used.reshape(-1)
        for _gs, flat in layout:
            ok = flat >= 0
            ok[ok] = used_f[flat[ok]]
            ub[ok] = np.minimum(ub[ok], hi_f[flat[ok]])
            covered |= ok
    return ub, covered


def open_cells(
    catalog: Catalog,
    cross: Cross,
    tables: Sequence[ProtectedTable],
    intervals: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> int:
    """The full cells a figure read covers and whose published intervals let hold a record."""
    layouts = [table_rows(catalog, cross, t) for t in tables]
    ub, covered = _upper_bounds(cross.truth.size, layouts, intervals)
    return int((covered & (ub > 0)).sum())


def propagate(
    system: System, lb: npt.NDArray[np.float64], ub: npt.NDArray[np.float64], deadline: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Bound propagation to a fixed point (or the deadline); returns integer bounds."""
    from scipy import sparse

    m = system.alive.size
    r = system.lo.size
    if r == 0 or m == 0:
        return lb, ub
    a = sparse.csr_matrix((np.ones(system.rows.size), (system.rows, system.cols)), shape=(r, m))
    rows, cols = system.rows, system.cols
    for _ in range(200):
        inf_ub = np.isinf(ub)
        fin_ub = np.where(inf_ub, 0.0, ub)
        sum_lb = a @ lb
        sum_ub = a @ fin_ub
        n_inf = a @ inf_ub.astype(np.float64)
        # x_c >= lo_r - (sum of the other upper bounds), when those are finite
        others_inf = n_inf[rows] - inf_ub[cols]
        cand_lb = np.where(
            others_inf == 0, system.lo[rows] - (sum_ub[rows] - fin_ub[cols]), -np.inf
        )
        cand_ub = system.hi[rows] - (sum_lb[rows] - lb[cols])
        new_lb = lb.copy()
        new_ub = ub.copy()
        np.maximum.at(new_lb, cols, cand_lb)
        np.minimum.at(new_ub, cols, cand_ub)
        new_lb = np.ceil(new_lb - 1e-9)
        new_ub = np.floor(new_ub + 1e-9)
        if np.array_equal(new_lb, lb) and np.array_equal(new_ub, ub):
            break
        lb, ub = new_lb, new_ub
        if time.monotonic() > deadline:
            break
    return lb, ub


def figures(
    catalog: Catalog,
    cross: Cross,
    tables: Sequence[ProtectedTable],
    intervals: Sequence[Intervals],
    system: System,
) -> tuple[list[npt.NDArray[np.int64]], npt.NDArray[np.float64]]:
    """Every published figure the attack reads: the model's variables it sums, and its value.

    A figure published twice (a margin two tables share) counts twice: each
    publication is a figure the guess should come close to.

    Returns:
        ``(members, values)``: per figure the variables (indices into
        ``system.alive``) it sums, and the published value.
    """
    var_of = np.full(cross.truth.size, -1, dtype=np.int64)
    var_of[system.alive] = np.arange(system.alive.size)
    members: list[npt.NDArray[np.int64]] = []
    values: list[float] = []
    for table, (_lo, _hi, used) in zip(tables, intervals, strict=True):
        assert table.counts is not None  # published_intervals refused tables without counts
        shown = table.counts.reshape(-1).astype(np.float64)
        hidden = (
            table.suppressed.reshape(-1)
            if table.suppressed is not None
            else np.zeros(shown.size, dtype=bool)
        )
        sz = table.structural_zero.reshape(-1)
        read = used.reshape(-1) & ~hidden
        for _gs, flat in table_rows(catalog, cross, table):
            ok = flat >= 0
            ok[ok] = read[flat[ok]]
            cells = flat[ok]
            variables = var_of[ok]
            order = np.argsort(cells, kind="stable")
            cells, variables = cells[order], variables[order]
            if cells.size == 0:
                continue
            starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
            ends = np.r_[starts[1:], cells.size]
            for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
                c = int(cells[s])
                inside = variables[s:e]
                members.append(np.sort(inside[inside >= 0]))
                values.append(0.0 if sz[c] else float(shown[c]))
    return members, np.asarray(values, dtype=np.float64)
