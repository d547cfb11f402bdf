"""Cyclic perturbation (Duncan & Roehrig 2006, seed 002) and its Bayesian posterior.

A *cycle* is a table of +1, -1 and 0 whose every row and column sums to 0,
so adding it keeps all two-way margins. For each cycle of a published set,
a three-sided coin decides: add it (probability alpha), subtract it (beta)
or leave the table alone (gamma = 1 - alpha - beta). An operation that
would make a cell negative is skipped (the check is on the *current* table,
the one the operation would change); the slides' "unless there is a zero in
the cycle" is read this way because a zero cell under a +1 entry does not
prevent the operation. The data owner publishes the table, the cycles and
alpha, beta.

Because the mechanism is public, a user can compute every table that could
have been the original and its posterior probability under a prior
(uniform by default): ``Pr(T^k | T^P) ∝ Pr(T^P | T^k) Pr(T^k)``, where
``Pr(T^P | T^k)`` sums the probabilities of all coin sequences that turn
``T^k`` into ``T^P`` (several can, when cycles are dependent).

Cycle sets: for an n x n table the shifted diagonals (cycle k has +1 at
``(i, i+k)`` and -1 at ``(i, i+k+1)``, columns mod n), which for 4 x 4 is the
slides' set of four cycles (the second cycle's last row, garbled by OCR as
``+ - 0 +``, is repaired to ``+ - 0 0`` so that rows and columns sum to 0);
each cell lies in exactly two cycles. For R x C tables the elementary 2 x 2
cycles on the torus (each cell in four); for 3-way tables the elementary
2 x 2 x 2 cycles, which preserve all three 2-way margins.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ComputationError, ParameterError
from tablesafe._random import resolve_generator

__all__ = [
    "CyclicPosterior",
    "CyclicResult",
    "cycle_set",
    "cyclic_perturb",
    "cyclic_posterior",
]


def _check_table(table: npt.ArrayLike) -> np.ndarray:
    x = np.asarray(table)
    xf = x.astype(float)
    if not np.all(np.isfinite(xf)) or np.any(xf < 0) or np.any(xf != np.round(xf)):
        raise ParameterError("counts must be non-negative whole numbers")
    if x.ndim not in (2, 3) or min(x.shape) < 2:
        raise ParameterError(
            f"cyclic perturbation needs a 2-way or 3-way table of at least 2 x 2, not {x.shape}"
        )
    return np.asarray(np.round(xf), dtype=np.int64)


def _check_coin(alpha: float, beta: float) -> None:
    if not (0 <= alpha <= 1 and 0 <= beta <= 1) or alpha + beta > 1 + 1e-12:
        raise ParameterError(
            f"alpha and beta must lie in [0, 1] with alpha + beta <= 1, not {alpha}, {beta}"
        )


def cycle_set(shape: Sequence[int]) -> list[np.ndarray]:
    """The default margin-preserving cycles for a table of ``shape`` (see the module docstring)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) not in (2, 3) or min(shape) < 2:
        raise ParameterError(f"cycles need a 2-way or 3-way table of at least 2 x 2, not {shape}")
    cycles = []
    if len(shape) == 2 and shape[0] == shape[1] and shape[0] > 2:
        n = shape[0]
        for k in range(n):
            c = np.zeros(shape, dtype=np.int64)
            for i in range(n):
                c[i, (i + k) % n] += 1
                c[i, (i + k + 1) % n] -= 1
            cycles.append(c)
        return cycles
    ranges = [range(s if s > 2 else 1) for s in shape]
    for corner in itertools.product(*ranges):
        c = np.zeros(shape, dtype=np.int64)
        for offs in itertools.product((0, 1), repeat=len(shape)):
            idx = tuple((corner[d] + offs[d]) % shape[d] for d in range(len(shape)))
            c[idx] += 1 if sum(offs) % 2 == 0 else -1
        cycles.append(c)
    return cycles


def _verify(cycles: Sequence[np.ndarray], shape: tuple[int, ...]) -> list[np.ndarray]:
    out = []
    for i, c in enumerate(cycles):
        c = np.asarray(c, dtype=np.int64)
        if c.shape != shape:
            raise ParameterError(f"cycle {i + 1} has shape {c.shape}, the table {shape}")
        for axis in range(c.ndim):
            if np.any(c.sum(axis=axis) != 0):
                raise ParameterError(
                    f"cycle {i + 1} does not keep the margins: its sums over axis {axis} are not 0"
                )
        out.append(c)
    return out


@dataclass(frozen=True)
class CyclicResult:
    """A cyclically perturbed table and what is published with it."""

    table: np.ndarray
    cycles: list[np.ndarray]
    alpha: float
    beta: float
    outcomes: list[int] = field(default_factory=list, repr=False)  # owner only

    def published(self) -> dict[str, object]:
        """The table, the cycles and alpha, beta (never the coin outcomes)."""
        return {
            "table": self.table.tolist(),
            "cycles": [c.tolist() for c in self.cycles],
            "alpha": self.alpha,
            "beta": self.beta,
            "gamma": 1 - self.alpha - self.beta,
            "skip_rule": "an operation that would make a cell negative is skipped",
        }


def _apply(table: np.ndarray, cycle: np.ndarray, sign: int) -> np.ndarray | None:
    out = table + sign * cycle
    return None if np.any(out < 0) else out


def cyclic_perturb(
    table: npt.ArrayLike,
    alpha: float,
    beta: float,
    *,
    cycles: Sequence[np.ndarray] | None = None,
    rng: np.random.Generator | int | None = None,
) -> CyclicResult:
    """Perturb ``table`` cycle by cycle with the three-sided coin (seed 002).

    Raises:
        ParameterError: for bad counts, a table smaller than 2 x 2, alpha +
            beta > 1, or cycles that do not keep the margins.
    """
    x = _check_table(table)
    _check_coin(alpha, beta)
    cyc = _verify(cycles if cycles is not None else cycle_set(x.shape), x.shape)
    gen = resolve_generator(rng)
    cur = x.copy()
    outcomes = []
    for c in cyc:
        r = gen.random()
        sign = 1 if r < alpha else (-1 if r < alpha + beta else 0)
        outcomes.append(sign)
        if sign:
            nxt = _apply(cur, c, sign)
            if nxt is not None:
                cur = nxt
    return CyclicResult(cur, cyc, float(alpha), float(beta), outcomes)


@dataclass(frozen=True)
class CyclicPosterior:
    """Every possible original table with its posterior probability.

    Attributes:
        tables: The possible originals.
        probabilities: Their posterior probabilities (summing to 1).
    """

    tables: list[np.ndarray]
    probabilities: np.ndarray

    def cell(self, index: Sequence[int]) -> dict[int, float]:
        """The posterior distribution of one cell: value -> probability."""
        out: dict[int, float] = {}
        for t, p in zip(self.tables, self.probabilities, strict=True):
            v = int(t[tuple(index)])
            out[v] = out.get(v, 0.0) + float(p)
        return dict(sorted(out.items()))

    def mode(self) -> np.ndarray:
        """The posterior mode of every cell."""
        shape = self.tables[0].shape
        out = np.zeros(shape, dtype=np.int64)
        for idx in itertools.product(*[range(s) for s in shape]):
            dist = self.cell(idx)
            out[idx] = max(dist, key=lambda v: dist[v])
        return out


def _likelihood(
    original: np.ndarray, target: np.ndarray, cycles: Sequence[np.ndarray], probs: tuple[float, ...]
) -> float:
    # Forward over cycles, merging identical intermediate tables.
    states: dict[bytes, tuple[np.ndarray, float]] = {original.tobytes(): (original, 1.0)}
    for c in cycles:
        nxt: dict[bytes, tuple[np.ndarray, float]] = {}
        for t, p in states.values():
            for sign, q in zip((1, -1, 0), probs, strict=True):
                if q == 0:
                    continue
                moved = _apply(t, c, sign) if sign else t
                r = t if moved is None else moved
                key = r.tobytes()
                old = nxt.get(key)
                nxt[key] = (r, (old[1] if old else 0.0) + p * q)
        states = nxt
    return float(states.get(target.tobytes(), (target, 0.0))[1])


def cyclic_posterior(
    perturbed: npt.ArrayLike,
    alpha: float,
    beta: float,
    *,
    cycles: Sequence[np.ndarray] | None = None,
    prior: Callable[[np.ndarray], float] | None = None,
    max_candidates: int = 2_000_000,
    progress: Callable[[int, int], None] | None = None,
) -> CyclicPosterior:
    """The posterior over the tables that could have been the original (seed 002).

    Args:
        perturbed: The published table.
        alpha: Probability of adding a cycle.
        beta: Probability of subtracting it.
        cycles: The published cycles (default: :func:`cycle_set`).
        prior: A function giving each candidate table's prior weight
            (default: uniform).
        max_candidates: Refuse enumerations larger than this.
        progress: Called with (done, total) while enumerating.

    Raises:
        ComputationError: if there are too many candidates to enumerate.
    """
    tp = _check_table(perturbed)
    _check_coin(alpha, beta)
    cyc = _verify(cycles if cycles is not None else cycle_set(tp.shape), tp.shape)
    probs = (float(alpha), float(beta), float(1 - alpha - beta))
    total = 3 ** len(cyc)
    if total > max_candidates:
        raise ComputationError(
            f"{len(cyc)} cycles give {total:,} candidate tables, more than {max_candidates:,}; "
            "enumeration is limited to small cycle sets"
        )
    seen: dict[bytes, np.ndarray] = {}
    for step, signs in enumerate(itertools.product((-1, 0, 1), repeat=len(cyc))):
        cand = tp - sum(s * c for s, c in zip(signs, cyc, strict=True))
        if np.all(cand >= 0):
            seen.setdefault(np.asarray(cand).tobytes(), np.asarray(cand))
        if progress is not None and step % 1000 == 0:
            progress(step, total)
    tables, weights = [], []
    for cand in seen.values():
        like = _likelihood(cand, tp, cyc, probs)
        if like > 0:
            tables.append(cand)
            weights.append(like * (prior(cand) if prior is not None else 1.0))
    w = np.array(weights)
    if w.sum() <= 0:
        raise ComputationError("no candidate table has positive posterior probability")
    return CyclicPosterior(tables, w / w.sum())
