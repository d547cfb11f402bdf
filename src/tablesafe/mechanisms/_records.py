"""Record-level drop/add-up-to-q (Li & Krenzke 2016, seed 004 Section 2).

In each inner cell of ``n`` records, ``q = min(ceil(rate * n), cap)``; the
first seed chooses ``d`` uniformly in ``{-q, ..., q}``: ``|d|`` records are
dropped (``d < 0``, weight set to 0) or duplicated (``d > 0``, weight doubled);
the second seed orders the cell's records by a keyed integer mix of their
record keys, and the first ``|d|`` are the ones dropped or duplicated. Both
seeds are keyed hashes of the key sums of the cell, of every margin it
belongs to and of the universe (dynamic seeds), so a universe that differs
by one record changes every seed of the table.

Weights: the remaining weights of a cell are multiplied by ``n / (n + d)``
(inflated after drops, deflated after additions), which keeps the cell's
weighted estimate unbiased over the choice of records; then every cell is
calibrated to the universe's original weighted total. Replicate weights get
the same treatment, so replicate variances stay valid. Unweighted counts
change by ``d``. The TableBuilder carries the algorithm out; this module
holds the mechanism's parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ParameterError

__all__ = ["DropAddRecords", "drop_add_records"]


@dataclass(frozen=True)
class DropAddRecords:
    """Parameters of record-level drop/add-up-to-q (see :func:`drop_add_records`).

    Attributes:
        rate: q = ceil(rate * n).
        cap: Largest q (``None`` for no cap).
    """

    rate: float = 0.01
    cap: int | None = None

    #: Marks a record-level mechanism for the TableBuilder.
    record_level = True

    def q(self, n: npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
        """``q`` of cells of ``n`` records: ``min(ceil(rate * n), cap)``, 0 for empty cells."""
        # The small tolerance keeps rate * n exactly integral where it should be
        # (0.01 * 300 is 3.0000000000000004 in floating point).
        q = np.ceil(np.asarray(n, dtype=np.float64) * self.rate - 1e-9).astype(np.int64)
        q = np.maximum(q, 0)
        if self.cap is not None:
            q = np.minimum(q, self.cap)
        return np.where(np.asarray(n) > 0, q, 0)

    def describe(self) -> dict[str, Any]:
        """The public description of the mechanism."""
        return {
            "name": "drop/add-up-to-q (record level)",
            "rate": self.rate,
            "cap": self.cap,
            "paper": "Li & Krenzke (2016)",
        }


def drop_add_records(rate: float = 0.01, cap: int | None = None) -> DropAddRecords:
    """Record-level drop/add-up-to-q of Li & Krenzke (2016), seed 004 Section 2.

    Args:
        rate: ``q = ceil(rate * n)`` records may be dropped or added per cell
            (the paper uses 1%).
        cap: Largest ``q`` (default: none).

    Raises:
        ParameterError: for a rate outside (0, 1] or a cap below 1.
    """
    if not isinstance(rate, int | float) or not math.isfinite(rate) or not 0 < rate <= 1:
        raise ParameterError(f"rate must lie in (0, 1], not {rate!r}")
    if cap is not None and (not isinstance(cap, int) or cap < 1):
        raise ParameterError(f"cap must be a positive integer or None, not {cap!r}")
    return DropAddRecords(float(rate), cap)
