"""The decision for every cell of the full cross-classification: pinned, free or undecided.

The stages run cheapest first, each of them sound; see
:mod:`tablesafe.attacks._reconstruct` for what each one shows.
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from tablesafe.attacks._reconstruct._pins import pin_cells
from tablesafe.attacks._reconstruct._result import Progress
from tablesafe.attacks._reconstruct._search import Search, block_moves, integer_points, slices
from tablesafe.rules._ceiling._constraints import System, propagate

#: The stages, in the order they run (the keys of the cells each one decided).
STAGES = (
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
)


def reconstruct(
    system: System,
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
    state = np.full(truth.size, -1, dtype=np.int8)
    stages = dict.fromkeys(STAGES, 0)
    dead = ub0 <= 0
    state[dead] = 1
    stages["zeros"] = int(dead.sum())
    t = truth[system.alive].astype(np.float64)
    lb, ub, local = _propagation(system, ub0, t, deadline, stages)
    if (local == -1).any() and system.lo.size:
        _single_moves(system, t, lb, ub, local, stages)
    if (local == -1).any() and time.monotonic() <= deadline:
        search = Search(system, t, lb, ub, local, stages, deadline, progress)
        block_moves(search, shape, blocks)
        integer_points(search)
        slices(search, shape, width)
        pin_cells(search)
    state[system.alive] = local
    return state, stages


def _propagation(
    system: System,
    ub0: npt.NDArray[np.float64],
    t: npt.NDArray[np.float64],
    deadline: float,
    stages: dict[str, int],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int8]]:
    """Stage 2: bound propagation; a cell whose bounds meet is pinned, an unbounded one free.

    Returns:
        ``(lb, ub, local)``: the propagated bounds of the cells that may hold
        records, and per cell 1 pinned, 0 free, -1 undecided.
    """
    lb = np.zeros(system.alive.size)
    ub = ub0[system.alive].astype(np.float64)
    unconstrained = np.isinf(ub)
    lb, ub = propagate(system, lb, ub, deadline)
    if np.any(lb > t) or np.any(ub < t):
        raise RuntimeError("the true table violates the published constraints")  # a bug, not input
    local = np.full(system.alive.size, -1, dtype=np.int8)
    local[lb == ub] = 1
    local[np.isinf(ub) | unconstrained] = 0
    stages["propagation"] = int((local == 1).sum())
    return lb, ub, local


def _single_moves(
    system: System,
    t: npt.NDArray[np.float64],
    lb: npt.NDArray[np.float64],
    ub: npt.NDArray[np.float64],
    local: npt.NDArray[np.int8],
    stages: dict[str, int],
) -> None:
    """Stage 2b: a cell that can move by one on its own is free, whatever the others do.

    It can when every published cell holding it has room (and its own bounds
    allow the step).
    """
    from scipy import sparse

    a = sparse.csr_matrix(
        (np.ones(system.rows.size), (system.rows, system.cols)),
        shape=(system.lo.size, system.alive.size),
    )
    at = a @ t
    room_up = system.hi - at
    room_down = at - system.lo
    up = np.full(system.alive.size, np.inf)
    down = np.full(system.alive.size, np.inf)
    np.minimum.at(up, system.cols, room_up[system.rows])
    np.minimum.at(down, system.cols, room_down[system.rows])
    single = (local == -1) & (((up >= 1) & (t + 1 <= ub)) | ((down >= 1) & (t - 1 >= lb)))
    local[single] = 0
    stages["single_moves"] = int(single.sum())
