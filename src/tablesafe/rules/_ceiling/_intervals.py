"""What the intruder knows of the mechanism: the true counts each published value allows."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ParameterError, RequestError
from tablesafe._protection import Protection
from tablesafe.output._table import ProtectedTable


def ptable_hull(mech: Any, top: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
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


def records_hull(mech: Any, top: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """As :func:`ptable_hull` for record-level drop/add-up-to-q: ``|j - i| <= q(i)``."""
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
        lo_j, hi_j = records_hull(mech, top)
    elif hasattr(mech, "rows") and hasattr(mech, "row_index"):
        lo_j, hi_j = ptable_hull(mech, top)
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
