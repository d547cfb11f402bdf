"""The numeric ptable of the cell-key method for magnitudes (R ``ptable::create_num_ptable``).

:class:`NumPTable` holds, per row value ``i``, the fractional deviations
and their probabilities; :func:`num_ptable` builds it with the solver of
the count ptables (:func:`tablesafe.mechanisms.destatis`) on a finer grid.
The magnitudes' protection (:mod:`tablesafe.mechanisms._magnitudes`) draws from it;
:mod:`tablesafe.mechanisms._num_ptable_cache` keeps it on disk.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ParameterError
from tablesafe._protection_limits import check_number
from tablesafe.mechanisms._cellwise import destatis_row

__all__ = ["NumPTable", "num_ptable"]

_PT_DIGITS = 8


# -- the numeric ptable ---------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class NumPTable:
    """A ptable for magnitudes: rows ``i`` (in units of ``x_delta``), fractional deviations.

    Attributes:
        D: Maximum deviation.
        V: Variance bound.
        step: Steps per unit: deviations are multiples of ``1 / step``.
        icat: The row values ``i`` (1 and ``D`` among them); row 0 never moves.
        v: Per row (0 first, then ``icat``), the deviations ``j - i``.
        p: Per row, their probabilities (differences of the rounded bounds).
        ub: Per row, the cumulative upper bounds (rounded to 8 digits).
    """

    D: int
    V: float
    step: int
    icat: tuple[int, ...]
    v: tuple[npt.NDArray[np.float64], ...]
    p: tuple[npt.NDArray[np.float64], ...]
    ub: tuple[npt.NDArray[np.float64], ...]

    @property
    def rows(self) -> tuple[int, ...]:
        """The row values: 0, then ``icat``."""
        return (0, *self.icat)

    def row_for(self, a: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Row position for ``a = |X| / x_delta``: the largest row value not above ``a``.

        A row ``i <= a`` has deviations ``v >= -i >= -a``, so ``X + v * x_delta``
        keeps the sign of ``X``; ``a >= D`` uses the symmetric row ``D``.
        """
        rows = np.array(self.rows, dtype=np.float64)
        return np.searchsorted(rows, np.asarray(a, dtype=np.float64), side="right") - 1

    def lookup(self, row: npt.ArrayLike, u: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The deviation of each cell: the first of its row whose upper bound exceeds ``u``."""
        row = np.asarray(row, dtype=np.int64)
        u = np.asarray(u, dtype=np.float64)
        out = np.zeros(row.shape, dtype=np.float64)
        for r in np.unique(row):
            sel = row == r
            pos = np.searchsorted(self.ub[r], u[sel], side="right")
            out[sel] = self.v[r][np.minimum(pos, self.v[r].size - 1)]
        return out

    def table(self) -> list[tuple[int, float, float, float, float, float]]:
        """Rows ``(i, j, p, v, p_int_lb, p_int_ub)`` as R's ``pTable`` (without ``type``)."""
        out = []
        for i, v, p, ub in zip(self.rows, self.v, self.p, self.ub, strict=True):
            for vk, pk, uk in zip(v, p, ub, strict=True):
                out.append(
                    (i, round(i + float(vk), 4), float(pk), float(vk), float(uk - pk), float(uk))
                )
        return out

    def describe(self) -> dict[str, Any]:
        """The public parameters."""
        return {"D": self.D, "V": self.V, "step": self.step, "icat": list(self.icat)}


def num_ptable(
    D: int,
    V: float,
    *,
    step: int = 2,
    icat: Sequence[int] | None = None,
    pstay: float | None = None,
    mono: bool = True,
) -> NumPTable:
    """The maximum-entropy ptable for magnitudes, as ``ptable::create_num_ptable``.

    For each row value ``i`` of ``icat`` the perturbed values ``j`` run over
    ``max(i - D, 0), max(i - D, 0) + 1/step, ..., i + D`` and the
    deviations ``v = j - i`` get the probabilities that maximise the
    entropy subject to ``sum p = 1``, ``sum p v = 0``, ``sum p v^2 <= V``,
    ``p >= 1e-8`` (``>= pstay`` for ``v = 0``) and, with ``mono``, ``p``
    not decreasing from ``v = -D`` up to ``v = 0``: the constraints of
    ``create_cnt_ptable`` (:func:`tablesafe.mechanisms.destatis`, whose solver
    it shares) on the finer grid. As in the R package, ``icat`` must hold
    1 and ``D`` and nothing above ``D``, ``D * step < 50``, bounds are
    rounded to 8 digits and ``p`` is their difference; row 0 is ``v = 0``.

    Args:
        D: Maximum deviation (integer >= 1).
        V: Variance bound (> 0).
        step: Steps per unit (integer >= 1).
        icat: Row values (default ``(1, D)``).
        pstay: A lower bound on the probability of ``v = 0``.
        mono: The monotony condition.

    Raises:
        ParameterError: for parameters the R package refuses.
    """
    check_number("magnitudes.max_deviation", D, "D")
    check_number("magnitudes.step", step, "step")
    check_number("magnitudes.variance", V, "V (variance)")
    if D * step >= 50:
        raise ParameterError(f"D * step must be below 50 (as in R's ptable), not {D * step}")
    given = list(icat) if icat is not None else [1, D]
    if any(isinstance(c, bool) or not isinstance(c, numbers.Integral) for c in given):
        raise ParameterError(f"icat must be whole numbers from 1 to D = {D}, not {given!r}")
    cats = sorted({int(c) for c in given})
    if 1 not in cats or D not in cats or cats[-1] > D or cats[0] < 1:
        raise ParameterError(
            f"icat must hold 1 and D = {D} and values between them, e.g. icat = [1, {D}]; "
            f"got {cats}"
        )
    vs = [np.zeros(1)]
    ps = [np.ones(1)]
    ubs = [np.ones(1)]
    for i in cats:
        lo = max(i - D, 0)
        count = round((i + D - lo) * step)
        j = np.round(lo + np.arange(count + 1) / step, 4)
        v = np.round(j - i, 4)
        p = destatis_row(v, float(V), i, pstay, bool(mono), blocked=False)
        ub_raw = np.cumsum(p)
        ub = np.round(ub_raw, _PT_DIGITS)
        lb = np.round(ub_raw - p, _PT_DIGITS)
        vs.append(v)
        ps.append(ub - lb)
        ubs.append(ub)
    return NumPTable(int(D), float(V), int(step), tuple(cats), tuple(vs), tuple(ps), tuple(ubs))


# -- sensitivity rules ------------------------------------------------------------------
