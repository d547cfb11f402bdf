"""Streamed writers: a table's file in pieces, in memory that does not grow with its cells.

:func:`csv_pieces` writes the bytes of :meth:`ProtectedTable.to_csv
<tablesafe.output._table.ProtectedTable.to_csv>` (the same bytes, joined) a
piece of cells at a time: each piece's rows (codes, published values, flags)
are made from the table's arrays, turned into text and given away before the
next is made, so a writer holds one piece's rows, never the whole file nor
a Python object per cell. The table's own arrays (its figures, a few numbers
per cell) are what grows with its cells.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tablesafe.output._render import _columns, _csv_pieces
from tablesafe.output._table import ProtectedTable

__all__ = ["PIECE_CELLS", "csv_pieces"]

#: Cells of the extended shape looked at per piece (a piece has at most this many rows).
PIECE_CELLS = 16_384


def csv_pieces(
    table: ProtectedTable,
    *,
    footnotes: bool = True,
    labels: bool = False,
    piece_cells: int = PIECE_CELLS,
) -> Iterator[tuple[bytes, int]]:
    """``table.to_csv(footnotes=..., labels=...)`` as UTF-8 pieces, with the rows written so far.

    Yields the header line (after ``# UNPROTECTED ...`` for an unprotected
    table), then the rows of each run of ``piece_cells`` cells of the extended
    shape that holds computed cells, then the footnotes; joined, the bytes of
    :meth:`ProtectedTable.to_csv`.

    Args:
        table: The protected table.
        footnotes: Append the footnotes (``#`` lines) after the cells.
        labels: Add a ``<name>_label`` column after each dimension's codes.
        piece_cells: Cells looked at per piece.
    """
    statistics = table.statistics()
    none = np.empty(0, dtype=np.intp)
    header = table.long_rows(none, labels=labels, statistics=statistics)
    first = table.unprotected_line() + "".join(_csv_pieces(_columns(header), None))
    yield first.encode(), 0
    flat = table.computed.reshape(-1)
    written = 0
    for start in range(0, flat.size, piece_cells):
        cells = np.flatnonzero(flat[start : start + piece_cells]) + start
        if cells.size == 0:
            continue
        rows = table.long_rows(cells, labels=labels, statistics=statistics)
        written += int(cells.size)
        yield "".join(_csv_pieces(_columns(rows), None, header=False)).encode(), written
    if footnotes:
        yield ("\n" + table.footnote_comments()).encode(), written
