"""Provable pins: linear and integer programs that show no integer point moves a cell.

The LP relaxation contains every integer point of the feasible set, so a
cell whose rounded LP maximum and minimum equal its truth is pinned; the
cells the LPs leave open get two integer programs each. Any integer point a
solve returns that differs from the truth frees cells on the way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tablesafe.attacks._reconstruct._search import Search
from tablesafe.attacks._reconstruct._solver import Model


@dataclass
class _Blocked:
    """Per movable cell: whether no integer point raises (lowers) it past its truth.

    Attributes:
        milp: The integer model over the movable cells (its bounds tightened as cells are blocked).
        up: No integer point raises the cell above its truth.
        down: No integer point lowers the cell below its truth.
    """

    milp: Model
    up: npt.NDArray[np.bool_]
    down: npt.NDArray[np.bool_]


def pin_cells(s: Search) -> None:
    """Stages 4 and 5: decide the open cells by LP bounds, then by integer programs."""
    # Away from the truth without a random draw: stage 5's objective.
    push = np.where(s.tu <= s.lp.lb, 1.0, np.where(s.tu >= s.lp.ub, -1.0, 1.0))
    s.settle()
    milp = Model(s.system, s.movable, s.lb, s.ub, integer=True)
    blocked = _Blocked(milp, s.tu >= s.lp.ub, s.tu <= s.lp.lb)
    _lp_batches(s, blocked)
    pinned = s.open_ & blocked.up & blocked.down
    s.open_ &= ~pinned
    s.local[s.movable[pinned]] = 1
    s.stages["lp_pinned"] += int(pinned.sum())
    lp_open = _lp_bounds(s, blocked)
    s.settle()
    _milp_bounds(s, blocked, push, lp_open)


def _lp_batches(s: Search, blocked: _Blocked) -> None:
    """Stage 4, in batches: the cells at a bound that no LP point moves off it.

    If the LP maximum of the sum of (x_c - lb_c) over cells whose truth is
    their lower bound is below 1, no integer point raises any of them; cells
    the LP does raise leave the batch, and the rest is tried again (and
    likewise downwards for cells at their upper bound).
    """
    for sense in ("max", "min"):
        at_bound = s.open_ & (blocked.down if sense == "max" else blocked.up)
        for _ in range(30):
            if not at_bound.any() or s.expired():
                break
            s.lp.objective(at_bound.astype(np.float64))
            status, value, x = s.lp.solve(sense, s.deadline - time.monotonic())
            if status != "optimal" or value is None or x is None:
                break
            gain = value - float(s.tu[at_bound].sum())
            if abs(gain) < 1 - 1e-7:
                if sense == "max":
                    blocked.up |= at_bound
                else:
                    blocked.down |= at_bound
                break
            at_bound &= np.abs(x - s.tu) < 1e-7


def _lp_bounds(s: Search, blocked: _Blocked) -> list[int]:
    """Stage 4, per cell: the LP maximum and minimum of each open cell.

    Returns:
        The cells the LPs left open (for stage 5).
    """
    todo = np.flatnonzero(s.open_)
    lp_open: list[int] = []
    for step, c in enumerate(todo.tolist()):
        if s.remaining() <= 0:
            break
        if step % 25 == 0:
            s.tell("linear bounds", step, int(todo.size))
        if not s.open_[c]:
            continue
        _lp_cell(s, blocked, c)
        if blocked.up[c] and blocked.down[c]:
            s.open_[c] = False
            s.local[s.movable[c]] = 1
            s.stages["lp_pinned"] += 1
        elif s.open_[c]:
            lp_open.append(c)
    return lp_open


def _lp_cell(s: Search, blocked: _Blocked, c: int) -> None:
    """Cell ``c``'s LP maximum, then minimum: a side whose rounded bound is the truth is blocked.

    A blocked side's bound is tightened to the truth in both models; an LP
    point that moves the cell frees it (and every open cell it moves) when
    it is integral.
    """
    lp, milp, tu = s.lp, blocked.milp, s.tu
    for sense in ("max", "min"):
        if (blocked.up if sense == "max" else blocked.down)[c]:
            continue
        lp.objective({c: 1.0})
        status, value, x = lp.solve(sense, s.deadline - time.monotonic())
        if status != "optimal" or value is None:
            return
        if sense == "max" and np.floor(value + 1e-7) <= tu[c]:
            blocked.up[c] = True
            lp.bound(c, lp.lb[c], tu[c])
            milp.bound(c, milp.lb[c], tu[c])
            continue
        if sense == "min" and np.ceil(value - 1e-7) >= tu[c]:
            blocked.down[c] = True
            lp.bound(c, tu[c], lp.ub[c])
            milp.bound(c, tu[c], milp.ub[c])
            continue
        xi = lp.integral_point(x)
        if xi is not None:
            s.free(xi, "lp_free")
        return


def _milp_bounds(
    s: Search, blocked: _Blocked, push: npt.NDArray[np.float64], lp_open: list[int]
) -> None:
    """Stage 5: integer programs for the cells the LPs left open."""
    blocked.milp.h.setOptionValue("mip_max_improving_sols", 1)
    for step, c in enumerate(lp_open):
        if s.remaining() <= 0:
            break
        s.tell("integer bounds", step, len(lp_open))
        if not s.open_[c]:
            continue
        # Push the other open cells away from the truth too: one point frees many.
        blocked.milp.objective(np.where(s.open_, push, 0.0))
        _milp_cell(s, blocked, c)
        if s.open_[c] and blocked.up[c] and blocked.down[c]:
            s.open_[c] = False
            s.local[s.movable[c]] = 1
            s.stages["milp_pinned"] += 1


def _milp_cell(s: Search, blocked: _Blocked, c: int) -> None:
    """Is there an integer point with cell ``c`` above (below) its truth? Infeasible: blocked."""
    milp, tu = blocked.milp, s.tu
    for sense in ("max", "min"):
        if (blocked.up if sense == "max" else blocked.down)[c]:
            continue
        lo_c, hi_c = milp.lb[c], milp.ub[c]
        if sense == "max":
            milp.h.changeColBounds(c, tu[c] + 1, hi_c)
        else:
            milp.h.changeColBounds(c, lo_c, tu[c] - 1)
        status, _, x = milp.solve("max", s.deadline - time.monotonic())
        milp.h.changeColBounds(c, lo_c, hi_c)
        xi = milp.integral_point(x)
        if xi is not None and xi[c] != tu[c]:
            moved = s.free(xi, "milp_free_cell")
            s.local[s.movable[moved]] = 0
            return
        if status == "infeasible":
            if sense == "max":
                blocked.up[c] = True
            else:
                blocked.down[c] = True
