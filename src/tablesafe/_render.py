"""Turning cell arrays into long frames, CSV, JSON and pretty text.

Machine formats are long: one row per cell (inner cells and margins), one
column per dimension holding the category code, ``_T`` (the SDMX code for a
total) where the cell is a margin over that dimension, then the statistics.
The text format shows one two-way cross-tabulation per layer, with totals.
"""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table

from tablesafe._request import DimensionPlan

__all__ = ["TOTAL_CODE", "TOTAL_LABEL", "long_frame", "render_text", "to_csv", "to_json"]

#: Code of a total (margin) in machine formats, as in SDMX.
TOTAL_CODE = "_T"
#: Label of a total in text output.
TOTAL_LABEL = "Total"


def long_frame(
    dimensions: Sequence[DimensionPlan],
    columns: Mapping[str, np.ndarray],
    computed: np.ndarray,
    *,
    labels: bool = False,
) -> pd.DataFrame:
    """One row per computed cell: dimension codes (``_T`` for totals) and statistics.

    Args:
        dimensions: The table's dimensions.
        columns: Statistic name -> array of the extended shape.
        computed: Which cells to include.
        labels: Also add a ``<name>_label`` column per dimension.
    """
    shape = computed.shape
    idx = np.nonzero(computed.reshape(-1))[0]
    multi = np.unravel_index(idx, shape)
    data: dict[str, Any] = {}
    for d, pos in zip(dimensions, multi, strict=True):
        codes = np.array([*d.codes, TOTAL_CODE], dtype=object)
        data[d.name] = codes[pos]
        if labels:
            data[f"{d.name}_label"] = np.array([*d.labels, TOTAL_LABEL], dtype=object)[pos]
    for name, arr in columns.items():
        data[name] = arr.reshape(-1)[idx]
    return pd.DataFrame(data)


def to_csv(frame: pd.DataFrame) -> str:
    """CSV text of a long frame, with full float precision."""
    buf = io.StringIO()
    frame.to_csv(buf, index=False, float_format="%.17g", lineterminator="\n")
    return buf.getvalue()


def to_json(frame: pd.DataFrame, meta: Mapping[str, Any]) -> str:
    """JSON text: ``{"meta": ..., "cells": [...]}`` with exact numbers."""
    cells = []
    for rec in frame.to_dict(orient="records"):
        cells.append({str(k): _plain(v) for k, v in rec.items()})
    return json.dumps({"meta": meta, "cells": cells}, indent=1, allow_nan=False)


def _plain(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def _fmt(value: Any, statistic: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if statistic in ("n",) or (float(value).is_integer() and statistic != "weighted"):
        return f"{int(value):,}"
    return f"{value:,.0f}"


def render_text(
    dimensions: Sequence[DimensionPlan],
    columns: Mapping[str, np.ndarray],
    computed: np.ndarray,
    *,
    title: str,
    caption: str = "",
    width: int = 120,
) -> str:
    """Pretty text (via rich): one cross-tabulation per statistic and layer.

    A 1-way table is a single column; a k-way table (k >= 2) shows rows by
    columns for each combination of the layer dimensions (3rd and 4th).
    Cells that were not computed (a margin not asked for) show as blank.
    """
    console = Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None)
    console.print(title)
    k = len(dimensions)
    for stat, arr in columns.items():
        if k == 1:
            d = dimensions[0]
            t = Table(title=f"{stat}", box=box.SIMPLE_HEAVY, title_justify="left")
            t.add_column(d.label)
            t.add_column(stat, justify="right")
            for i, lab in enumerate([*d.labels, TOTAL_LABEL]):
                t.add_row(lab, _fmt(arr[i], stat) if computed[i] else "")
            console.print(t)
            continue
        rows, cols = dimensions[0], dimensions[1]
        layer_dims = dimensions[2:]
        for layer in itertools.product(*[range(d.size + 1) for d in layer_dims]):
            name = ", ".join(
                f"{d.label} = {([*d.labels, TOTAL_LABEL])[j]}"
                for d, j in zip(layer_dims, layer, strict=True)
            )
            where: tuple[Any, ...] = (slice(None), slice(None), *layer)
            sub = arr[where]
            csub = computed[where]
            if not csub.any():
                continue
            t = Table(
                title=f"{stat}" + (f"  [{name}]" if name else ""),
                box=box.SIMPLE_HEAVY,
                title_justify="left",
            )
            t.add_column(f"{rows.label} \\ {cols.label}")
            for lab in [*cols.labels, TOTAL_LABEL]:
                t.add_column(lab, justify="right")
            for i, lab in enumerate([*rows.labels, TOTAL_LABEL]):
                t.add_row(
                    lab,
                    *[_fmt(sub[i, j], stat) if csub[i, j] else "" for j in range(cols.size + 1)],
                )
            console.print(t)
    if caption:
        console.print(caption)
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue()
