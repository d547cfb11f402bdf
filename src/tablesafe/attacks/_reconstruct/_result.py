"""What the reconstruction attack reports: its result type and the shares it scores."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

#: Called with (stage, done, total).
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class ReconstructionResult:
    """What the reconstruction attack rebuilt from a set of published tables.

    Shares are fractions (0 to 1). When the time limit stopped the attack
    (``complete`` false), each share is a lower bound and its ``_upper``
    twin counts the undecided cells as pinned.

    Attributes:
        method: The protection's name.
        tables: Number of published tables attacked.
        variables: The source variables of the full cross-classification.
        cells: Its number of cells.
        records: Records in it (the dataset's records).
        uniques: Sample-unique records (cells holding exactly one record).
        cells_exact_share: Share of cells whose count is pinned exactly.
        nonzero_cells_exact_share: The same among cells holding records.
        records_exact_share: Share of records that are in pinned cells.
        uniques_exact_share: Share of sample-unique records in pinned cells
            (re-identified: their full combination of categories is known to
            be held by exactly one record).
        cells_exact_share_upper: Upper bound of ``cells_exact_share``.
        records_exact_share_upper: Upper bound of ``records_exact_share``.
        uniques_exact_share_upper: Upper bound of ``uniques_exact_share``.
        undecided: Cells left undecided by the time limit.
        complete: Whether every cell was decided.
        seconds: Time the attack took (building the tables included).
        stages: Cells decided by each stage (``zeros``, ``propagation``,
            ``milp_free``, ``lp_pinned``, ``lp_free``, ``milp_pinned``, ``milp_free_cell``).
        putative: The best-guess reconstruction's scores and its baseline's
            (see :mod:`tablesafe.attacks._reconstruct._putative`); empty when not run.
    """

    method: str
    tables: int
    variables: tuple[str, ...]
    cells: int
    records: int
    uniques: int
    cells_exact_share: float
    nonzero_cells_exact_share: float
    records_exact_share: float
    uniques_exact_share: float
    cells_exact_share_upper: float
    records_exact_share_upper: float
    uniques_exact_share_upper: float
    undecided: int
    complete: bool
    seconds: float
    stages: Mapping[str, int] = field(default_factory=dict)
    putative: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The result as a plain dictionary (JSON-ready)."""
        out = dict(self.__dict__)
        out["variables"] = list(self.variables)
        out["stages"] = dict(self.stages)
        out["putative"] = dict(self.putative)
        return out


def shares(state: npt.NDArray[np.int8], truth: npt.NDArray[np.int64]) -> dict[str, float | int]:
    """The result's counts and shares from each cell's decision (1 pinned, 0 free, -1 undecided)."""
    pinned = state == 1
    maybe = state != 0
    records = int(truth.sum())
    uniques = truth == 1
    nonzero = truth > 0

    def share(mask: npt.NDArray[np.bool_], of: npt.NDArray[np.bool_] | None = None) -> float:
        if of is None:
            return round(float(mask.mean()) if mask.size else 0.0, 6)
        total = int(of.sum())
        return round(int((mask & of).sum()) / total, 6) if total else 0.0

    def record_share(mask: npt.NDArray[np.bool_]) -> float:
        return round(int(truth[mask].sum()) / records, 6) if records else 0.0

    return {
        "cells": int(truth.size),
        "records": records,
        "uniques": int(uniques.sum()),
        "cells_exact_share": share(pinned),
        "nonzero_cells_exact_share": share(pinned, nonzero),
        "records_exact_share": record_share(pinned),
        "uniques_exact_share": share(pinned, uniques),
        "cells_exact_share_upper": share(maybe),
        "records_exact_share_upper": record_share(maybe),
        "uniques_exact_share_upper": share(maybe, uniques),
        "undecided": int((state == -1).sum()),
    }


def report(
    name: str,
    tables: int,
    variables: tuple[str, ...],
    state: npt.NDArray[np.int8],
    truth: npt.NDArray[np.int64],
    stages: Mapping[str, int],
    seconds: float,
) -> ReconstructionResult:
    """The result of an attack whose cells are decided as ``state`` says."""
    scored = shares(state, truth)
    return ReconstructionResult(
        method=name,
        tables=tables,
        variables=variables,
        cells=int(scored["cells"]),
        records=int(scored["records"]),
        uniques=int(scored["uniques"]),
        cells_exact_share=float(scored["cells_exact_share"]),
        nonzero_cells_exact_share=float(scored["nonzero_cells_exact_share"]),
        records_exact_share=float(scored["records_exact_share"]),
        uniques_exact_share=float(scored["uniques_exact_share"]),
        cells_exact_share_upper=float(scored["cells_exact_share_upper"]),
        records_exact_share_upper=float(scored["records_exact_share_upper"]),
        uniques_exact_share_upper=float(scored["uniques_exact_share_upper"]),
        undecided=int(scored["undecided"]),
        complete=int(scored["undecided"]) == 0,
        seconds=seconds,
        stages=stages,
    )
