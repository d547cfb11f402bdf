"""The reconstruction attack: rebuild the microdata's cross-classification from published tables.

A database reconstruction attack (Dinur & Nissim 2003; the US Census
Bureau's own attack on its 2010 tables) treats every published cell as a
linear constraint on the unknown counts of the *full cross-classification*
of the variables involved: one unknown ``x_c >= 0``, an integer, per
combination of categories of every source variable that any table or
universe mentions. A published cell of table ``t`` is the sum of the
``x_c`` it covers (its universe, its categories or groups, its margins),
and what the intruder knows of the mechanism turns its published value
``j`` into an interval of true counts:

* no protection: exactly ``j``;
* a ptable (cell-key method, DP, PRAM, drop/add-up-to-q): every original
  count ``i`` with ``p(j - i | i) > 0`` (negatives set to 0 included), of
  which the attack keeps the hull ``[min, max]``;
* record-level drop/add-up-to-q: every ``i`` with ``|j - i| <= q(i)``;
* a suppressed cell (small-cell rule): the union of the intervals of
  ``1 .. k - 1``;
* structural zeros: 0.

Which published cells carry that relation depends on the additivity
option: inner cells for ``aggregate`` tables and the record-level method
(their margins are sums of the inner cells, so they add nothing);
every cell for ``independent`` tables; the grand total alone for ``ipf``
tables (the fitted, rounded inner cells and margins keep no simple relation
to the true ones that the attack uses, so its figures for ``ipf`` are a
lower bound on what a cleverer intruder gets).

A cell is **pinned** (reconstructed exactly) when the minimum and the maximum
of ``x_c`` over the integer points of the feasible set agree. The true
table is such a point, so a cell is pinned exactly when no feasible integer
point differs from the truth in that cell. The attack decides cells in
stages, cheapest first, each of them sound:

1. cells inside a published cell whose interval is ``[0, 0]`` are 0;
2. bound propagation over the constraints (``x_c >= lo - sum of the other
   upper bounds``, ``x_c <= hi - sum of the other lower bounds``), repeated
   to a fixed point: a cell whose bounds meet is pinned;
3. a few integer programs (HiGHS) whose objective pushes every undecided
   cell away from its true value: each integer solution found frees every
   cell in which it differs from the truth;
4. for each cell still undecided, two linear programs (warm-started, one
   model): if the rounded LP maximum and minimum equal the true value the
   cell is pinned (the LP relaxation contains every integer point);
5. for each cell the LPs left open, two integer programs.

Stopped by the time limit, the attack reports the cells still undecided,
and the shares as a range: pinned cells (lower bound) to pinned plus
undecided cells (upper bound).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._builder import TableBuilder
from tablesafe._errors import ParameterError, RequestError
from tablesafe._protection import Protection
from tablesafe._request import TableRequest, TabulationPlan
from tablesafe.attacks._highs import silent_highs
from tablesafe.catalog._catalog import Catalog, Code
from tablesafe.catalog._dataset import Dataset
from tablesafe.output._table import ProtectedTable

__all__ = [
    "ReconstructionResult",
    "all_k_way_requests",
    "published_intervals",
    "reconstruct",
    "reconstruction_attack",
]

#: The largest full cross-classification the attack builds.
MAX_CELLS = 20_000_000

#: Called with (stage, done, total).
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class ReconstructionResult:
    """What the reconstruction attack rebuilt from a set of published tables.

    Shares are fractions (0 to 1). When the time limit stopped the attack
    (``complete`` false), each share is a lower bound and its ``_upper``
    twin counts the undecided cells as pinned.

    Attributes:
        method: The protection's name.
        tables: Number of published tables attacked.
        variables: The source variables of the full cross-classification.
        cells: Its number of cells.
        records: Records in it (the dataset's records).
        uniques: Sample-unique records (cells holding exactly one record).
        cells_exact_share: Share of cells whose count is pinned exactly.
        nonzero_cells_exact_share: The same among cells holding records.
        records_exact_share: Share of records that are in pinned cells.
        uniques_exact_share: Share of sample-unique records in pinned cells
            (re-identified: their full combination of categories is known to
            be held by exactly one record).
        cells_exact_share_upper: Upper bound of ``cells_exact_share``.
        records_exact_share_upper: Upper bound of ``records_exact_share``.
        uniques_exact_share_upper: Upper bound of ``uniques_exact_share``.
        undecided: Cells left undecided by the time limit.
        complete: Whether every cell was decided.
        seconds: Time the attack took (building the tables included).
        stages: Cells decided by each stage (``zeros``, ``propagation``,
            ``milp_free``, ``lp_pinned``, ``lp_free``, ``milp_pinned``, ``milp_free_cell``).
    """

    method: str
    tables: int
    variables: tuple[str, ...]
    cells: int
    records: int
    uniques: int
    cells_exact_share: float
    nonzero_cells_exact_share: float
    records_exact_share: float
    uniques_exact_share: float
    cells_exact_share_upper: float
    records_exact_share_upper: float
    uniques_exact_share_upper: float
    undecided: int
    complete: bool
    seconds: float
    stages: Mapping[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The result as a plain dictionary (JSON-ready)."""
        out = dict(self.__dict__)
        out["variables"] = list(self.variables)
        out["stages"] = dict(self.stages)
        return out


# -- what the intruder knows of the mechanism -------------------------------------------


def _ptable_hull(mech: Any, top: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Per published value ``j`` in ``0 .. top``: the hull of the true counts that can give it."""
    rows = list(mech.rows) + list(getattr(mech, "residue_rows", ()))
    vmin = min(int(np.min(np.asarray(v)[np.asarray(p) > 0])) for v, p in rows)
    vmax = max(int(np.max(np.asarray(v)[np.asarray(p) > 0])) for v, p in rows)
    size = top + 1
    counts = np.arange(top - min(vmin, 0) + 1, dtype=np.int64)
    rid = mech.row_index(counts)
    lo = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(size, -1, dtype=np.int64)
    for r in np.unique(rid):
        v, p = rows[int(r)]
        i = counts[rid == r]
        for vi in np.asarray(v)[np.asarray(p) > 0].tolist():
            j = np.maximum(i + int(vi), 0)
            ok = j < size
            np.minimum.at(lo, j[ok], i[ok])
            np.maximum.at(hi, j[ok], i[ok])
    del vmax
    return lo, hi


def _records_hull(mech: Any, top: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """As :func:`_ptable_hull` for record-level drop/add-up-to-q: ``|j - i| <= q(i)``."""
    size = top + 1
    big = 2 * size + 10
    reach = int(mech.q(np.array([big]))[0])
    counts = np.arange(size + reach + 1, dtype=np.int64)
    q = mech.q(counts)
    lo = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(size, -1, dtype=np.int64)
    for d in range(-reach, reach + 1):
        ok = np.abs(d) <= q
        j = counts + d
        ok &= (j >= 0) & (j < size)
        np.minimum.at(lo, j[ok], counts[ok])
        np.maximum.at(hi, j[ok], counts[ok])
    return lo, hi


def published_intervals(
    table: ProtectedTable, protection: Protection, *, min_cell_size: int = 0
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """The interval of true counts each published cell allows, as the intruder sees it.

    Args:
        table: A published table (counts, all its computed cells).
        protection: The protection it was built with (public: the site publishes it).
        min_cell_size: The small-cell rule's ``k`` (suppressed cells are read as 1 .. k-1).

    Returns:
        ``(lo, hi, used)``: extended arrays; ``used`` marks the cells the attack
        reads (the others are sums of used ones, or not published).

    Raises:
        RequestError: if the table has no counts.
        ParameterError: for a cell-wise mechanism that is not a ptable.
    """
    if table.counts is None:
        raise RequestError(
            "the reconstruction attack needs published counts: ask for statistic 'count' or 'both'"
        )
    counts = table.counts.astype(np.int64)
    shape = counts.shape
    computed = table.computed
    sz = table.structural_zero
    suppressed = table.suppressed if table.suppressed is not None else np.zeros(shape, dtype=bool)
    mech = protection.mechanism
    inner = np.zeros(shape, dtype=bool)
    inner[table.inner] = True
    if mech is None:
        used = computed.copy()
    elif protection.record_level or protection.additivity == "aggregate":
        used = computed & inner
    elif protection.additivity == "independent":
        used = computed.copy()
    else:  # ipf: the grand total alone
        used = np.zeros(shape, dtype=bool)
        used[tuple(s - 1 for s in shape)] = bool(computed[tuple(s - 1 for s in shape)])
    shown = np.where(suppressed, 0, counts)
    top = int(max(int(shown.max()) if shown.size else 0, min_cell_size))
    if mech is None:
        lo_j = hi_j = np.arange(top + 1, dtype=np.int64)
    elif protection.record_level:
        lo_j, hi_j = _records_hull(mech, top)
    elif hasattr(mech, "rows") and hasattr(mech, "row_index"):
        lo_j, hi_j = _ptable_hull(mech, top)
    else:
        raise ParameterError(
            "the reconstruction attack knows ptables and record-level drop/add-up-to-q; "
            f"{type(mech).__name__} is neither"
        )
    lo = lo_j[shown]
    hi = hi_j[shown]
    if suppressed.any():
        k = max(min_cell_size, 2)
        lo_s = int(lo_j[1:k].min())
        hi_s = int(hi_j[1:k].max())
        lo = np.where(suppressed, lo_s, lo)
        hi = np.where(suppressed, hi_s, hi)
    if mech is None:
        lo = np.where(suppressed, lo, shown)
        hi = np.where(suppressed, hi, shown)
    lo = np.where(sz, 0, lo)
    hi = np.where(sz, 0, hi)
    used = used | (sz & computed)
    return lo.astype(np.int64), hi.astype(np.int64), used


# -- the full cross-classification ------------------------------------------------------


@dataclass
class _Cross:
    """The full cross-classification: columns, their atoms, the truth.

    The categories of a column are its *atoms*: the classes of source codes
    that no published table or universe tells apart (the coarsest common
    refinement of every grouping and condition used on the column). A table
    by age groups alone makes the groups the atoms; one by age groups and one
    by five-year bands make their intersections the atoms.
    """

    columns: tuple[str, ...]
    atoms: tuple[tuple[tuple[Code, ...], ...], ...]  # per column, per atom, its codes
    truth: npt.NDArray[np.int64]  # flat, C order over the atoms

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a) for a in self.atoms)

    def atom(self, axis: int, code: Code) -> int:
        """The atom of a source code of column ``axis``."""
        lookup: dict[tuple[int, Code], int] = getattr(self, "_lookup", {})
        if not lookup:
            lookup = {
                (i, c): a
                for i, col in enumerate(self.atoms)
                for a, codes in enumerate(col)
                for c in codes
            }
            object.__setattr__(self, "_lookup", lookup)
        return lookup[(axis, code)]


def _columns_of(catalog: Catalog, requests: Sequence[TableRequest]) -> tuple[str, ...]:
    wanted: set[str] = set()
    for r in requests:
        for d in r.dimensions:
            wanted.add(catalog.variable(d).column)
        for u in r.universe:
            wanted.add(catalog.variable(u).column)
    return tuple(v.column for v in catalog.source_variables if v.column in wanted)


def _atoms(
    catalog: Catalog, plans: Sequence[TabulationPlan], columns: tuple[str, ...]
) -> tuple[tuple[tuple[Code, ...], ...], ...]:
    """Per column, the classes of codes that every plan treats alike (in code order)."""
    source = {v.column: v for v in catalog.source_variables}
    out = []
    for col in columns:
        signature: dict[Code, list[object]] = {c: [] for c in source[col].codes}
        for plan in plans:
            for ucol, codes in plan.universe:
                if ucol == col:
                    allowed = set(codes)
                    for c in signature:
                        signature[c].append(c in allowed)
            for d in plan.dimensions:
                if d.column == col:
                    where = {m: j for j, members in enumerate(d.members) for m in members}
                    for c in signature:
                        signature[c].append(where.get(c, -1))
        classes: dict[tuple[object, ...], list[Code]] = {}
        for c, sig in signature.items():
            classes.setdefault(tuple(sig), []).append(c)
        out.append(tuple(tuple(codes) for codes in classes.values()))
    return tuple(out)


def _read_truth(
    dataset: Dataset,
    columns: tuple[str, ...],
    atoms: tuple[tuple[tuple[Code, ...], ...], ...],
) -> _Cross:
    """Counts of the full cross-classification of ``columns`` (the data owner's truth)."""
    import pyarrow.compute as pc

    catalog = dataset.catalog
    source = {v.column: v for v in catalog.source_variables}
    size = int(np.prod([len(a) for a in atoms], dtype=np.float64))
    if size > MAX_CELLS:
        raise RequestError(
            f"the full cross-classification of {', '.join(columns)} has {size:,} cells; the "
            f"reconstruction attack builds at most {MAX_CELLS:,}: attack fewer or coarser variables"
        )
    if dataset.format == "parquet":
        import pyarrow.parquet as pq

        data = pq.read_table(dataset.path, columns=list(columns))
    else:
        import pyarrow.csv as pacsv

        data = pacsv.read_csv(
            dataset.path, convert_options=pacsv.ConvertOptions(include_columns=list(columns))
        )
    flat = np.zeros(data.num_rows, dtype=np.int64)
    ok = np.ones(data.num_rows, dtype=bool)
    for col, col_atoms in zip(columns, atoms, strict=True):
        codes = [c for a in col_atoms for c in a]
        atom_of = np.array([a for a, members in enumerate(col_atoms) for _ in members])
        values = data.column(col)
        kind = source[col].code_type
        domain = [str(c) for c in codes] if kind is str else codes
        if kind is str:
            values = pc.cast(values, "string")
        idx = pc.index_in(values, value_set=_array(domain)).to_numpy(zero_copy_only=False)
        idx = np.where(np.isnan(idx.astype(float)), -1, idx).astype(np.int64)
        ok &= idx >= 0
        flat = flat * len(col_atoms) + atom_of[np.maximum(idx, 0)]
    truth = np.bincount(flat[ok], minlength=size).astype(np.int64)
    return _Cross(columns, atoms, truth)


def _array(values: list[Any]) -> Any:
    import pyarrow as pa

    return pa.array(values)


def _table_rows(
    catalog: Catalog, cross: _Cross, table: ProtectedTable
) -> list[tuple[tuple[int, ...], npt.NDArray[np.int64]]]:
    """Per computed grouping set: the table's extended flat index of every full cell (-1: none)."""
    request = table.request
    plan = request.bind(catalog)
    shape = cross.shape
    k = len(shape)
    position = {c: i for i, c in enumerate(cross.columns)}
    allowed = np.ones(shape, dtype=bool)
    for col, codes in plan.universe:
        axis = position[col]
        keep = np.isin(np.arange(shape[axis]), [cross.atom(axis, c) for c in codes])
        allowed &= keep.reshape([-1 if i == axis else 1 for i in range(k)])
    dim_idx: list[npt.NDArray[np.int64]] = []
    for d in plan.dimensions:
        axis = position[d.column]
        idx = np.full(shape[axis], -1, dtype=np.int64)
        for j, members in enumerate(d.members):
            for m in members:
                idx[cross.atom(axis, m)] = j
        allowed &= (idx >= 0).reshape([-1 if i == axis else 1 for i in range(k)])
        dim_idx.append(idx.reshape([-1 if i == axis else 1 for i in range(k)]))
    ext = table.shape
    strides = [int(np.prod(ext[i + 1 :], dtype=np.int64)) for i in range(len(ext))]
    sets = [
        gs
        for gs in itertools.chain.from_iterable(
            itertools.combinations(range(len(ext)), r) for r in range(len(ext), -1, -1)
        )
    ]
    out = []
    for gs in sets:
        cell = tuple(slice(0, ext[i] - 1) if i in gs else ext[i] - 1 for i in range(len(ext)))
        if not table.computed[cell].all():
            continue
        flat = np.zeros(shape, dtype=np.int64)
        for i, idx in enumerate(dim_idx):
            part = idx if i in gs else np.full_like(idx, ext[i] - 1)
            flat = flat + part * strides[i]
        out.append((gs, np.where(allowed, flat, -1).reshape(-1)))
    return out


# -- the attack -------------------------------------------------------------------------


@dataclass
class _System:
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


def _system(
    catalog: Catalog,
    cross: _Cross,
    tables: Sequence[ProtectedTable],
    intervals: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> tuple[_System, npt.NDArray[np.float64]]:
    """The constraints of every published cell, and each full cell's upper bound."""
    n = cross.truth.size
    ub = np.full(n, np.inf)
    layouts = [_table_rows(catalog, cross, t) for t in tables]
    for layout, (lo, hi, used) in zip(layouts, intervals, strict=True):
        lo_f, hi_f, used_f = lo.reshape(-1), hi.reshape(-1), used.reshape(-1)
        for _gs, flat in layout:
            ok = flat >= 0
            ok[ok] = used_f[flat[ok]]
            ub[ok] = np.minimum(ub[ok], hi_f[flat[ok]])
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
    system = _System(
        alive=alive,
        rows=np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64),
        cols=np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64),
        lo=np.asarray(los, dtype=np.float64),
        hi=np.asarray(his, dtype=np.float64),
    )
    return system, ub


def _propagate(
    system: _System, lb: npt.NDArray[np.float64], ub: npt.NDArray[np.float64], deadline: float
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


class _Model:
    """One HiGHS model of the undecided cells (LP or MILP), objective changed per solve."""

    def __init__(
        self,
        system: _System,
        free: npt.NDArray[np.int64],
        lb: npt.NDArray[np.float64],
        ub: npt.NDArray[np.float64],
        *,
        integer: bool,
    ) -> None:
        import highspy

        self.hs = highspy
        # Every cell not in ``free`` is held at its lower bound (equal to its upper).
        fixed = np.ones(lb.size, dtype=bool)
        fixed[free] = False
        a = system.matrix()
        fixed_sum = a @ np.where(fixed, lb, 0.0)
        sub = system.matrix(csc=True)[:, free]
        keep = np.diff(sub.tocsr().indptr) > 0
        sub = sub[keep].tocsc()
        self.a = sub.tocsr()
        self.row_lo = (system.lo - fixed_sum)[keep]
        self.row_hi = (system.hi - fixed_sum)[keep]
        self.lb = lb[free].copy()
        self.ub = ub[free].copy()
        inf = highspy.kHighsInf
        lp = highspy.HighsLp()
        lp.num_col_ = int(free.size)
        lp.num_row_ = int(sub.shape[0])
        lp.col_cost_ = np.zeros(free.size)
        lp.col_lower_ = self.lb
        lp.col_upper_ = np.where(np.isinf(self.ub), inf, self.ub)
        lp.row_lower_ = self.row_lo
        lp.row_upper_ = np.where(np.isinf(self.row_hi), inf, self.row_hi)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = sub.indptr.astype(np.int32)
        lp.a_matrix_.index_ = sub.indices.astype(np.int32)
        lp.a_matrix_.value_ = sub.data.astype(np.float64)
        lp.a_matrix_.num_col_ = int(free.size)
        lp.a_matrix_.num_row_ = int(sub.shape[0])
        if integer:
            lp.integrality_ = [highspy.HighsVarType.kInteger] * int(free.size)
        h = silent_highs()  # HiGHS prints a banner on stdout when constructed
        h.setOptionValue("threads", 1)
        h.setOptionValue("random_seed", 0)
        if integer:
            # Any integer point far from the truth serves; optimality is not needed.
            h.setOptionValue("mip_rel_gap", 0.05)
        h.passModel(lp)
        self.h = h
        self._costed: list[int] = []

    def objective(self, costs: Mapping[int, float] | npt.NDArray[np.float64]) -> None:
        """Set the objective (column -> cost; others 0)."""
        h = self.h
        if isinstance(costs, np.ndarray):
            h.changeColsCost(
                costs.size, np.arange(costs.size, dtype=np.int32), costs.astype(np.float64)
            )
            self._costed = list(range(costs.size))
            return
        for c in self._costed:
            h.changeColCost(c, 0.0)
        for c, v in costs.items():
            h.changeColCost(int(c), float(v))
        self._costed = [int(c) for c in costs]

    def sense(self, sense: str) -> None:
        """Maximise or minimise (changed only when it differs: a change drops a start point)."""
        if getattr(self, "_sense", None) != sense:
            hs = self.hs
            self.h.changeObjectiveSense(
                hs.ObjSense.kMaximize if sense == "max" else hs.ObjSense.kMinimize
            )
            self._sense = sense

    def start(self, x: npt.NDArray[np.float64]) -> None:
        """Give the solver a feasible point to start from (the truth: always feasible)."""
        sol = self.hs.HighsSolution()
        sol.col_value = [float(v) for v in x]
        sol.value_valid = True
        self.h.setSolution(sol)

    def solve(
        self, sense: str, seconds: float
    ) -> tuple[str, float | None, npt.NDArray[np.float64] | None]:
        """Solve; returns (status, objective or None, a feasible point or None)."""
        hs = self.hs
        h = self.h
        h.setOptionValue("time_limit", max(float(seconds), 0.01))
        self.sense(sense)
        h.run()
        status = h.getModelStatus()
        info = h.getInfo()
        point = None
        if int(info.primal_solution_status) == 2:
            point = np.asarray(h.getSolution().col_value, dtype=np.float64)
        if status == hs.HighsModelStatus.kOptimal:
            return "optimal", float(info.objective_function_value), point
        if status == hs.HighsModelStatus.kInfeasible:
            return "infeasible", None, None
        return "stopped", None, point

    def integral_point(self, x: npt.NDArray[np.float64] | None) -> npt.NDArray[np.int64] | None:
        """``x`` rounded, if it is an integer point of the feasible set."""
        if x is None or not np.all(np.abs(x - np.rint(x)) < 1e-6):
            return None
        xi = np.rint(x)
        if np.any(xi < self.lb - 1e-9) or np.any(xi > self.ub + 1e-9):
            return None
        s = self.a @ xi
        if np.any(s < self.row_lo - 1e-6) or np.any(s > self.row_hi + 1e-6):
            return None
        return xi.astype(np.int64)


def _repair(
    system: _System,
    movable: npt.NDArray[np.int64],
    lb: npt.NDArray[np.float64],
    ub: npt.NDArray[np.float64],
    lp: _Model,
    x: npt.NDArray[np.float64] | None,
    deadline: float,
) -> npt.NDArray[np.int64] | None:
    """An integer point near an LP vertex ``x``: its integral cells held, the others solved for."""
    if x is None:
        return None
    xr = np.rint(x)
    integral = np.abs(x - xr) < 1e-7
    if integral.all():
        return lp.integral_point(xr)
    lb2, ub2 = lb.copy(), ub.copy()
    lb2[movable[integral]] = xr[integral]
    ub2[movable[integral]] = xr[integral]
    part = _Model(system, movable[~integral], lb2, ub2, integer=True)
    part.h.setOptionValue("mip_max_improving_sols", 1)
    _, _, y = part.solve("max", min(deadline - time.monotonic(), 10.0))
    yi = part.integral_point(y)
    if yi is None:
        return None
    point = xr.copy()
    point[~integral] = yi
    return lp.integral_point(point)


def _partitions(k: int, m: int) -> list[tuple[int, ...]]:
    """Every partition of ``k`` variables into ``m`` nonempty blocks, each block a bitmask."""
    out = []
    for labels in itertools.product(range(m), repeat=k):
        first: list[int] = []
        for label in labels:
            if label not in first:
                first.append(label)
        if first == list(range(m)):
            out.append(tuple(sum(1 << i for i in range(k) if labels[i] == g) for g in range(m)))
    return out


class _BlockMoves:
    """Integer moves that keep every published cell: parities of blocks of variables.

    Split the variables into ``m`` blocks and pick a second cell ``q`` besides
    a cell ``c``; the ``2**m`` cells that take, block by block, either ``c``'s
    categories or ``q``'s form a cube, and the move that adds ``s`` to the cells
    with an even number of blocks from ``q`` and subtracts ``s`` from the others
    changes no sum over fewer than ``m`` variables (on any ``m - 1`` blocks
    it sums to zero over the one left). With ``m`` one more than the most
    variables a published cell conditions on, it keeps every published cell,
    so the truth plus the move is an integer point whenever no cell leaves its
    bounds: a witness that frees all ``2**m`` cells. Candidates are checked
    against the constraints anyway before they count.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        cells: npt.NDArray[np.int64],
        up: npt.NDArray[np.bool_],
        down: npt.NDArray[np.bool_],
        m: int,
        rng: np.random.Generator,
    ) -> None:
        k = len(shape)
        size = int(np.prod(shape, dtype=np.int64))
        self.shape = shape
        self.strides = np.array(
            [int(np.prod(shape[i + 1 :], dtype=np.int64)) for i in range(k)], dtype=np.int64
        )
        self.can = {1: np.zeros(size, dtype=bool), -1: np.zeros(size, dtype=bool)}
        self.can[1][cells] = up
        self.can[-1][cells] = down
        self.rng = rng
        parts = np.array(_partitions(k, m), dtype=np.int64).reshape(-1, m)
        self.parts = parts
        subsets = np.arange(2**m)
        member = (subsets[:, None] >> np.arange(m)[None, :]) & 1  # 2^m x m
        self.cube = np.bitwise_or.reduce(np.where(member[None] == 1, parts[:, None, :], 0), axis=2)
        self.odd = member.sum(axis=1) % 2 == 1
        self.bits = ((np.arange(2**k)[None, :] >> np.arange(k)[:, None]) & 1).astype(np.int64)
        self.m = m

    def find(
        self, cell: int, s: int, chunk: int = 512
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """A move adding ``s`` to full cell ``cell``: (cells, changes), or None."""
        if self.parts.size == 0 or not self.can[s][cell]:
            return None
        cc = np.array(np.unravel_index(cell, self.shape), dtype=np.int64)
        # The cell with every block from q has m blocks from q: its sign is s if m is even.
        far = s if self.m % 2 == 0 else -s
        cand = np.stack(np.unravel_index(np.flatnonzero(self.can[far]), self.shape), axis=1)
        order = self.rng.permutation(cand.shape[0])
        even_cols = self.cube[:, ~self.odd]
        odd_cols = self.cube[:, self.odd]
        for start in range(0, min(order.size, 2 * chunk), chunk):
            q = cand[order[start : start + chunk]]
            differ = q != cc[None, :]
            dmask = (differ.astype(np.int64) << np.arange(cc.size)[None, :]).sum(axis=1)
            idx = cell + ((q - cc[None, :]) * self.strides[None, :]) @ self.bits  # nq x 2^k
            ok_s = self.can[s][idx]
            ok_m = self.can[-s][idx]
            valid = ok_s[:, even_cols].all(axis=2) & ok_m[:, odd_cols].all(axis=2)
            valid &= ((dmask[:, None, None] & self.parts[None, :, :]) != 0).all(axis=2)
            hits = np.argwhere(valid)
            if hits.size:
                qi, p = (int(v) for v in hits[0])
                cube = idx[qi, self.cube[p]]
                change = np.where(self.odd, -s, s).astype(np.int64)
                return cube, change
        return None


def reconstruct(
    system: _System,
    ub0: npt.NDArray[np.float64],
    truth: npt.NDArray[np.int64],
    *,
    time_limit: float,
    shape: tuple[int, ...] | None = None,
    width: int = 3,
    blocks: int = 0,
    progress: Progress | None = None,
) -> tuple[npt.NDArray[np.int8], dict[str, int]]:
    """Decide, for every cell, whether the published constraints pin its count.

    Args:
        system: The constraints on the cells that may hold records.
        ub0: Each full cell's upper bound from single cells (0: pinned at 0).
        shape: The shape of the full cross-classification (for neighbourhood
            search in slices; none without it).
        width: Variables left free in a slice (one more than the most
            dimensions of a published table serves well).
        blocks: Blocks of the block-parity moves: one more than the most
            variables a published cell conditions on (0: no such moves).
        truth: The true counts (flat; a feasible integer point).
        time_limit: Seconds before the attack stops with partial results.
        progress: Called with (stage, done, total).

    Returns:
        ``(state, stages)``: per full cell 1 pinned, 0 free, -1 undecided;
        and the cells decided by each stage.
    """
    deadline = time.monotonic() + time_limit
    n = truth.size
    state = np.full(n, -1, dtype=np.int8)
    stages = dict.fromkeys(
        (
            "zeros",
            "propagation",
            "single_moves",
            "milp_free",
            "block_free",
            "slice_free",
            "lp_pinned",
            "lp_free",
            "milp_pinned",
            "milp_free_cell",
        ),
        0,
    )
    dead = ub0 <= 0
    state[dead] = 1
    stages["zeros"] = int(dead.sum())
    alive = system.alive
    t = truth[alive].astype(np.float64)
    lb = np.zeros(alive.size)
    ub = ub0[alive].astype(np.float64)
    unconstrained = np.isinf(ub)
    lb, ub = _propagate(system, lb, ub, deadline)
    if np.any(lb > t) or np.any(ub < t):
        raise RuntimeError("the true table violates the published constraints")  # a bug, not input
    local = np.full(alive.size, -1, dtype=np.int8)
    local[lb == ub] = 1
    local[np.isinf(ub) | unconstrained] = 0
    stages["propagation"] = int((local == 1).sum())
    undecided = np.flatnonzero(local == -1)

    def finish() -> tuple[npt.NDArray[np.int8], dict[str, int]]:
        state[alive] = local
        return state, stages

    # Stage 2b: a cell that can move by one on its own (every published cell
    # holding it has room) is free, whatever the others do.
    if undecided.size and system.lo.size:
        from scipy import sparse

        a = sparse.csr_matrix(
            (np.ones(system.rows.size), (system.rows, system.cols)),
            shape=(system.lo.size, alive.size),
        )
        at = a @ t
        room_up = system.hi - at
        room_down = at - system.lo
        up = np.full(alive.size, np.inf)
        down = np.full(alive.size, np.inf)
        np.minimum.at(up, system.cols, room_up[system.rows])
        np.minimum.at(down, system.cols, room_down[system.rows])
        single = (local == -1) & (((up >= 1) & (t + 1 <= ub)) | ((down >= 1) & (t - 1 >= lb)))
        local[single] = 0
        stages["single_moves"] = int(single.sum())
        undecided = np.flatnonzero(local == -1)
    if undecided.size == 0 or time.monotonic() > deadline:
        return finish()
    rng = np.random.default_rng(0)
    # Stage 3: integer points pushed away from the truth free many cells at once.
    # A linear program pushes every open cell away from its true value; its
    # vertex is integral in most cells, and a small integer program completes
    # the few fractional ones (the others held where the vertex put them).
    # The models hold every cell that can move (those already shown free too):
    # a cell left out would be read as fixed.
    movable = np.flatnonzero(lb < ub)
    lp = _Model(system, movable, lb, ub, integer=False)
    tu = t[movable]
    open_ = local[movable] == -1
    # Stage 3a: block-parity moves (see _BlockMoves) around each open cell,
    # taken one after the other: the walk's current point ``y`` is an integer
    # point, every cell in which it differs from the truth is free, and each
    # move opens new moves (the cells it raised can be lowered next).
    if shape is not None and open_.any() and 3 <= blocks <= len(shape):
        y = tu.copy()
        cube_moves = _BlockMoves(shape, alive[movable], y + 1 <= lp.ub, y - 1 >= lp.lb, blocks, rng)
        position = np.full(int(np.prod(shape, dtype=np.int64)), -1, dtype=np.int64)
        position[alive[movable]] = np.arange(movable.size)

        def step_to(c: int, s: int) -> bool:
            """Move ``y`` by a block move adding ``s`` to movable cell ``c``, if one exists."""
            nonlocal y
            found = cube_moves.find(int(alive[movable[c]]), s)
            if found is None:
                return False
            cells_, change = found
            j = position[cells_]
            x = y.copy()
            x[j] += change
            if lp.integral_point(x) is None:
                return False
            y = x
            cube_moves.can[1][cells_] = y[j] + 1 <= lp.ub[j]
            cube_moves.can[-1][cells_] = y[j] - 1 >= lp.lb[j]
            return True

        stale = 0
        for rnd in range(40):
            todo = rng.permutation(np.flatnonzero(open_))
            before = int(todo.size)
            for step, c in enumerate(todo.tolist()):
                if time.monotonic() > deadline:
                    break
                if progress is not None and step % 200 == 0:
                    progress(f"block moves (round {rnd + 1})", step, int(todo.size))
                if open_[c] and (step_to(c, 1) or step_to(c, -1)):
                    moved = open_ & (y != tu)
                    open_ &= ~moved
                    stages["block_free"] += int(moved.sum())
            if time.monotonic() > deadline or not open_.any():
                break
            if int(open_.sum()) < before:
                stale = 0
                continue
            stale += 1
            if stale > 3:
                break
            # Stuck: wander (random moves anywhere) so that new moves open up.
            for c in rng.choice(movable.size, min(movable.size, 300), replace=False).tolist():
                if time.monotonic() > deadline:
                    break
                step_to(c, int(rng.choice([-1, 1])))
            moved = open_ & (y != tu)
            open_ &= ~moved
            stages["block_free"] += int(moved.sum())
    rounds = 30
    stale = 0
    for rnd in range(rounds):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not open_.any():
            break
        if progress is not None:
            progress("integer points", rnd, rounds)
        sign = np.where(
            tu <= lp.lb, 1.0, np.where(tu >= lp.ub, -1.0, rng.choice([-1.0, 1.0], tu.size))
        )
        lp.objective(np.where(open_, sign, 0.0))
        _, _, x = lp.solve("max", remaining)
        xi = _repair(system, movable, lb, ub, lp, x, deadline)
        moved = np.zeros(open_.size, dtype=bool) if xi is None else open_ & (xi != tu)
        open_ &= ~moved
        stages["milp_free"] += int(moved.sum())
        if moved.sum() <= max(1, 0.005 * open_.sum()):
            stale += 1
            if stale >= 2:
                break
    # Stage 3b: neighbourhood search in slices. The cells that share their
    # categories on all but ``width`` variables (a slice) may move while every
    # other cell keeps its true value: a small integer program, started from
    # the truth, pushing the slice's open cells away from it; any point it
    # finds is a point of the whole problem. Sweeps over every slice of a
    # random choice of the fixed variables, until sweeps stop freeing cells.
    if shape is not None and open_.any():
        k = len(shape)
        w = min(k, max(width, 1))
        coords = np.stack(np.unravel_index(alive[movable], shape), axis=1)
        stale_sweeps = 0
        for sweep in range(50):
            if time.monotonic() > deadline or not open_.any():
                break
            fixed_dims = np.sort(rng.choice(k, k - w, replace=False))
            if fixed_dims.size:
                keys = np.ravel_multi_index(
                    tuple(coords[:, fixed_dims].T), tuple(shape[d] for d in fixed_dims)
                )
            else:
                keys = np.zeros(movable.size, dtype=np.int64)
            slices = rng.permutation(np.unique(keys[open_]))
            freed = 0
            for step, key in enumerate(slices.tolist()):
                if time.monotonic() > deadline:
                    break
                if progress is not None and step % 20 == 0:
                    progress(f"slices (sweep {sweep + 1})", step, int(slices.size))
                in_slice = keys == key
                if not (open_ & in_slice).any():
                    continue
                lb2, ub2 = lb.copy(), ub.copy()
                out = movable[~in_slice]
                lb2[out] = t[out]
                ub2[out] = t[out]
                part = _Model(system, movable[in_slice], lb2, ub2, integer=True)
                part.h.setOptionValue("mip_max_improving_sols", 2)
                ts = tu[in_slice]
                sign_s = np.where(
                    ts <= part.lb,
                    1.0,
                    np.where(ts >= part.ub, -1.0, rng.choice([-1.0, 1.0], ts.size)),
                )
                part.objective(np.where(open_[in_slice], sign_s, 0.0))
                part.sense("max")
                part.start(ts)
                _, _, ys = part.solve("max", min(0.5, deadline - time.monotonic()))
                yi = part.integral_point(ys)
                if yi is None:
                    continue
                point = tu.copy()
                point[in_slice] = yi
                xi = lp.integral_point(point.astype(np.float64))
                if xi is None:
                    continue
                moved = open_ & (xi != tu)
                open_ &= ~moved
                freed += int(moved.sum())
            stages["slice_free"] += freed
            stale_sweeps = stale_sweeps + 1 if freed == 0 else 0
            if stale_sweeps >= 3:
                break
    push = np.where(tu <= lp.lb, 1.0, np.where(tu >= lp.ub, -1.0, 1.0))
    local[movable[(local[movable] == -1) & ~open_]] = 0
    milp = _Model(system, movable, lb, ub, integer=True)
    # Stage 4: per cell, the LP maximum and minimum; first, in batches, for
    # the cells at a bound. If the LP maximum of the sum of (x_c - lb_c) over
    # cells whose truth is their lower bound is below 1, no integer point
    # raises any of them; cells the LP does raise leave the batch, and the
    # rest is tried again (and likewise downwards for cells at their upper bound).
    blocked_up = tu >= lp.ub
    blocked_down = tu <= lp.lb
    for sense in ("max", "min"):
        at_bound = open_ & (blocked_down if sense == "max" else blocked_up)
        for _ in range(30):
            if not at_bound.any() or time.monotonic() > deadline:
                break
            lp.objective(at_bound.astype(np.float64))
            status, value, x = lp.solve(sense, deadline - time.monotonic())
            if status != "optimal" or value is None or x is None:
                break
            gain = value - float(tu[at_bound].sum())
            if abs(gain) < 1 - 1e-7:
                if sense == "max":
                    blocked_up |= at_bound
                else:
                    blocked_down |= at_bound
                break
            at_bound &= np.abs(x - tu) < 1e-7
    pinned = open_ & blocked_up & blocked_down
    open_ &= ~pinned
    local[movable[pinned]] = 1
    stages["lp_pinned"] += int(pinned.sum())
    todo = np.flatnonzero(open_)
    lp_open: list[int] = []
    for step, c in enumerate(todo.tolist()):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        if progress is not None and step % 25 == 0:
            progress("linear bounds", step, int(todo.size))
        if not open_[c]:
            continue
        for sense in ("max", "min"):
            if (blocked_up if sense == "max" else blocked_down)[c]:
                continue
            lp.objective({c: 1.0})
            status, value, x = lp.solve(sense, deadline - time.monotonic())
            if status != "optimal" or value is None:
                break
            if sense == "max" and np.floor(value + 1e-7) <= tu[c]:
                blocked_up[c] = True
                lp.h.changeColBounds(c, lp.lb[c], tu[c])
                lp.ub[c] = tu[c]
                milp.h.changeColBounds(c, milp.lb[c], tu[c])
                milp.ub[c] = tu[c]
                continue
            if sense == "min" and np.ceil(value - 1e-7) >= tu[c]:
                blocked_down[c] = True
                lp.h.changeColBounds(c, tu[c], lp.ub[c])
                lp.lb[c] = tu[c]
                milp.h.changeColBounds(c, tu[c], milp.ub[c])
                milp.lb[c] = tu[c]
                continue
            xi = lp.integral_point(x)
            if xi is not None:
                moved = open_ & (xi != tu)
                stages["lp_free"] += int(moved.sum())
                open_ &= ~moved
            break
        if blocked_up[c] and blocked_down[c]:
            open_[c] = False
            local[movable[c]] = 1
            stages["lp_pinned"] += 1
        elif open_[c]:
            lp_open.append(c)
    local[movable[(local[movable] == -1) & ~open_]] = 0
    # Stage 5: integer programs for the cells the LPs left open.
    milp.h.setOptionValue("mip_max_improving_sols", 1)
    for step, c in enumerate(lp_open):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        if progress is not None:
            progress("integer bounds", step, len(lp_open))
        if not open_[c]:
            continue
        # Push the other open cells away from the truth too: one point frees many.
        milp.objective(np.where(open_, push, 0.0))
        for sense in ("max", "min"):
            if (blocked_up if sense == "max" else blocked_down)[c]:
                continue
            # Feasibility: is there an integer point with x_c above (below) the truth?
            lo_c, hi_c = milp.lb[c], milp.ub[c]
            if sense == "max":
                milp.h.changeColBounds(c, tu[c] + 1, hi_c)
            else:
                milp.h.changeColBounds(c, lo_c, tu[c] - 1)
            status, _, x = milp.solve("max", deadline - time.monotonic())
            milp.h.changeColBounds(c, lo_c, hi_c)
            xi = milp.integral_point(x)
            if xi is not None and xi[c] != tu[c]:
                moved = open_ & (xi != tu)
                stages["milp_free_cell"] += int(moved.sum())
                open_ &= ~moved
                local[movable[moved]] = 0
                break
            if status == "infeasible":
                if sense == "max":
                    blocked_up[c] = True
                else:
                    blocked_down[c] = True
        if open_[c] and blocked_up[c] and blocked_down[c]:
            open_[c] = False
            local[movable[c]] = 1
            stages["milp_pinned"] += 1
    return finish()


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


def _shares(state: npt.NDArray[np.int8], truth: npt.NDArray[np.int64]) -> dict[str, float | int]:
    pinned = state == 1
    maybe = state != 0
    records = int(truth.sum())
    uniques = truth == 1
    nonzero = truth > 0

    def share(mask: npt.NDArray[np.bool_], of: npt.NDArray[np.bool_] | None = None) -> float:
        if of is None:
            return round(float(mask.mean()) if mask.size else 0.0, 6)
        total = int(of.sum())
        return round(int((mask & of).sum()) / total, 6) if total else 0.0

    def record_share(mask: npt.NDArray[np.bool_]) -> float:
        return round(int(truth[mask].sum()) / records, 6) if records else 0.0

    return {
        "cells": int(truth.size),
        "records": records,
        "uniques": int(uniques.sum()),
        "cells_exact_share": share(pinned),
        "nonzero_cells_exact_share": share(pinned, nonzero),
        "records_exact_share": record_share(pinned),
        "uniques_exact_share": share(pinned, uniques),
        "cells_exact_share_upper": share(maybe),
        "records_exact_share_upper": record_share(maybe),
        "uniques_exact_share_upper": share(maybe, uniques),
        "undecided": int((state == -1).sum()),
    }


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

    Raises:
        RequestError: for no request, a request without counts, an unknown
            variable or category, or a cross-classification too large.
        ParameterError: for a time limit that is not positive.
    """
    start = time.monotonic()
    if not requests:
        raise RequestError("the reconstruction attack needs at least one table request")
    if not time_limit > 0:
        raise ParameterError(
            f"the time limit must be a positive number of seconds, not {time_limit}"
        )
    catalog = dataset.catalog
    bound = []
    for r in requests:
        # The attack reads counts only; they do not depend on the statistic asked.
        r = replace(r, statistic="count", rounding=None, replicates=False)
        r = r.coerced(catalog)
        r.bind(catalog)
        bound.append(r)
    columns = _columns_of(catalog, bound)
    cross = _read_truth(
        dataset, columns, _atoms(catalog, [r.bind(catalog) for r in bound], columns)
    )
    builder = TableBuilder(dataset, protection, engine=engine)
    tables: list[ProtectedTable] = []
    intervals = []
    if min_cell_size > 0:
        from tablesafe._settings import RuleSettings
        from tablesafe.rules._rules import apply_small_cell_rule

        rules = RuleSettings.model_validate(
            {"min_cell_size": min_cell_size, "small_cell_action": small_cell_action}
        )
    for i, r in enumerate(bound):
        if progress is not None:
            progress("publishing tables", i, len(bound))
        table = builder.build(r)
        if min_cell_size > 0:
            table = apply_small_cell_rule(table, rules)
        tables.append(table)
        intervals.append(published_intervals(table, protection, min_cell_size=min_cell_size))
    system, ub0 = _system(catalog, cross, tables, intervals)
    remaining = time_limit - (time.monotonic() - start)
    width = max(len(r.dimensions) for r in bound) + 2
    state, stages = reconstruct(
        system,
        ub0,
        cross.truth,
        time_limit=max(remaining, 0.01),
        shape=cross.shape,
        width=width,
        blocks=max(len(r.dimensions) + len(r.universe) for r in bound) + 1,
        progress=progress,
    )
    shares = _shares(state, cross.truth)
    return ReconstructionResult(
        method=name or str(protection.describe().get("name", "none")),
        tables=len(tables),
        variables=columns,
        cells=int(shares["cells"]),
        records=int(shares["records"]),
        uniques=int(shares["uniques"]),
        cells_exact_share=float(shares["cells_exact_share"]),
        nonzero_cells_exact_share=float(shares["nonzero_cells_exact_share"]),
        records_exact_share=float(shares["records_exact_share"]),
        uniques_exact_share=float(shares["uniques_exact_share"]),
        cells_exact_share_upper=float(shares["cells_exact_share_upper"]),
        records_exact_share_upper=float(shares["records_exact_share_upper"]),
        uniques_exact_share_upper=float(shares["uniques_exact_share_upper"]),
        undecided=int(shares["undecided"]),
        complete=int(shares["undecided"]) == 0,
        seconds=round(time.monotonic() - start, 3),
        stages=stages,
    )
