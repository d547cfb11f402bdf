"""The solver wrapper: a HiGHS model of the undecided cells; integer points near LP vertices."""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from tablesafe.rules._ceiling._constraints import System
from tablesafe.rules._ceiling._highs import silent_highs


class Model:
    """One HiGHS model of the undecided cells (LP or MILP), objective changed per solve."""

    def __init__(
        self,
        system: System,
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

    def bound(self, c: int, lo: float, hi: float) -> None:
        """Set column ``c``'s bounds, in the model and in ``lb`` / ``ub``."""
        self.h.changeColBounds(c, lo, hi)
        self.lb[c] = lo
        self.ub[c] = hi

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


def repair(
    system: System,
    movable: npt.NDArray[np.int64],
    lb: npt.NDArray[np.float64],
    ub: npt.NDArray[np.float64],
    lp: Model,
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
    part = Model(system, movable[~integral], lb2, ub2, integer=True)
    part.h.setOptionValue("mip_max_improving_sols", 1)
    _, _, y = part.solve("max", min(deadline - time.monotonic(), 10.0))
    yi = part.integral_point(y)
    if yi is None:
        return None
    point = xr.copy()
    point[~integral] = yi
    return lp.integral_point(point)
