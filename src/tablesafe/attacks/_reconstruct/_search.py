"""Integer points away from the truth: each one frees every cell in which it differs from it.

The stages after propagation share a :class:`Search`: the cells that can
move, an LP model of them, and which of them are still open. Every stage
here only frees cells (a feasible integer point that differs from the truth
in a cell shows the cell is not pinned); pinning is left to
:mod:`tablesafe.attacks._reconstruct._pins`.
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from tablesafe.attacks._reconstruct._moves import BlockMoves
from tablesafe.attacks._reconstruct._result import Progress
from tablesafe.attacks._reconstruct._solver import Model, repair
from tablesafe.rules._ceiling._constraints import System


class Search:
    """What the stages after propagation share.

    Attributes:
        system: The constraints on the cells that may hold records.
        t: The truth of each of those cells.
        lb: Their lower bounds after propagation.
        ub: Their upper bounds after propagation.
        local: Per cell 1 pinned, 0 free, -1 undecided (updated in place).
        stages: Cells decided by each stage (updated in place).
        deadline: The ``time.monotonic()`` at which the attack stops.
        progress: Called with (stage, done, total), or None.
        rng: The one generator of every random choice the stages make.
        movable: The cells whose bounds differ: the models' columns.
        lp: The LP relaxation over the movable cells.
        tu: The truth of each movable cell.
        open_: Per movable cell, whether it is still undecided.
    """

    def __init__(
        self,
        system: System,
        t: npt.NDArray[np.float64],
        lb: npt.NDArray[np.float64],
        ub: npt.NDArray[np.float64],
        local: npt.NDArray[np.int8],
        stages: dict[str, int],
        deadline: float,
        progress: Progress | None,
    ) -> None:
        self.system = system
        self.t = t
        self.lb = lb
        self.ub = ub
        self.local = local
        self.stages = stages
        self.deadline = deadline
        self.progress = progress
        self.rng = np.random.default_rng(0)
        # The models hold every cell that can move (those already shown free
        # too): a cell left out would be read as fixed.
        self.movable = np.flatnonzero(lb < ub)
        self.lp = Model(system, self.movable, lb, ub, integer=False)
        self.tu = t[self.movable]
        self.open_ = local[self.movable] == -1

    def remaining(self) -> float:
        """Seconds left before the deadline (negative once it passed)."""
        return self.deadline - time.monotonic()

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return time.monotonic() > self.deadline

    def tell(self, stage: str, done: int, total: int) -> None:
        """Report progress, if anyone listens."""
        if self.progress is not None:
            self.progress(stage, done, total)

    def free(self, point: npt.NDArray[np.generic], stage: str) -> npt.NDArray[np.bool_]:
        """Close the open cells in which the integer point ``point`` differs from the truth.

        Returns:
            The cells it closed (counted to ``stage``).
        """
        moved: npt.NDArray[np.bool_] = self.open_ & (point != self.tu)
        self.open_ &= ~moved
        self.stages[stage] += int(moved.sum())
        return moved

    def settle(self) -> None:
        """Write the movable cells closed so far as free in ``local``."""
        self.local[self.movable[(self.local[self.movable] == -1) & ~self.open_]] = 0


def away(
    truth: npt.NDArray[np.float64],
    lb: npt.NDArray[np.float64],
    ub: npt.NDArray[np.float64],
    rng: np.random.Generator,
) -> npt.NDArray[np.float64]:
    """Per cell, the direction away from its truth.

    Up at its lower bound, down at its upper, a random one in between (drawn
    for every cell, so that the generator moves on by ``truth.size`` draws).
    """
    return np.where(
        truth <= lb, 1.0, np.where(truth >= ub, -1.0, rng.choice([-1.0, 1.0], truth.size))
    )


# -- stage 3a: block-parity moves -------------------------------------------------------


class _Walk:
    """A walk over integer points by block moves: ``y``, and the moves open from it."""

    def __init__(self, search: Search, shape: tuple[int, ...], blocks: int) -> None:
        s = search
        cells = s.system.alive[s.movable]
        self.search = s
        self.y = s.tu.copy()
        self.moves = BlockMoves(
            shape, cells, self.y + 1 <= s.lp.ub, self.y - 1 >= s.lp.lb, blocks, s.rng
        )
        self.position = np.full(int(np.prod(shape, dtype=np.int64)), -1, dtype=np.int64)
        self.position[cells] = np.arange(s.movable.size)

    def step(self, c: int, sign: int) -> bool:
        """Move ``y`` by a block move adding ``sign`` to movable cell ``c``, if one exists."""
        s = self.search
        found = self.moves.find(int(s.system.alive[s.movable[c]]), sign)
        if found is None:
            return False
        cells, change = found
        j = self.position[cells]
        x = self.y.copy()
        x[j] += change
        if s.lp.integral_point(x) is None:
            return False
        self.y = x
        self.moves.can[1][cells] = self.y[j] + 1 <= s.lp.ub[j]
        self.moves.can[-1][cells] = self.y[j] - 1 >= s.lp.lb[j]
        return True


def block_moves(s: Search, shape: tuple[int, ...] | None, blocks: int) -> None:
    """Stage 3a: block-parity moves (see :class:`BlockMoves`) around each open cell.

    The moves are taken one after the other: the walk's current point ``y``
    is an integer point, every cell in which it differs from the truth is
    free, and each move opens new moves (the cells it raised can be lowered
    next). Rounds over the open cells stop when four in a row free nothing.
    """
    if shape is None or not s.open_.any() or not 3 <= blocks <= len(shape):
        return
    walk = _Walk(s, shape, blocks)
    stale = 0
    for rnd in range(40):
        todo = s.rng.permutation(np.flatnonzero(s.open_))
        before = int(todo.size)
        _walk_round(s, walk, todo, rnd)
        if s.expired() or not s.open_.any():
            break
        if int(s.open_.sum()) < before:
            stale = 0
            continue
        stale += 1
        if stale > 3:
            break
        _wander(s, walk)


def _walk_round(s: Search, walk: _Walk, todo: npt.NDArray[np.int64], rnd: int) -> None:
    """One round of the walk: a move up or down from each open cell of ``todo``, in turn."""
    for step, c in enumerate(todo.tolist()):
        if s.expired():
            break
        if step % 200 == 0:
            s.tell(f"block moves (round {rnd + 1})", step, int(todo.size))
        if s.open_[c] and (walk.step(c, 1) or walk.step(c, -1)):
            s.free(walk.y, "block_free")


def _wander(s: Search, walk: _Walk) -> None:
    """Stuck: random moves anywhere (up to 300), so that new moves open up."""
    for c in s.rng.choice(s.movable.size, min(s.movable.size, 300), replace=False).tolist():
        if s.expired():
            break
        walk.step(c, int(s.rng.choice([-1, 1])))
    s.free(walk.y, "block_free")


# -- stage 3: LP vertices made integral -------------------------------------------------


def integer_points(s: Search) -> None:
    """Stage 3: integer points pushed away from the truth free many cells at once.

    A linear program pushes every open cell away from its true value; its
    vertex is integral in most cells, and a small integer program completes
    the few fractional ones (the others held where the vertex put them).
    Up to 30 rounds; two that free almost nothing end it.
    """
    rounds = 30
    stale = 0
    for rnd in range(rounds):
        remaining = s.remaining()
        if remaining <= 0 or not s.open_.any():
            break
        s.tell("integer points", rnd, rounds)
        sign = away(s.tu, s.lp.lb, s.lp.ub, s.rng)
        s.lp.objective(np.where(s.open_, sign, 0.0))
        _, _, x = s.lp.solve("max", remaining)
        xi = repair(s.system, s.movable, s.lb, s.ub, s.lp, x, s.deadline)
        freed = 0 if xi is None else int(s.free(xi, "milp_free").sum())
        if freed <= max(1, 0.005 * s.open_.sum()):
            stale += 1
            if stale >= 2:
                break


# -- stage 3b: neighbourhood search in slices -------------------------------------------


def slices(s: Search, shape: tuple[int, ...] | None, width: int) -> None:
    """Stage 3b: neighbourhood search in slices.

    The cells that share their categories on all but ``width`` variables (a
    slice) may move while every other cell keeps its true value: a small
    integer program, started from the truth, pushing the slice's open cells
    away from it; any point it finds is a point of the whole problem. Sweeps
    over every slice of a random choice of the fixed variables, until three
    sweeps in a row free no cell.
    """
    if shape is None or not s.open_.any():
        return
    k = len(shape)
    w = min(k, max(width, 1))
    coords = np.stack(np.unravel_index(s.system.alive[s.movable], shape), axis=1)
    stale_sweeps = 0
    for sweep in range(50):
        if s.expired() or not s.open_.any():
            break
        fixed_dims = np.sort(s.rng.choice(k, k - w, replace=False))
        if fixed_dims.size:
            keys = np.ravel_multi_index(
                tuple(coords[:, fixed_dims].T), tuple(shape[d] for d in fixed_dims)
            )
        else:
            keys = np.zeros(s.movable.size, dtype=np.int64)
        freed = _sweep(s, keys, sweep)
        stale_sweeps = stale_sweeps + 1 if freed == 0 else 0
        if stale_sweeps >= 3:
            break


def _sweep(s: Search, keys: npt.NDArray[np.int64], sweep: int) -> int:
    """One sweep: each slice (cells of one key) holding open cells, in random order.

    Returns:
        The cells it freed.
    """
    order = s.rng.permutation(np.unique(keys[s.open_]))
    freed = 0
    for step, key in enumerate(order.tolist()):
        if s.expired():
            break
        if step % 20 == 0:
            s.tell(f"slices (sweep {sweep + 1})", step, int(order.size))
        in_slice = keys == key
        if not (s.open_ & in_slice).any():
            continue
        point = _slice_point(s, in_slice)
        if point is not None:
            freed += int(s.free(point, "slice_free").sum())
    return freed


def _slice_point(s: Search, in_slice: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64] | None:
    """An integer point that differs from the truth in the slice only, or None."""
    lb2, ub2 = s.lb.copy(), s.ub.copy()
    out = s.movable[~in_slice]
    lb2[out] = s.t[out]
    ub2[out] = s.t[out]
    part = Model(s.system, s.movable[in_slice], lb2, ub2, integer=True)
    part.h.setOptionValue("mip_max_improving_sols", 2)
    ts = s.tu[in_slice]
    sign = away(ts, part.lb, part.ub, s.rng)
    part.objective(np.where(s.open_[in_slice], sign, 0.0))
    part.sense("max")
    part.start(ts)
    _, _, ys = part.solve("max", min(0.5, s.deadline - time.monotonic()))
    yi = part.integral_point(ys)
    if yi is None:
        return None
    point = s.tu.copy()
    point[in_slice] = yi
    return s.lp.integral_point(point.astype(np.float64))
