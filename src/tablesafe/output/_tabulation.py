"""Unprotected tabulation: the engine's exact aggregates of one request.

A :class:`Tabulation` holds true values. It is for the data owner's own use
(checking, evaluating protection, benchmarks); what users receive is a
protected table. Every rendering of it says that it is unprotected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tablesafe._errors import RequestError
from tablesafe._request import Statistic, TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.catalog._magnitudes import magnitude_column
from tablesafe.cells._aggregates import CellAggregates
from tablesafe.cells._plan import TabulationPlan
from tablesafe.engines import engine_or_default
from tablesafe.output._render import (
    UNPROTECTED,
    long_columns,
    long_frame,
    render_text,
    to_csv,
    to_json,
)

if TYPE_CHECKING:
    import pandas as pd

    from tablesafe.engines._base import Engine

__all__ = ["Tabulation", "refuse_item_nonresponse", "tabulate"]


@dataclass(frozen=True)
class Tabulation:
    """The exact aggregates of one table request.

    Attributes:
        request: The request.
        aggregates: Per-cell aggregates (inner cells and margins).
        dataset: The dataset's name.
    """

    request: TableRequest
    aggregates: CellAggregates
    dataset: str

    def statistics(self) -> dict[str, np.ndarray]:
        """Statistic name -> extended cell array, as the request asked.

        ``n``, ``weighted``, then for each ``sum:VAR`` and ``mean:VAR`` of the
        request the true ``sum_VAR`` (the exact sum of the contributions ``x``)
        and ``mean_VAR`` (that sum over the true count; NaN where it is 0), or
        in a weighted table ``sum_VAR_weighted`` (of ``w x``) and
        ``mean_VAR_weighted`` (over the true weighted count), as a protected
        table names them.

        Raises:
            RequestError: for ``mean:VAR`` where the universe's (weighted)
                count is 0, as for a protected table.
        """
        agg = self.aggregates
        out: dict[str, np.ndarray] = {}
        if self.request.statistic in (Statistic.COUNT, Statistic.BOTH):
            out["n"] = agg.n
        if (
            self.request.statistic in (Statistic.WEIGHTED, Statistic.BOTH)
            and agg.weight_sum is not None
        ):
            out["weighted"] = agg.weight_sum
        weighted = self.request.statistic != Statistic.COUNT and agg.weight_sum is not None
        denominators = np.asarray(agg.weight_sum if weighted else agg.n, dtype=np.float64)
        for item in self.request.magnitudes:
            kind, name = item.split(":", 1)
            total = agg.magnitudes[name].total
            column = magnitude_column(kind, name, weighted=weighted)
            if kind == "sum":
                out[column] = total
            else:
                if not float(denominators[(-1,) * denominators.ndim]) > 0:
                    raise RequestError(
                        f"mean:{name} has nothing to average over: the "
                        f"{'weighted ' if weighted else ''}count of the universe is 0"
                    )
                out[column] = np.divide(
                    total, denominators, out=np.full(total.shape, np.nan), where=denominators > 0
                )
        return out

    def _columns(self) -> dict[str, np.ndarray]:
        return long_columns(self.aggregates.dimensions, self._shown(), self.aggregates.computed)

    def _shown(self) -> dict[str, np.ndarray]:
        """The statistics with NaN (a mean over nothing) as a blank."""
        out = {}
        for name, arr in self.statistics().items():
            if arr.dtype.kind == "f" and np.isnan(arr).any():
                values = arr.astype(object)
                values[np.isnan(arr)] = None
                arr = values
            out[name] = arr
        return out

    def to_frame(self, *, labels: bool = False) -> pd.DataFrame:
        """Long DataFrame: one row per cell, ``_T`` codes for totals."""
        return long_frame(
            self.aggregates.dimensions, self._shown(), self.aggregates.computed, labels=labels
        )

    def metadata(self) -> dict[str, Any]:
        """Description of the table for machine formats."""
        return {
            "dataset": self.dataset,
            "protected": False,
            "note": UNPROTECTED,
            "dimensions": [d.name for d in self.aggregates.dimensions],
            "universe": {k: list(v) for k, v in self.request.universe.items()},
            "statistic": str(self.request.statistic),
            "magnitudes": list(self.request.magnitudes),
        }

    def render(self, fmt: str = "text") -> str:
        """Render as ``"text"`` (pretty, via rich), ``"csv"`` or ``"json"``."""
        if fmt == "csv":
            return f"# {UNPROTECTED}\n" + to_csv(self._columns())
        if fmt == "json":
            return to_json(self._columns(), self.metadata()) + "\n"
        if fmt == "text":
            universe = (
                " and ".join(f"{k} in {list(v)}" for k, v in self.request.universe.items())
                or "all records"
            )
            return render_text(
                self.aggregates.dimensions,
                self._shown(),
                self.aggregates.computed,
                title=f"{UNPROTECTED}\ndataset: {self.dataset}; universe: {universe}",
            )
        raise RequestError(f"unknown format {fmt!r}; allowed: text, csv, json")


def refuse_item_nonresponse(dataset: Dataset, plan: TabulationPlan) -> None:
    """A sum or mean of a magnitude with item non-response has its own base: not here.

    Raises:
        RequestError: naming the variable and the way to its figures.
    """
    for m in plan.magnitudes:
        variable = dataset.catalog.magnitudes.get(m.variable)
        if variable is not None and variable.missing is not None:
            raise RequestError(
                f"{variable.name} has item non-response (missing codes): its sums and means "
                "are over the records with a value, which the table builder counts; use "
                "TableBuilder with Protection(None) (tablesafe table --method none does)"
            )


def tabulate(
    dataset: Dataset, request: TableRequest, *, engine: Engine | None = None
) -> Tabulation:
    """Tabulate ``request`` on ``dataset`` without protection.

    The request is checked against the catalog before any microdata is
    read; the engine checks the microdata against the catalog on first use.

    Args:
        dataset: The dataset.
        request: The table request.
        engine: An :class:`~tablesafe.engines.Engine`; a new
            :class:`~tablesafe.engines.DuckDBEngine` by default.
    """
    request = request.coerced(dataset.catalog)
    plan = request.bind(dataset.catalog)
    refuse_item_nonresponse(dataset, plan)
    engine = engine_or_default(engine)
    return Tabulation(request, engine.tabulate(dataset, plan), dataset.name)
