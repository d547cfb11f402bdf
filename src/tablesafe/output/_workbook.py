"""The XLSX of a protected table, laid out for people first and machines last.

The workbook opens on the table as the web page shows it: one sheet per
statistic, each the cross-tab of the first dimension (rows) by the second
(columns) with their totals, one block per layer of a 3- or 4-way table
(headed ``Region = North``), category labels rather than codes, suppressed
cells blank or ``"<k"`` as the site shows them, and numbers formatted per
statistic (whole numbers with thousands separators; sums and means with the
decimals of their rounding). Each sheet starts with the table's title and
universe in words and ends with the protection statement. Then comes the
long ``cells`` sheet (one row per cell, codes and labels, the flags) for
machines, and the ``about`` sheet: what the table is, where it comes from and
how it was protected, in sentences and ``setting: value`` lines.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tablesafe.catalog._magnitudes import read_magnitude_column, read_quantile_column
from tablesafe.output._describe import title
from tablesafe.output._render import TOTAL_LABEL, UNPROTECTED_TITLE, _decimals_of
from tablesafe.output._xlsx import BOLD, MARKED, NUMBER, Grid, workbook_bytes

if TYPE_CHECKING:
    from tablesafe.output._published import Published

__all__ = ["sheet_names", "table_workbook"]

#: Short sheet names of the count statistics (Excel allows 31 characters).
_SHEET = {
    "n": "Count",
    "weighted": "Weighted count",
    "se": "Standard error",
    "ci_low": "95% CI lower",
    "ci_high": "95% CI upper",
}
_MAX_SHEET = 31
#: The sheet names' words for an estimate's standard error and interval columns.
_COMPANION_SHEETS = {"_se": " SE", "_ci_low": " CI lower", "_ci_high": " CI upper"}


def sheet_names(statistics: Sequence[str]) -> dict[str, str]:
    """Each statistic's sheet name, unique, 31 characters at most: ``Weighted mean INCOME``."""
    out: dict[str, str] = {}
    taken = {"cells", "about"}
    for s in statistics:
        # An estimate's standard error and interval: its sheet name, then "SE", "CI lower"...
        core, tail = s, ""
        if s not in _SHEET:
            for suffix, words in _COMPANION_SHEETS.items():
                if s.endswith(suffix):
                    core, tail = s.removesuffix(suffix), words
        parts = read_magnitude_column(core)
        quantile = read_quantile_column(core)
        base = _SHEET.get(s) or s
        if core.startswith("percent_"):
            base = f"{core.removeprefix('percent_').capitalize()} percentage{tail}"
        elif quantile is not None:
            kind = "median" if quantile[0] == 50 else f"P{quantile[0]}"
            weighted = quantile[2]
            base = f"{'Weighted ' + kind if weighted else kind.capitalize()} {quantile[1]}{tail}"
        elif parts is not None:
            kind, name, weighted = parts
            base = f"{'Weighted ' + kind if weighted else kind.capitalize()} {name}{tail}"
        base = base[:_MAX_SHEET]
        sheet, i = base, 2
        while sheet.lower() in taken:
            suffix = f" {i}"
            sheet, i = base[: _MAX_SHEET - len(suffix)] + suffix, i + 1
        taken.add(sheet.lower())
        out[s] = sheet
    return out


def _decimals(table: Published, statistic: str, values: np.ndarray) -> int:
    """Decimals a statistic's number format shows: none for whole numbers, else its rounding's."""
    numbers = [v for v in values.reshape(-1).tolist() if isinstance(v, int | float)]
    if all(float(v).is_integer() for v in numbers if math.isfinite(v)):
        return 0
    if (
        read_quantile_column(
            statistic.removesuffix("_se").removesuffix("_ci_low").removesuffix("_ci_high")
        )
        is not None
    ):
        # Quantiles keep significant figures: as many decimals as the published ones have.

        places = max(_decimals_of(float(v)) for v in numbers if math.isfinite(v))
        return min(max(places, 1), 3)
    mags = table.metadata.get("magnitudes")
    rounding = mags.get("rounding", {}) if isinstance(mags, Mapping) else {}
    step = str(rounding.get(statistic.partition("_")[0], "0.01"))
    decimals = len(step.partition(".")[2]) if "." in step else 2
    return min(max(decimals, 1), 3)


def _cell(value: object, style: int, marked: int | None = None) -> object:
    """A figure with its number format; text (``"<k"``, ``"c"``) and blanks as they are.

    ``marked`` is the style of a total that leaves withheld cells out (its
    format adds the mark ``t``), where the cell is one.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return value
    return (value, style if marked is None else marked)


def _block(
    table: Published, values: np.ndarray, layer: tuple[int, ...], style: tuple[int, int]
) -> list[list[object]]:
    """One layer's cross-tab: a header row of column labels, then a row per row category.

    ``style``: the statistic's number style, and the same marked ``t``.
    """
    dims = table.dimensions
    rows = dims[0]
    where: tuple[Any, ...] = (slice(None), *(() if len(dims) == 1 else (slice(None),)), *layer)
    sub, computed = values[where], table.computed[where]
    excluding = table.excludes_withheld
    marks = np.zeros_like(computed) if excluding is None else excluding[where]

    def cell(at: tuple[int, ...]) -> object:
        return _cell(sub[at], style[0], style[1] if marks[at] else None) if computed[at] else None

    row_labels = [*rows.labels, TOTAL_LABEL]
    if len(dims) == 1:
        header: list[object] = [(rows.label, BOLD), ("Value", BOLD)]
        body = [[lab, cell((i,))] for i, lab in enumerate(row_labels) if computed[i]]
        return [header, *body]
    cols = dims[1]
    keep_cols = [j for j in range(cols.size + 1) if computed[:, j].any()]
    col_labels = [*cols.labels, TOTAL_LABEL]
    header = [(f"{rows.label} \\ {cols.label}", BOLD), *((col_labels[j], BOLD) for j in keep_cols)]
    body = [
        [row_labels[i], *(cell((i, j)) for j in keep_cols)]
        for i in range(rows.size + 1)
        if computed[i].any()
    ]
    return [header, *body]


def _statistic_sheet(
    table: Published, statistic: str, values: np.ndarray, notes: Sequence[str]
) -> Grid:
    """One statistic's cross-tab, layer by layer, between the title and the statement."""
    dims = table.dimensions
    decimals = _decimals(table, statistic, values)
    style = (NUMBER[decimals], MARKED[decimals])
    heading = title([d.label for d in dims], [statistic], table.catalog, table.metadata)
    if not table.protected:
        heading = f"{UNPROTECTED_TITLE}: {heading}"
    out: list[list[object]] = [
        [(heading, BOLD)],
        [f"Universe: {table.universe_label}"],
        [],
    ]
    layer_dims = dims[2:]
    for layer in itertools.product(*[range(d.size + 1) for d in layer_dims]):
        where: tuple[Any, ...] = (slice(None), slice(None), *layer)
        if layer and not table.computed[where].any():
            continue
        if layer_dims:
            name = ", ".join(
                f"{d.label} = {[*d.labels, TOTAL_LABEL][j]}"
                for d, j in zip(layer_dims, layer, strict=True)
            )
            out.append([(name, BOLD)])
        out.extend(_block(table, values, layer, style))
        out.append([])
    out.extend([line] for line in notes)
    width = max((len(str(r[0])) for r in out[3:] if r and isinstance(r[0], str)), default=10)
    return Grid(out, widths=[min(max(width, 12), 60)])


def _words(value: object) -> str:
    """A published setting as text for people: ``key: value; key: value``, lists with commas."""
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {_words(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(_words(v) for v in value)
    return str(value)


def _about(table: Published, meta: Mapping[str, Any], with_labels: bool) -> Grid:
    """The about sheet: the table in words, its source, its notes, then its settings."""
    notes = meta["footnotes"]
    catalog = table.catalog
    labels = table.statistic_labels()
    rows: list[list[object]] = [
        [("About this table", BOLD)],
        ["Title", meta["title"]],
        ["Universe", meta["universe_label"]],
        ["Dimensions", "; ".join(f"{d.label} ({d.name})" for d in table.dimensions)],
        ["Statistics", "; ".join(f"{label} ({s})" for s, label in labels.items())],
    ]
    if table.request.universe:
        rows.append(["Universe in codes", _words(meta["universe"])])
    dataset = str(meta.get("dataset", ""))
    if catalog is not None and catalog.title:
        dataset = f"{catalog.title} ({dataset})"
    rows.append(["Dataset", dataset])
    if notes.get("citation"):
        rows.append(["Source", str(notes["citation"]).replace("`", "")])
    if table.rounding and "weighted" in meta:
        rows.append(["Rounding of weighted figures", table.rounding])
    rows.extend(["Note", line] for line in notes["statement"])
    rows.extend([f"Flag {k}", v] for k, v in dict(notes["flags"]).items())
    rows.append(
        [
            "Sheets",
            "Each statistic's sheet shows the table as rows by columns (layers as blocks); "
            "the sheet cells has one row per cell, with "
            + ("codes and labels" if with_labels else "codes")
            + ", for machines.",
        ]
    )
    skip = {
        "title",
        "universe_label",
        "universe",
        "footnotes",
        "dimensions",
        "citation",
        "dataset",
        "statistics",
        "file_stem",
    }
    rows.extend(
        [k.replace("_", " ").capitalize(), _words(v)] for k, v in meta.items() if k not in skip
    )
    return Grid(rows, widths=[28, 100])


def table_workbook(table: Published, *, labels: bool = False) -> bytes:
    """The table's workbook: a sheet per statistic (cross-tab), ``cells`` and ``about``.

    Args:
        table: The protected table.
        labels: Add a ``<name>_label`` column beside each dimension's codes in ``cells``
            (the cross-tab sheets always show labels).
    """
    meta = table.public_metadata()
    shown = table.shown_statistics()
    names = sheet_names(list(shown))
    notes = [*meta["footnotes"]["statement"], *table.mark_legend()]
    sheets: list[tuple[str, Any]] = [
        (names[s], _statistic_sheet(table, s, values, notes)) for s, values in shown.items()
    ]
    sheets.append(("cells", table.to_frame(labels=labels)))
    sheets.append(("about", _about(table, meta, labels)))
    return workbook_bytes(sheets)
