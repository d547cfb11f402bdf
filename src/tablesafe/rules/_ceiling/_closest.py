"""The integer table closest in L1 to published figures: the best guess's solve (HiGHS).

One integer per full cell that may hold records, the published intervals as
hard constraints, one continuous deviation per figure; minimise their sum.
Used by the best guess (:mod:`._putative`) and, with small random costs,
by the confidence-ranked reconstruction (:mod:`._ranked`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe.rules._ceiling._constraints import System
from tablesafe.rules._ceiling._highs import silent_highs

__all__ = ["closest_table", "run_model"]


def run_model(
    lp: Any, *, time_limit: float, max_nodes: int | None, options: dict[str, Any] | None = None
) -> Any:
    """Solve a HiGHS model silently, on one thread, to a proven optimum or a limit.

    ``options`` are further HiGHS options (the putative-risk ceiling's: a
    small cut pool).
    """
    h = silent_highs()
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 1e-6)
    h.setOptionValue("time_limit", max(float(time_limit), 0.01))
    if max_nodes is not None:
        # A node limit, unlike a time limit, gives the same table on any machine.
        h.setOptionValue("mip_max_nodes", int(max_nodes))
    for name, value in (options or {}).items():
        h.setOptionValue(name, value)
    h.passModel(lp)
    h.run()
    return h


def closest_table(
    system: System,
    ub0: npt.NDArray[np.float64],
    members: Sequence[npt.NDArray[np.int64]],
    values: npt.NDArray[np.float64],
    *,
    time_limit: float,
    perturbation: npt.NDArray[np.float64] | None = None,
    max_nodes: int | None = None,
    options: dict[str, Any] | None = None,
) -> tuple[npt.NDArray[np.int64] | None, bool]:
    """The non-negative integer table whose published cells are closest in L1 to ``values``.

    Args:
        system: The published intervals as constraints (hard).
        ub0: Each full cell's upper bound (cells at 0 are not in the model).
        members: Per figure, the model variables it sums.
        values: Per figure, the published value.
        time_limit: Seconds for the solver.
        perturbation: Optional small costs added to the cells (for ranked
            reconstructions: another near-optimal table per perturbation).
        max_nodes: A branch-and-bound node limit (deterministic, unlike the time limit).
        options: Further HiGHS options.

    Returns:
        ``(table, optimal)``: the full cross-classification (flat; None when
        the solver found no point in time) and whether it is proven L1-optimal.
    """
    import highspy
    from scipy import sparse

    m = int(system.alive.size)
    k = len(members)
    ub = ub0[system.alive]
    lens = np.array([len(v) for v in members], dtype=np.int64)
    fig_rows = np.repeat(np.arange(k), lens)
    fig_cols = np.concatenate(members) if k else np.zeros(0, dtype=np.int64)
    # Rows: the intervals (lo <= A x <= hi); then per figure A_k x - d_k <= j_k and
    # A_k x + d_k >= j_k.
    n_int = int(system.lo.size)
    rows = np.concatenate(
        [system.rows, n_int + fig_rows, n_int + k + fig_rows, n_int + np.arange(k)]
    )
    rows = np.concatenate([rows, n_int + k + np.arange(k)])
    cols = np.concatenate([system.cols, fig_cols, fig_cols, m + np.arange(k), m + np.arange(k)])
    vals = np.concatenate([np.ones(system.rows.size + 2 * fig_cols.size), -np.ones(k), np.ones(k)])
    a = sparse.csc_matrix((vals, (rows, cols)), shape=(n_int + 2 * k, m + k))
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_ = m + k
    lp.num_row_ = n_int + 2 * k
    cost = np.r_[np.zeros(m), np.ones(k)]
    if perturbation is not None:
        cost[:m] = perturbation[system.alive]
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(m + k)
    lp.col_upper_ = np.r_[np.where(np.isinf(ub), inf, ub), np.full(k, inf)]
    lp.row_lower_ = np.r_[system.lo, np.full(k, -inf), values]
    lp.row_upper_ = np.r_[np.where(np.isinf(system.hi), inf, system.hi), values, np.full(k, inf)]
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = a.indptr.astype(np.int32)
    lp.a_matrix_.index_ = a.indices.astype(np.int32)
    lp.a_matrix_.value_ = a.data.astype(np.float64)
    lp.a_matrix_.num_col_ = m + k
    lp.a_matrix_.num_row_ = n_int + 2 * k
    lp.integrality_ = [highspy.HighsVarType.kInteger] * m + [highspy.HighsVarType.kContinuous] * k
    h = run_model(lp, time_limit=time_limit, max_nodes=max_nodes, options=options)
    info = h.getInfo()
    if int(info.primal_solution_status) != 2:
        return None, False
    x = np.rint(np.asarray(h.getSolution().col_value, dtype=np.float64)[:m]).astype(np.int64)
    full = np.zeros(ub0.size, dtype=np.int64)
    full[system.alive] = x
    return full, h.getModelStatus() == highspy.HighsModelStatus.kOptimal
