"""Excel workbooks written column by column (Office Open XML, ECMA-376 SpreadsheetML).

A protected table's workbook has a large sheet of cells (107,406 rows of 8
columns for area by single-year age by sex) and a small metadata sheet.
pandas' ``to_excel`` through openpyxl took 19 s for the large sheet, and
XlsxWriter, row by row, 4 to 7 s: both build and serialise one object per
spreadsheet cell. Here each column is turned into XML fragments once per
distinct value (a label column has a few hundred distinct values, a count
column a few thousand), the rows are joined from those fragments, and the
text goes into the shared-strings part once per distinct string. The
package holds only the parts a workbook needs (content types,
relationships, workbook, styles, shared strings, sheets) and no document
properties, so there is no timestamp to fix: the same frames always give
the same bytes (zip entries carry a fixed date).

Values: integers and finite floats are numbers (floats in their shortest
round-trip form), booleans are Excel booleans, missing values (``None``,
NaN, ``pd.NA``) leave the cell empty, anything else is text. Characters
that XML 1.0 cannot carry (control characters other than tab, newline and
carriage return) are dropped from text.
"""

from __future__ import annotations

import io
import math
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

import numpy as np

from tablesafe.output._render import EXCLUDES_WITHHELD_MARK

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["BOLD", "MARKED", "NUMBER", "PLAIN", "Grid", "workbook_bytes"]

_DECL = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"
_CT = "application/vnd.openxmlformats-officedocument.spreadsheetml"
#: Zip entries' date (the earliest a zip can carry): no clock reaches the bytes.
_DATE = (1980, 1, 1, 0, 0, 0)
_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")

#: Cell styles (indexes into ``cellXfs``): plain, bold (header rows), and numbers
#: with thousands separators and 0, 1, 2 or 3 decimals (the ``#,##0...`` formats).
#: ``MARKED`` are the same formats followed by a space and the mark of a total that
#: leaves withheld cells out (``t``, output/_withheld.py): still a number in the cell.
PLAIN, BOLD = 0, 1
_PLAIN_FORMATS = ("#,##0", "#,##0.0", "#,##0.00", "#,##0.000")
_NUMBER_FORMATS = (*_PLAIN_FORMATS, *(f'{f}" {EXCLUDES_WITHHELD_MARK}"' for f in _PLAIN_FORMATS))
NUMBER = {decimals: 2 + decimals for decimals in range(len(_PLAIN_FORMATS))}
MARKED = {decimals: 2 + len(_PLAIN_FORMATS) + decimals for decimals in range(len(_PLAIN_FORMATS))}

# One font, and a bold one for header rows (style 1); styles 2 to 9 are number formats.
_STYLES = (
    f'{_DECL}<styleSheet xmlns="{_MAIN}">'
    f'<numFmts count="{len(_NUMBER_FORMATS)}">'
    + "".join(
        f'<numFmt numFmtId="{164 + i}" formatCode="{escape(code, {chr(34): "&quot;"})}"/>'
        for i, code in enumerate(_NUMBER_FORMATS)
    )
    + "</numFmts>"
    '<fonts count="2"><font><sz val="11"/><name val="Calibri"/></font>'
    '<font><b/><sz val="11"/><name val="Calibri"/></font></fonts>'
    '<fills count="2"><fill><patternFill patternType="none"/></fill>'
    '<fill><patternFill patternType="gray125"/></fill></fills>'
    '<borders count="1"><border><left/><right/><top/><bottom/><diagonal/></border></borders>'
    '<cellStyleXfs count="1"><xf numFmtId="0" fontId="0" fillId="0" borderId="0"/></cellStyleXfs>'
    f'<cellXfs count="{2 + len(_NUMBER_FORMATS)}">'
    '<xf numFmtId="0" fontId="0" fillId="0" borderId="0" xfId="0"/>'
    '<xf numFmtId="0" fontId="1" fillId="0" borderId="0" xfId="0" applyFont="1"/>'
    + "".join(
        f'<xf numFmtId="{164 + i}" fontId="0" fillId="0" borderId="0" xfId="0" '
        'applyNumberFormat="1"/>'
        for i in range(len(_NUMBER_FORMATS))
    )
    + "</cellXfs>"
    '<cellStyles count="1"><cellStyle name="Normal" xfId="0" builtinId="0"/></cellStyles>'
    "</styleSheet>"
)


@dataclass(frozen=True)
class Grid:
    """A sheet laid out cell by cell (a cross-tab for people), not a frame.

    Attributes:
        rows: The rows, top first; each a list of cells, a cell a value or
            ``(value, style)`` (:data:`PLAIN`, :data:`BOLD` or a :data:`NUMBER`
            style); ``None`` is an empty cell.
        widths: Column widths in characters, first column first (others default).
    """

    rows: Sequence[Sequence[object]]
    widths: Sequence[float] = ()


class _Strings:
    """The shared-strings part: each distinct text once, in order of first use."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def cell(self, text: str) -> str:
        """The attributes and value of a cell holding ``text`` (after ``<c``)."""
        i = self.index.setdefault(_ILLEGAL.sub("", text), len(self.index))
        return f' t="s"><v>{i}</v></c>'

    def xml(self) -> str:
        items = "".join(f'<si><t xml:space="preserve">{escape(s)}</t></si>' for s in self.index)
        n = len(self.index)
        return f'{_DECL}<sst xmlns="{_MAIN}" count="{n}" uniqueCount="{n}">{items}</sst>'


#: Marks a missing value (pandas' NaN, None or NA) for :func:`_value_cell`.
_NA: Any = object()


def _value_cell(v: object, strings: _Strings) -> str | None:
    """A cell's attributes and value after ``<c``; ``None`` for an empty cell."""
    if v is None or v is _NA:
        return None
    if isinstance(v, bool | np.bool_):
        return f' t="b"><v>{int(bool(v))}</v></c>'
    if isinstance(v, Integral):
        return f"><v>{int(v)}</v></c>"
    if isinstance(v, Real):
        x = float(v)
        if math.isnan(x):
            return None
        if math.isinf(x):
            return strings.cell(str(x))
        return f"><v>{x!r}</v></c>"
    return strings.cell(str(v))


def _sheet_xml(frame: pd.DataFrame, strings: _Strings) -> str:
    import pandas as pd

    # Cells carry no reference (``r`` is optional): each row lists all its
    # cells in order, an empty ``<c/>`` where a value is missing, so every cell
    # of a column is one of a few fragments and a row is a join of fragments.
    header = "".join(f'<c s="1"{strings.cell(str(name))}' for name in frame.columns)
    height, width = frame.shape
    grid = np.empty((height, width + 2), dtype=object)
    grid[:, 0] = [f'<row r="{i}">' for i in range(2, height + 2)]
    grid[:, -1] = "</row>"
    for j, name in enumerate(frame.columns):
        # One fragment per distinct value (pandas' factorize: NaN, None and NA
        # are code -1, which indexes the last fragment, the empty cell).
        codes, uniques = pd.factorize(frame[name], use_na_sentinel=True)
        frags = [_value_cell(_NA if pd.isna(u) else u, strings) for u in uniques]
        table = np.asarray([f"<c{f}" if f is not None else "<c/>" for f in frags] + ["<c/>"])
        grid[:, j + 1] = table.astype(object)[codes]
    body = "".join(grid.ravel().tolist())
    return (
        f'{_DECL}<worksheet xmlns="{_MAIN}" xmlns:r="{_REL}"><sheetData>'
        f'<row r="1">{header}</row>{body}</sheetData></worksheet>'
    )


def _grid_xml(grid: Grid, strings: _Strings) -> str:
    """A sheet of rows of cells, each with its style (a few hundred to a few thousand cells)."""
    rows = []
    for r, row in enumerate(grid.rows, start=1):
        cells = []
        for cell in row:
            value, style = cell if isinstance(cell, tuple) else (cell, PLAIN)
            frag = _value_cell(value, strings)
            attr = f' s="{style}"' if style else ""
            cells.append(f"<c{attr}{frag}" if frag is not None else f"<c{attr}/>")
        rows.append(f'<row r="{r}">{"".join(cells)}</row>')
    cols = "".join(
        f'<col min="{i}" max="{i}" width="{w:g}" customWidth="1"/>'
        for i, w in enumerate(grid.widths, start=1)
    )
    return (
        f'{_DECL}<worksheet xmlns="{_MAIN}" xmlns:r="{_REL}">'
        + (f"<cols>{cols}</cols>" if cols else "")
        + f"<sheetData>{''.join(rows)}</sheetData></worksheet>"
    )


def workbook_bytes(sheets: Sequence[tuple[str, pd.DataFrame | Grid]]) -> bytes:
    """An ``.xlsx`` workbook: one sheet per frame (its columns' names as header row) or grid.

    Args:
        sheets: (sheet name, frame or :class:`Grid`) pairs, in order; names at
            most 31 characters.
    """
    strings = _Strings()
    parts = {
        f"xl/worksheets/sheet{i}.xml": (
            _grid_xml(sheet, strings) if isinstance(sheet, Grid) else _sheet_xml(sheet, strings)
        )
        for i, (_, sheet) in enumerate(sheets, start=1)
    }
    n = len(sheets)
    sheet_list = "".join(
        f'<sheet name="{escape(name, {chr(34): "&quot;"})}" sheetId="{i}" r:id="rId{i}"/>'
        for i, (name, _) in enumerate(sheets, start=1)
    )
    sheet_rels = "".join(
        f'<Relationship Id="rId{i}" Type="{_REL}/worksheet" Target="worksheets/sheet{i}.xml"/>'
        for i in range(1, n + 1)
    )
    overrides = "".join(
        f'<Override PartName="/xl/worksheets/sheet{i}.xml" ContentType="{_CT}.worksheet+xml"/>'
        for i in range(1, n + 1)
    )
    package = {
        "[Content_Types].xml": (
            f'{_DECL}<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" '
            'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            f'<Override PartName="/xl/workbook.xml" ContentType="{_CT}.sheet.main+xml"/>'
            f'<Override PartName="/xl/styles.xml" ContentType="{_CT}.styles+xml"/>'
            f'<Override PartName="/xl/sharedStrings.xml" ContentType="{_CT}.sharedStrings+xml"/>'
            f"{overrides}</Types>"
        ),
        "_rels/.rels": (
            f'{_DECL}<Relationships xmlns="{_PKG_REL}">'
            f'<Relationship Id="rId1" Type="{_REL}/officeDocument" Target="xl/workbook.xml"/>'
            "</Relationships>"
        ),
        "xl/workbook.xml": (
            f'{_DECL}<workbook xmlns="{_MAIN}" xmlns:r="{_REL}"><sheets>{sheet_list}</sheets>'
            "</workbook>"
        ),
        "xl/_rels/workbook.xml.rels": (
            f'{_DECL}<Relationships xmlns="{_PKG_REL}">{sheet_rels}'
            f'<Relationship Id="rId{n + 1}" Type="{_REL}/styles" Target="styles.xml"/>'
            f'<Relationship Id="rId{n + 2}" Type="{_REL}/sharedStrings" '
            'Target="sharedStrings.xml"/></Relationships>'
        ),
        "xl/styles.xml": _STYLES,
        "xl/sharedStrings.xml": strings.xml(),
        **parts,
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, text in package.items():
            info = zipfile.ZipInfo(name, date_time=_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, text.encode("utf-8"), compresslevel=1)
    return out.getvalue()
