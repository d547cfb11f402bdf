"""Turning cell arrays into long frames, CSV, JSON and pretty text.

Machine formats are long: one row per cell (inner cells and margins), one
column per dimension holding the category code, ``_T`` (the SDMX code for a
total) where the cell is a margin over that dimension, then the statistics.
The text format shows one two-way cross-tabulation per layer, with totals.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import numpy.typing as npt
import orjson

from tablesafe.cells._plan import DimensionPlan

if TYPE_CHECKING:
    import pandas as pd

#: A long table: columns by name (numpy arrays), or a pandas DataFrame.
Columns: TypeAlias = "Mapping[str, np.ndarray] | pd.DataFrame"
#: One cell of a published table as text output shows it: a code, a label, a
#: count or a figure (Python or numpy), or None for a blank.
CellValue: TypeAlias = "int | float | str | np.integer | np.floating | None"

__all__ = [
    "EXCLUDES_WITHHELD_MARK",
    "TOTAL_CODE",
    "TOTAL_LABEL",
    "UNPROTECTED",
    "UNPROTECTED_TITLE",
    "WITHHELD_MARK",
    "Columns",
    "iter_csv",
    "iter_json",
    "long_columns",
    "long_frame",
    "long_rows",
    "render_text",
    "to_csv",
    "to_json",
    "to_json_bytes",
]

#: Code of a total (margin) in machine formats, as in SDMX.
TOTAL_CODE = "_T"
#: Label of a total in text output.
TOTAL_LABEL = "Total"

#: What an unprotected table or tabulation says first, in every format.
UNPROTECTED = "UNPROTECTED tabulation (true values, for the data owner only)"
#: The start of an unprotected table's title (JSON, JSON-stat, SDMX, XLSX, text, the page).
UNPROTECTED_TITLE = "UNPROTECTED"

#: What a withheld figure shows in text, the XLSX's cross-tabs and on the page: ``c``,
#: confidential, as its SDMX CONF_STATUS and JSON-stat status ``C`` (output/_withheld.py).
WITHHELD_MARK = "c"
#: What follows a total that adds up only the cells published (``excludes_withheld``).
EXCLUDES_WITHHELD_MARK = "t"


def long_columns(
    dimensions: Sequence[DimensionPlan],
    columns: Mapping[str, np.ndarray],
    computed: np.ndarray,
    *,
    labels: bool = False,
) -> dict[str, np.ndarray]:
    """Columns of one row per computed cell: dimension codes (``_T`` for totals), statistics.

    Args:
        dimensions: The table's dimensions.
        columns: Statistic name -> array of the extended shape.
        computed: Which cells to include.
        labels: Also add a ``<name>_label`` column per dimension.
    """
    idx = np.flatnonzero(computed)
    values = {name: arr.reshape(-1)[idx] for name, arr in columns.items()}
    return long_rows(dimensions, computed.shape, idx, values, labels=labels)


def long_rows(
    dimensions: Sequence[DimensionPlan],
    shape: tuple[int, ...],
    cells: np.ndarray,
    columns: Mapping[str, np.ndarray],
    *,
    labels: bool = False,
) -> dict[str, np.ndarray]:
    """:func:`long_columns` of some cells: their codes, then ``columns`` (their values).

    Args:
        dimensions: The table's dimensions.
        shape: The extended shape.
        cells: Flat positions of the cells in it.
        columns: Statistic name -> the values at ``cells`` (1-D).
        labels: Also add a ``<name>_label`` column per dimension.
    """
    multi = np.unravel_index(cells, shape)
    data: dict[str, Any] = {}
    for d, pos in zip(dimensions, multi, strict=True):
        codes = np.array([*d.codes, TOTAL_CODE], dtype=object)
        data[d.name] = codes[pos]
        if labels:
            data[f"{d.name}_label"] = np.array([*d.labels, TOTAL_LABEL], dtype=object)[pos]
    data.update(columns)
    return data


def long_frame(
    dimensions: Sequence[DimensionPlan],
    columns: Mapping[str, np.ndarray],
    computed: np.ndarray,
    *,
    labels: bool = False,
) -> pd.DataFrame:
    """:func:`long_columns` as a pandas DataFrame."""
    import pandas as pd

    return pd.DataFrame(long_columns(dimensions, columns, computed, labels=labels))


def to_csv(frame: Columns) -> str:
    """CSV text of a long frame, with exact numbers.

    Integers as integers, floats in their shortest exact form (an integral
    float without its ``.0``), missing values empty, booleans ``True`` and
    ``False``. Written column by column and joined by the standard
    library's C CSV writer: a 100k-cell table takes a few hundredths of a
    second (pandas' writer took 0.1-0.3 s).
    """
    return "".join(_csv_pieces(_columns(frame), None))


def to_json(frame: Columns, meta: Mapping[str, Any]) -> str:
    """JSON text: ``{"meta": ..., "cells": [...]}`` with exact numbers (orjson).

    Floats are written in their shortest exact form, missing values
    (``NaN``, ``None``) as ``null``.
    """
    return to_json_bytes(frame, meta).decode()


def to_json_bytes(frame: Columns, meta: Mapping[str, Any]) -> bytes:
    """:func:`to_json` as UTF-8 bytes (what the server sends)."""
    return b"".join(iter_json(frame, meta))


def iter_json(frame: Columns, meta: Mapping[str, Any], *, chunk: int = 16384) -> Iterator[bytes]:
    """:func:`to_json_bytes` in pieces of ``chunk`` cells, for a streamed response.

    The pieces joined are exactly the bytes of
    ``orjson.dumps({"meta": meta, "cells": [...]})``.
    """
    cols = _columns(frame)
    rows = len(next(iter(cols.values()))) if cols else 0
    yield b'{"meta":' + _dumps(meta) + b',"cells":['
    if not cols:
        # Cells without columns are empty objects.
        yield b",".join([b"{}"] * rows)
    else:
        # Each column's items as JSON, each with its key and separator in
        # front; a cell is the join of its columns' items. Byte for byte
        # what orjson writes for the list of cell objects, without building
        # a dict per cell (7x faster on 100k cells).
        pieces: list[Any] = []
        for i, (name, values) in enumerate(cols.items()):
            pieces.append((b"{" if i == 0 else b",") + _dumps(name) + b":")
            pieces.append(_json_items(values))
        pieces.append(b"}")
        for start in range(0, rows, chunk):
            # Constant pieces (keys and separators) repeat along the cells.
            row_parts = [
                p[start : start + chunk] if isinstance(p, list) else itertools.repeat(p)
                for p in pieces
            ]
            # repeat() never ends: the columns decide where a piece stops.
            cells = b",".join(map(b"".join, zip(*row_parts, strict=False)))
            yield cells if start == 0 else b"," + cells
    yield b"]}"


def iter_csv(frame: Columns, *, chunk: int = 16384) -> Iterator[bytes]:
    """:func:`to_csv` as UTF-8 pieces of ``chunk`` rows (joined: the same bytes)."""
    for piece in _csv_pieces(_columns(frame), chunk):
        yield piece.encode()


def _csv_pieces(
    cols: dict[str, np.ndarray], chunk: int | None, *, header: bool = True
) -> Iterator[str]:
    """CSV text of ``cols`` in pieces of ``chunk`` rows (all at once for ``None``).

    ``header=False`` leaves the header line out (a streamed writer's later pieces).
    """
    text = [_csv_column(v) for v in cols.values()]
    rows = len(text[0]) if text else 0
    step = chunk or max(rows, 1)
    special = str.maketrans("", "", ',"\r\n')
    plain = len(text) > 1 and all(
        v.dtype.kind in "iufb" or all(t.translate(special) == t for t in set(c))
        for v, c in zip(cols.values(), text, strict=True)
    )
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(list(cols))
    head = buf.getvalue() if header else ""
    if rows == 0:
        yield head
    for start in range(0, rows, step):
        part = (c[start : start + step] for c in text)
        if plain:
            # Nothing to quote (no separator, quote or line break in any
            # value, and more than one column): what the csv writer would write.
            body = "\n".join(map(",".join, zip(*part, strict=True))) + "\n"
        else:
            buf.seek(0)
            buf.truncate()
            writer.writerows(zip(*part, strict=True))
            body = buf.getvalue()
        yield head + body if start == 0 else body


def _dumps(value: object) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY, default=_plain)


def _json_items(values: np.ndarray) -> list[bytes]:
    """Each value of a column as orjson writes it inside a list."""
    items = values.tolist()
    if values.dtype.kind in "iufb" and items:
        # Numbers, booleans and null contain no comma: split the list's JSON.
        return _dumps(items)[1:-1].split(b",")
    kinds = set(map(type, items))
    if len(kinds & {bool, int, float}) <= 1 and kinds <= {bool, int, float, str, type(None)}:
        # Codes and labels: values of one numeric type, text and None are
        # distinct as dict keys (1, 1.0 and True would not be), so each
        # distinct value is written once.
        written = {v: _dumps(v) for v in set(items)}
        return list(map(written.__getitem__, items))
    return [_dumps(v) for v in items]


def _columns(frame: Columns) -> dict[str, np.ndarray]:
    """Name -> values of a long table given as columns or as a DataFrame."""
    if isinstance(frame, Mapping):
        return {str(k): np.asarray(v) for k, v in frame.items()}
    return {str(c): frame[c].to_numpy() for c in frame.columns}


def _csv_column(values: np.ndarray) -> list[str]:
    kind = values.dtype.kind
    items = values.tolist()
    if kind in "iu":
        return list(map(str, items))
    if kind == "b":
        return list(map({True: "True", False: "False"}.__getitem__, items))
    kinds = set(map(type, items))
    if len(kinds & {bool, int, float}) <= 1 and kinds <= {bool, int, float, str, type(None)}:
        # One numeric type, text and None are distinct as dict keys (1, 1.0
        # and True would not be): each distinct value is written once.
        written = {v: _csv_value(v) for v in set(items)}
        return list(map(written.__getitem__, items))
    return list(map(_csv_value, items))


def _csv_value(v: object) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    return str(v)


def _plain(v: object) -> int | float | bool | list[object]:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, tuple | set | frozenset):
        return list(v)
    raise TypeError(f"cannot write {type(v).__name__} as JSON")


#: Significant digits of a mean in text output (a mean of a 0/1 variable is a share).
MEAN_DIGITS = 4


def _fmt(value: CellValue, statistic: str, decimals: int | None = None) -> str:
    """One figure in text: ``decimals`` for every figure of a column where given (means)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if statistic.startswith("mean_"):
        if decimals is not None and math.isfinite(float(value)):
            return f"{float(value):,.{decimals}f}"
        return _significant(float(value), MEAN_DIGITS)
    if statistic.startswith("percent_"):
        # Percentages are published to two decimals: text shows them all.
        return f"{float(value):.2f}"
    if _is_quantile(statistic) and math.isfinite(float(value)):
        # Quantiles have their own rounding (significant figures): shown as published.
        return f"{float(value):,.{_decimals_of(float(value))}f}"
    if statistic in ("n",) or (float(value).is_integer() and statistic != "weighted"):
        return f"{int(value):,}"
    return f"{value:,.0f}"


def _is_quantile(statistic: str) -> bool:
    """Whether a column is a median or quantile, or one's standard error or interval."""
    return re.match(r"(median|p\d\d)_", statistic) is not None


def _decimals_of(value: float) -> int:
    """The decimals a published (rounded) figure has: 2.82 has 2, 31400.0 none."""
    text = repr(float(value))
    if "e" in text or "." not in text:
        return 0 if "e" not in text else max(0, -int(text.split("e")[1]))
    decimals = text.split(".")[1]
    return 0 if decimals == "0" else len(decimals)


def column_decimals(statistic: str, values: npt.ArrayLike) -> int | None:
    """One number of decimals for a whole column of means (``None`` for other columns).

    As many as the figure with most needs for :data:`MEAN_DIGITS` significant
    digits, but no more than the published figures have: 52,028.10 beside
    18.79, never 52,028.1 beside 18,790.66.
    """
    if not statistic.startswith("mean_"):
        return None
    numbers = [float(v) for v in np.asarray(values, dtype=object).reshape(-1) if _number(v)]
    numbers = [v for v in numbers if math.isfinite(v) and v != 0]
    if not numbers:
        return 0
    needed = max(max(0, MEAN_DIGITS - 1 - math.floor(math.log10(abs(v)))) for v in numbers)
    return min(needed, max(_decimals_of(v) for v in numbers))


def _number(value: object) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


def _significant(value: float, digits: int) -> str:
    """``value`` to ``digits`` significant digits (whole numbers kept), no trailing zeros.

    0.3712 -> ``0.3712``, 0.5 -> ``0.5``, 41.237 -> ``41.24``, 52341.6 -> ``52,342``.
    """
    if math.isnan(value):
        return ""
    if value == 0 or not math.isfinite(value):
        return f"{value:,.0f}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if decimals else text


def _marked(
    values: np.ndarray, cells: npt.NDArray[np.bool_], statistic: str, decimals: int | None
) -> np.ndarray:
    """``values`` with each figure at ``cells`` as text followed by the excluding mark."""
    out = values.astype(object)
    for at in zip(*np.nonzero(cells), strict=True):
        if _number(out[at]):
            out[at] = f"{_fmt(out[at], statistic, decimals)} {EXCLUDES_WITHHELD_MARK}"
    return out


def render_text(
    dimensions: Sequence[DimensionPlan],
    columns: Mapping[str, np.ndarray],
    computed: np.ndarray,
    *,
    title: str,
    caption: str = "",
    width: int = 120,
    labels: Mapping[str, str] | None = None,
    excluding: npt.NDArray[np.bool_] | None = None,
) -> str:
    """Pretty text (via rich): one cross-tabulation per statistic and layer.

    A 1-way table is a single column; a k-way table (k >= 2) shows rows by
    columns for each combination of the layer dimensions (3rd and 4th).
    Cells that were not computed (a margin not asked for) show as blank.
    ``labels`` names the statistics in words (their column names otherwise).
    A figure of a cell of ``excluding`` (a total that leaves withheld cells
    out) is followed by :data:`EXCLUDES_WITHHELD_MARK`.
    """
    # rich only for text: CSV and JSON, and the server, do not pay its import.
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None)
    console.print(title)
    k = len(dimensions)
    for stat, arr in columns.items():
        words = (labels or {}).get(stat, stat)
        decimals = column_decimals(stat, arr[computed])
        if excluding is not None and excluding.any():
            arr = _marked(arr, excluding, stat, decimals)
        if k == 1:
            d = dimensions[0]
            t = Table(title=words, box=box.SIMPLE_HEAVY, title_justify="left")
            t.add_column(d.label)
            t.add_column(words, justify="right")
            for i, lab in enumerate([*d.labels, TOTAL_LABEL]):
                t.add_row(lab, _fmt(arr[i], stat, decimals) if computed[i] else "")
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
                title=words + (f"  [{name}]" if name else ""),
                box=box.SIMPLE_HEAVY,
                title_justify="left",
            )
            t.add_column(f"{rows.label} \\ {cols.label}")
            for lab in [*cols.labels, TOTAL_LABEL]:
                t.add_column(lab, justify="right")
            for i, lab in enumerate([*rows.labels, TOTAL_LABEL]):
                t.add_row(
                    lab,
                    *[
                        _fmt(sub[i, j], stat, decimals) if csub[i, j] else ""
                        for j in range(cols.size + 1)
                    ],
                )
            console.print(t)
    if caption:
        console.print(caption)
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue()
