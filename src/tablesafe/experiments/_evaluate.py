"""Evaluating protections on a real dataset's tables: the data owner's parameter choice.

For each table and each mechanism configuration, the protected table is
built with the TableBuilder (cell-key seeds, margins aggregated) and
compared with the unprotected tabulation on the inner cells: percent
perturbed, RM, Hellinger distance and utility, mean absolute deviation,
relative absolute difference of the total, and the chi-square test of
independence before and after (two-way tables).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tablesafe._builder import Protection, TableBuilder
from tablesafe._dataset import Dataset
from tablesafe._errors import ParameterError
from tablesafe._request import TableRequest
from tablesafe.mechanisms import destatis, dp_geometric, drop_add_q, pram_shlomo_young
from tablesafe.metrics import (
    chi_square_independence,
    entropy_risk,
    hellinger_distance,
    hellinger_utility,
    mean_absolute_deviation,
    percent_perturbed,
)

__all__ = ["Evaluation", "evaluate", "mechanism_grid"]


@dataclass(frozen=True)
class Evaluation:
    """One row of an evaluation: a table, a configuration and its measures."""

    table: str
    method: str
    measures: dict[str, float | None]

    def as_dict(self) -> dict[str, Any]:
        """A plain dictionary."""
        return {"table": self.table, "method": self.method, **self.measures}


def mechanism_grid(
    methods: Sequence[str],
    epsilons: Sequence[float] = (0.5, 1.0, 2.0),
    caps: Sequence[int] = (3, 5, 7),
) -> list[tuple[str, Any]]:
    """Named mechanism configurations: dp over epsilons x caps, q over caps, pram, ckm."""
    out: list[tuple[str, Any]] = []
    for m in methods:
        if m == "dp":
            out += [(f"dp eps={e} cap={c}", dp_geometric(e, cap=c)) for e in epsilons for c in caps]
        elif m == "q":
            out += [(f"q cap={c}", drop_add_q(0.01, c)) for c in caps]
        elif m == "pram":
            out.append(("pram", pram_shlomo_young()))
        elif m == "ckm":
            out.append(("ckm D=3 V=1", destatis(3, 1.0)))
        else:
            raise ParameterError(f"unknown method {m!r}; allowed: dp, pram, q, ckm")
    return out


def evaluate(
    dataset: Dataset,
    tables: Sequence[Sequence[str]],
    configurations: Sequence[tuple[str, Any]],
    *,
    engine: Any = None,
) -> list[Evaluation]:
    """Measure every configuration on every table (inner cells, sample counts)."""
    out = []
    for dims in tables:
        request = TableRequest(tuple(dims), statistic="both")
        base = TableBuilder(dataset, Protection(None), engine=engine)
        truth = base.tabulate(request).aggregates
        inner = truth.inner
        a = truth.n[inner].astype(float)
        wa = truth.weight_sum[inner] if truth.weight_sum is not None else None
        chi_a = chi_square_independence(a) if a.ndim == 2 else (None, None)
        for name, mech in configurations:
            table = TableBuilder(dataset, Protection(mech), engine=base.engine).build(request)
            assert table.counts is not None
            b = table.counts[inner].astype(float)
            measures: dict[str, float | None] = {
                "percent_perturbed": percent_perturbed(a, b),
                "rm": entropy_risk(a, b),
                "hellinger": hellinger_distance(a, b),
                "utility": hellinger_utility(a, b),
                "mad": mean_absolute_deviation(a, b),
                "rad_total": 100 * abs(b.sum() - a.sum()) / a.sum(),
                "epsilon": float(mech.privacy().epsilon),
                "delta": float(mech.privacy().delta),
            }
            if wa is not None and table.weighted is not None:
                measures["rm_weighted"] = entropy_risk(wa, table.weighted[inner])
            if a.ndim == 2:
                measures["chi2_original"], measures["p_original"] = chi_a
                measures["chi2_protected"], measures["p_protected"] = chi_square_independence(b)
            out.append(Evaluation(" * ".join(dims), name, measures))
    return out
