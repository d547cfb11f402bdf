"""Additivity of protected tables: the data owner's three options (DESIGN decision 6).

Seed 000 (Shlomo, Krenzke & Li 2019, Section 2.4) discusses how perturbed
inner cells and margins relate:

1. ``"aggregate"``: perturb the inner cells only and sum them for the
   margins. Additive, but the noise of a margin grows with its number of
   cells, and a margin is not the same across tables that share it.
2. ``"independent"``: perturb every cell, margins included, with its own
   seed. Consistent (a margin is the same in every table that contains it)
   but not additive.
3. ``"ipf"``: as 2, then make the table additive again: fit the inner cells
   to the perturbed margins by iterative proportional fitting (IPF) and
   round them to integers that add up (controlled rounding).

This module implements option 3's two steps on extended arrays (see
:mod:`tablesafe.cells._aggregates`): :func:`fit_to_margins` and
:func:`controlled_rounding`. The options themselves are
:class:`tablesafe._protection_limits.Additivity`.

Perturbed margins of different orders are generally inconsistent (the row
totals do not sum to the perturbed grand total). :func:`fit_to_margins`
therefore works down from the grand total: each requested margin of order
m is fitted by IPF to the already fitted margins of order m - 1 that it
contains, and finally the inner cells to the fitted margins of order k - 1.
Every fitted level is consistent with the one below, so IPF converges
unless zeros make the fit impossible (a positive margin whose cells are all
zero), in which case zero cells that are not structural zeros are given a
small positive start value and the fit is retried. Structural zeros can tie
margins together (the under-15s' row margin must equal the "not applicable"
column margin); perturbed independently, such margins cannot all be met.
Then the margins are first replaced by the closest consistent ones (the
margins of the non-negative least-squares fit of the inner cells to every
released cell) and the perturbed inner cells are fitted to those. If that
fails too, a :class:`~tablesafe.ComputationError` is raised.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ComputationError, ParameterError
from tablesafe.cells._aggregates import all_grouping_sets

__all__ = [
    "FitResult",
    "aggregate_margins",
    "classic_ipf",
    "controlled_rounding",
    "fit_to_margins",
]


def _sets_by_order(grouping_sets: tuple[tuple[int, ...], ...], k: int) -> list[tuple[int, ...]]:
    return sorted({gs for gs in grouping_sets if len(gs) < k}, key=lambda g: (len(g), g))


def _index(shape: tuple[int, ...], gs: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(0, s - 1) if i in gs else slice(s - 1, s) for i, s in enumerate(shape))


def aggregate_margins(
    values: npt.NDArray[np.floating] | npt.NDArray[np.integer],
    grouping_sets: tuple[tuple[int, ...], ...],
    *,
    lead: int = 0,
) -> np.ndarray:
    """Return a copy of ``values`` whose margins are the sums of its inner cells.

    Args:
        values: Extended array; only the inner cells are read.
        grouping_sets: The margins to fill (others are set to zero).
        lead: Leading axes that are not dimensions (e.g. a stack of the
            counts, weighted figures and replicates of one table, added up
            in one pass).
    """
    shape = values.shape[lead:]
    k = len(shape)
    head = (slice(None),) * lead
    inner = values[(*head, *(slice(0, s - 1) for s in shape))]
    out = np.zeros_like(values)
    for gs in grouping_sets:
        dropped = tuple(lead + i for i in range(k) if i not in gs)
        out[(*head, *_index(shape, gs))] = (
            inner.sum(axis=dropped, keepdims=True) if dropped else inner
        )
    return out


@dataclass(frozen=True)
class FitResult:
    """Result of fitting a table to its margins.

    Attributes:
        values: The fitted extended array (inner cells and margins consistent).
        iterations: IPF sweeps used, summed over all levels.
        max_discrepancy: Largest absolute difference between a fitted margin
            and the sum of the cells it covers, at the end.
        reseeded: Number of zero cells given a small start value to make the
            fit possible.
        method: ``"ipf"``, or ``"least-squares margins, ipf"`` when the
            perturbed margins could not all be met and were first replaced
            by the closest consistent ones; either followed by ``",
            least-deviation fit where IPF did not converge"`` when a level
            was fitted by linear programming instead (a sparse table, where
            IPF needs hundreds of thousands of sweeps).
    """

    values: np.ndarray
    iterations: int
    max_discrepancy: float
    reseeded: int
    method: str = "ipf"


def classic_ipf(
    seed: np.ndarray,
    targets: list[tuple[tuple[int, ...], np.ndarray]],
    tol: float,
    max_iter: int,
) -> tuple[np.ndarray, int, float]:
    """Classic IPF of the array ``seed`` to marginal ``targets`` (axes kept, sums)."""
    x = seed.astype(np.float64).copy()
    k = x.ndim
    if not targets:
        return x, 0, 0.0
    disc = np.inf
    for it in range(1, max_iter + 1):
        for kept, target in targets:
            dropped = tuple(i for i in range(k) if i not in kept)
            current = x.sum(axis=dropped, keepdims=True) if dropped else x
            with np.errstate(divide="ignore", invalid="ignore"):
                factor = np.where(current > 0, target / current, 0.0)
            x *= factor
        disc = 0.0
        for kept, target in targets:
            dropped = tuple(i for i in range(k) if i not in kept)
            current = x.sum(axis=dropped, keepdims=True) if dropped else x
            disc = max(disc, float(np.max(np.abs(current - target), initial=0.0)))
        if disc <= tol:
            return x, it, disc
    return x, max_iter, disc


def fit_to_margins(
    values: npt.NDArray[np.floating],
    grouping_sets: tuple[tuple[int, ...], ...],
    *,
    structural_zero: npt.NDArray[np.bool_] | None = None,
    tol: float = 1e-6,
    max_iter: int = 1000,
    reseed: float = 1e-3,
) -> FitResult:
    """Make a table additive: fit inner cells to perturbed margins (option 3).

    Args:
        values: Extended array of non-negative perturbed values (inner
            cells and the margins of ``grouping_sets``).
        grouping_sets: The released margins (the inner set is included).
        structural_zero: Cells that must stay zero.
        tol: Convergence tolerance on absolute margin discrepancies, relative
            to max(1, grand total).
        max_iter: Maximum IPF sweeps per level.
        reseed: Start value given to zero cells (not structural zeros) when
            a fit is impossible without it.

    Raises:
        ParameterError: for negative values.
        ComputationError: if a level does not converge.
    """
    if np.any(values < 0):
        raise ParameterError("values to fit must be non-negative")
    shape = values.shape
    sz = np.zeros(shape, dtype=bool) if structural_zero is None else structural_zero
    out = values.astype(np.float64).copy()
    out[sz] = 0.0
    abs_tol = tol * max(1.0, float(out[tuple(s - 1 for s in shape)]))
    try:
        return _hierarchical_fit(out, grouping_sets, sz, abs_tol, max_iter, reseed, "ipf")
    except _NoFit:
        pass
    # Perturbed margins that no table can meet at once (structural zeros tie
    # some margins together): replace them by the closest consistent ones,
    # the margins of the non-negative least-squares fit to every released
    # cell, and fit the perturbed inner cells to those.
    consistent = _least_squares_margins(out, grouping_sets, sz)
    inner = tuple(slice(0, s - 1) for s in shape)
    consistent[inner] = out[inner]
    try:
        return _hierarchical_fit(
            consistent, grouping_sets, sz, abs_tol, max_iter, reseed, "least-squares margins, ipf"
        )
    except _NoFit as exc:
        raise ComputationError(
            f"additivity option 3 did not converge: IPF of the {exc.args[0]} left a "
            f"discrepancy of {exc.args[1]:.3g} after {max_iter} sweeps (tolerance "
            f"{abs_tol:.3g}); choose additivity 'aggregate' or 'independent' for this table"
        ) from None


class _NoFit(Exception):
    """A level of the hierarchical fit did not converge."""


def _hierarchical_fit(
    values: np.ndarray,
    grouping_sets: tuple[tuple[int, ...], ...],
    sz: np.ndarray,
    abs_tol: float,
    max_iter: int,
    reseed: float,
    method: str,
) -> FitResult:
    shape = values.shape
    k = len(shape)
    out = values.copy()
    levels = [*_sets_by_order(grouping_sets, k), tuple(range(k))]
    total_iter, worst, reseeded = 0, 0.0, 0
    for gs in levels:
        if len(gs) == 0:
            continue
        # Targets: the largest released margins inside this level; each is
        # already fitted consistently with everything below it.
        inside = [s for s in levels if set(s) < set(gs)]
        subs = [s for s in inside if not any(set(s) < set(t) for t in inside)] or [()]
        # The cells of this level as a len(gs)-dim array, and its targets.
        cells = out[_index(shape, gs)].reshape([shape[i] - 1 for i in gs])
        zeros = sz[_index(shape, gs)].reshape(cells.shape)
        targets = []
        for s in subs:
            if s == () and () not in grouping_sets:
                continue
            kept = tuple(gs.index(i) for i in s)
            target = out[_index(shape, s)].reshape([shape[i] - 1 if i in s else 1 for i in gs])
            targets.append((kept, target))
        fitted, it, disc = classic_ipf(cells, targets, abs_tol, max_iter)
        if disc > abs_tol:
            start = cells.copy()
            fill = (start <= 0) & ~zeros
            reseeded += int(fill.sum())
            start[fill] = reseed
            fitted, it2, disc = classic_ipf(start, targets, abs_tol, max_iter)
            it += it2
            if disc > abs_tol:
                # IPF converges very slowly where the fit must drive cells to
                # zero (a sparse table): take the cells closest to the
                # perturbed ones, in absolute deviation, that meet the targets.
                lad = _least_deviation_fit(cells, zeros, targets)
                disc = _discrepancy(lad, targets) if lad is not None else np.inf
                if lad is None or disc > abs_tol:
                    names = "inner cells" if len(gs) == k else f"margin over dimensions {list(gs)}"
                    raise _NoFit(names, disc)
                fitted = lad
                if "least-deviation" not in method:
                    method += ", least-deviation fit where IPF did not converge"
        total_iter += it
        worst = max(worst, disc)
        out[_index(shape, gs)] = fitted.reshape(out[_index(shape, gs)].shape)
    return FitResult(
        values=out,
        iterations=total_iter,
        max_discrepancy=worst,
        reseeded=reseeded,
        method=method,
    )


def _discrepancy(x: np.ndarray, targets: list[tuple[tuple[int, ...], np.ndarray]]) -> float:
    """The largest absolute difference between a target and the sum of its cells."""
    k = x.ndim
    worst = 0.0
    for kept, target in targets:
        dropped = tuple(i for i in range(k) if i not in kept)
        current = x.sum(axis=dropped, keepdims=True) if dropped else x
        worst = max(worst, float(np.max(np.abs(current - target), initial=0.0)))
    return worst


def _least_deviation_fit(
    start: np.ndarray, zeros: np.ndarray, targets: list[tuple[tuple[int, ...], np.ndarray]]
) -> np.ndarray | None:
    """Non-negative cells meeting ``targets`` with the least sum of ``|x - start|``.

    A linear program (HiGHS through :func:`scipy.optimize.linprog`, whose
    simplex is deterministic): cells ``x`` and deviations ``u >= |x - start|``,
    structural zeros fixed at 0. ``None`` if no such table exists.
    """
    from scipy import optimize, sparse  # imported when needed: a slow import

    n = start.size
    s = np.maximum(start.astype(np.float64).ravel(), 0.0)
    coords = np.unravel_index(np.arange(n), start.shape)
    rows: list[np.ndarray] = []
    rhs: list[np.ndarray] = []
    offset = 0
    for kept, target in targets:
        if kept:
            sizes = [start.shape[i] for i in kept]
            group = np.ravel_multi_index(tuple(coords[i] for i in kept), sizes)
        else:
            group = np.zeros(n, dtype=np.int64)
        rows.append(group + offset)
        rhs.append(np.asarray(target, dtype=np.float64).ravel())
        offset += rhs[-1].size
    if offset == 0:
        return start.astype(np.float64)
    a_eq = sparse.csr_matrix(
        (np.ones(n * len(rows)), (np.concatenate(rows), np.tile(np.arange(n), len(rows)))),
        shape=(offset, n),
    )
    eye = sparse.identity(n, format="csr")
    # x - u <= s and -x - u <= -s, so u >= |x - s|.
    a_ub = sparse.vstack([sparse.hstack([eye, -eye]), sparse.hstack([-eye, -eye])]).tocsr()
    b_ub = np.concatenate([s, -s])
    a_eq_full = sparse.hstack([a_eq, sparse.csr_matrix((offset, n))]).tocsr()
    upper = np.where(zeros.ravel(), 0.0, np.inf)
    bounds = np.column_stack([np.zeros(2 * n), np.concatenate([upper, np.full(n, np.inf)])])
    c = np.concatenate([np.zeros(n), np.ones(n)])
    res = optimize.linprog(
        c,
        A_ub=a_ub,
        b_ub=b_ub,
        A_eq=a_eq_full,
        b_eq=np.concatenate(rhs),
        bounds=bounds,
        method="highs-ds",
    )
    if res.status != 0 or res.x is None:
        return None
    return np.asarray(np.maximum(res.x[:n], 0.0)).reshape(start.shape)


def _least_squares_margins(
    values: np.ndarray, grouping_sets: tuple[tuple[int, ...], ...], sz: np.ndarray
) -> np.ndarray:
    """Margins of the non-negative inner table closest (least squares) to all released cells."""
    from scipy import optimize, sparse  # imported when needed: a slow import

    shape = values.shape
    k = len(shape)
    inner_shape = tuple(s - 1 for s in shape)
    free = ~sz[tuple(slice(0, s) for s in inner_shape)].ravel()
    var = np.full(free.size, -1)
    var[free] = np.arange(int(free.sum()))
    idx = var.reshape(inner_shape)
    rows: list[int] = []
    cols: list[int] = []
    rhs: list[float] = []
    for gs in grouping_sets:
        dropped = [i for i in range(k) if i not in gs]
        target = values[_index(shape, gs)].reshape(-1)
        moved = np.moveaxis(idx, dropped, list(range(len(dropped))))
        groups = moved.reshape(int(np.prod([inner_shape[i] for i in dropped])), -1).T
        for j, members in enumerate(groups):
            members = members[members >= 0]
            if members.size == 0:
                continue
            rows.extend([len(rhs)] * members.size)
            cols.extend(members.tolist())
            rhs.append(float(target[j]))
    a = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(rhs), int(free.sum())))
    res = optimize.lsq_linear(a, np.array(rhs), bounds=(0, np.inf), lsmr_tol="auto")
    inner = np.zeros(free.size)
    inner[free] = res.x
    full = np.zeros(shape)
    full[tuple(slice(0, s) for s in inner_shape)] = inner.reshape(inner_shape)
    return aggregate_margins(full, grouping_sets)


def controlled_rounding(
    values: npt.NDArray[np.floating],
    grouping_sets: tuple[tuple[int, ...], ...],
    *,
    time_limit: float = 60.0,
) -> npt.NDArray[np.int64]:
    """Round an additive table to integers that add up (controlled rounding).

    Each inner cell is rounded to the integer just below or just above its
    value (integers, zeros included, stay as they are); the margins are
    then the sums of the rounded cells. Among such roundings, one is chosen
    whose margins are also roundings (floor or ceiling) of the given
    margins, solved as a mixed-integer program with HiGHS
    (:func:`scipy.optimize.milp`). For two-way tables such a rounding
    always exists (the constraint matrix is totally unimodular) and the
    root of the search finds it; for larger tables, if none exists, the
    margins' excursions beyond floor/ceiling are made small.

    The search stops after its root node, a limit counted in work, not in
    time: the answer is the same on every run and machine (a time limit
    made the rounding of a four-way table depend on how far the solver had
    got, so the same request gave different bytes). The root alone finds an
    optimal rounding of two-way tables and a good one of larger tables (a
    1,920-cell four-way table in about 6 s; more nodes improved nothing in
    25 s). ``time_limit`` only guards against a runaway solve: reaching it
    refuses the table instead of publishing whatever was found by then.

    Args:
        values: Extended array, additive (e.g. from :func:`fit_to_margins`).
        grouping_sets: The margins to respect.
        time_limit: Seconds after which the rounding is refused.

    Returns:
        Extended int64 array: rounded inner cells and their margin sums.

    Raises:
        ComputationError: if the solver fails or reaches ``time_limit``.
    """
    shape = values.shape
    inner_shape = tuple(s - 1 for s in shape)
    x = values[tuple(slice(0, s) for s in inner_shape)].astype(np.float64).ravel()
    lo = np.floor(x + 1e-9)
    hi = np.ceil(x - 1e-9)
    hi = np.maximum(hi, lo)
    bands = _margin_bands(values, grouping_sets)
    if not bands[2]:
        out_inner = np.rint(x)
        return _extend(out_inner.reshape(inner_shape).astype(np.int64), grouping_sets, shape)
    y = _solve_rounding(x, lo, hi, bands, time_limit)
    return _extend(y.reshape(inner_shape), grouping_sets, shape)


#: The margin constraints of a controlled rounding: the constraint matrix as
#: coordinates (per entry its row, a margin cell, and its column, an inner
#: cell's flat index), then per row the floor and the ceiling of the margin.
_Bands = tuple[list[int], list[int], list[float], list[float]]


def _margin_bands(
    values: npt.NDArray[np.floating], grouping_sets: tuple[tuple[int, ...], ...]
) -> _Bands:
    """Step 1 of controlled_rounding: one constraint per margin cell, its floor/ceiling band.

    Returns:
        The bands (no row without a margin).
    """
    shape = values.shape
    k = len(shape)
    inner_shape = tuple(s - 1 for s in shape)
    rows: list[int] = []
    cols: list[int] = []
    lb: list[float] = []
    ub: list[float] = []
    idx = np.arange(int(np.prod(inner_shape))).reshape(inner_shape)
    r = 0
    for gs in grouping_sets:
        if len(gs) == k:
            continue
        dropped = [i for i in range(k) if i not in gs]
        target = values[_index(shape, gs)].reshape(-1)
        moved = np.moveaxis(idx, dropped, list(range(len(dropped))))
        groups = moved.reshape(int(np.prod([inner_shape[i] for i in dropped])), -1).T
        for j, members in enumerate(groups):
            rows.extend([r] * len(members))
            cols.extend(members.tolist())
            lb.append(np.floor(target[j] + 1e-9))
            ub.append(np.ceil(target[j] - 1e-9))
            r += 1
    return rows, cols, lb, ub


def _solve_rounding(
    x: npt.NDArray[np.float64],
    lo: npt.NDArray[np.float64],
    hi: npt.NDArray[np.float64],
    bands: _Bands,
    time_limit: float,
) -> npt.NDArray[np.int64]:
    """Step 2 of controlled_rounding: the mixed-integer program, solved at its root node.

    Returns:
        The rounded inner cells, flat.

    Raises:
        ComputationError: if the solver fails or reaches ``time_limit``.
    """
    from scipy import optimize, sparse  # imported when needed: a slow import

    rows, cols, lb, ub = bands
    nvar = x.size
    m = len(lb)
    # Variables: inner cells, then per margin constraint a non-negative slack
    # below and above the floor/ceiling band (zero when a true controlled
    # rounding exists).
    a = sparse.coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(m, nvar)).tocsr()
    eye = sparse.identity(m, format="csr")
    big = sparse.hstack([a, eye, -eye]).tocsr()
    lb_arr, ub_arr = np.array(lb), np.array(ub)
    # Prefer rounding to the nearer integer: a tiny cost on moving away.
    frac = x - lo
    c = np.concatenate([(0.5 - frac) * 1e-3, np.ones(2 * m), np.zeros(0)])
    c[:nvar] = np.where(hi > lo, c[:nvar], 0.0)
    integrality = np.concatenate([np.ones(nvar), np.zeros(2 * m)])
    bounds = optimize.Bounds(
        np.concatenate([lo, np.zeros(2 * m)]),
        np.concatenate([hi, np.full(2 * m, np.inf)]),
    )
    constraint = optimize.LinearConstraint(big, lb_arr, ub_arr)
    res = optimize.milp(
        c,
        constraints=[constraint],
        integrality=integrality,
        bounds=bounds,
        options={"node_limit": 1, "time_limit": time_limit, "disp": False},
    )
    if res.status == 1 and "time limit" in str(res.message).lower():
        raise ComputationError(
            f"the controlled rounding of this table did not finish within {time_limit:g} s; "
            "ask for fewer dimensions or categories"
        )
    if res.x is None:
        raise ComputationError(f"controlled rounding failed: {res.message}")
    y: npt.NDArray[np.int64] = np.rint(res.x[:nvar]).astype(np.int64)
    return y


def _extend(
    inner: npt.NDArray[np.int64], grouping_sets: tuple[tuple[int, ...], ...], shape: tuple[int, ...]
) -> npt.NDArray[np.int64]:
    full = np.zeros(shape, dtype=np.int64)
    full[tuple(slice(0, s - 1) for s in shape)] = inner
    return aggregate_margins(full, grouping_sets)


#: Every grouping set of a k-way table, inner cells first (the cells' own: one owner).
all_sets = all_grouping_sets
