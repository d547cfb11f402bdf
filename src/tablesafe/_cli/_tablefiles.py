"""Table files of the table-level commands (``tablesafe cyclic``, ``tablesafe resample``).

* a 2-way table is a plain CSV matrix of counts, no header;
* a 2-way or 3-way table may also be a long CSV with a header: one column
  per dimension (category labels) and a last column of counts. Missing
  combinations are zero cells; a combination given twice is an error.

Written back in the layout they were read in (:func:`format_table`).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tablesafe._errors import FormatError

__all__ = ["CountTable", "cell_name", "format_table", "parse_count", "read_table"]


@dataclass(frozen=True)
class CountTable:
    """A table of counts read from a file, with what is needed to write it back.

    Attributes:
        counts: The counts (float, validated by the mechanism).
        names: Dimension names (long format) or None (a headerless matrix).
        labels: Category labels per dimension (long format) or None.
        count_name: Name of the count column (long format).
    """

    counts: np.ndarray
    names: tuple[str, ...] | None = None
    labels: tuple[tuple[str, ...], ...] | None = None
    count_name: str = "count"


def parse_count(text: str, path: Path, line: int) -> float:
    """A finite number read from ``path`` at ``line``.

    Raises:
        FormatError: if ``text`` is not a number or not finite.
    """
    try:
        value = float(text)
    except ValueError:
        raise FormatError(f"{path}, line {line}: {text.strip()!r} is not a count") from None
    if not math.isfinite(value):
        raise FormatError(f"{path}, line {line}: {text.strip()!r} is not a finite count")
    return value


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _label_key(label: str) -> tuple[int, float, str]:
    # Numeric labels in numeric order, then the others alphabetically.
    return (0, float(label), label) if _is_number(label) else (1, 0.0, label)


def read_table(path: Path) -> CountTable:
    """Read a 2-way CSV matrix (no header) or a long CSV with a header (see the module docstring).

    Raises:
        FormatError: for an unreadable, empty, ragged or otherwise malformed file.
    """
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = [
                [c.strip() for c in r]
                for r in csv.reader(fh)
                if r and not r[0].startswith("#") and any(c.strip() for c in r)
            ]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise FormatError(f"cannot read {path}: {exc}") from None
    if not rows:
        raise FormatError(f"{path} is empty; expected a CSV matrix of counts or a long CSV")
    if all(_is_number(c) for c in rows[0]):
        width = len(rows[0])
        for i, r in enumerate(rows, start=1):
            if len(r) != width:
                raise FormatError(
                    f"{path}, line {i}: {len(r)} values, but line 1 has {width}; a matrix "
                    "needs the same number of counts on every line"
                )
        return CountTable(
            np.array([[parse_count(c, path, i) for c in r] for i, r in enumerate(rows, 1)])
        )
    header = rows[0]
    if len(header) not in (3, 4):
        raise FormatError(
            f"{path}: a long table has one column per dimension (2 or 3) and a count column; "
            f"the header has {len(header)} columns"
        )
    if len(set(header)) != len(header):
        raise FormatError(f"{path}: repeated column names in the header")
    dims = len(header) - 1
    records = []
    for i, r in enumerate(rows[1:], start=2):
        if len(r) != len(header):
            raise FormatError(f"{path}, line {i}: {len(r)} values, the header has {len(header)}")
        records.append((tuple(r[:dims]), parse_count(r[dims], path, i)))
    if not records:
        raise FormatError(f"{path} has a header but no cells")
    labels = tuple(
        tuple(sorted({rec[0][d] for rec in records}, key=_label_key)) for d in range(dims)
    )
    index = [{lab: j for j, lab in enumerate(labs)} for labs in labels]
    counts = np.zeros(tuple(len(labs) for labs in labels))
    seen: set[tuple[str, ...]] = set()
    for key, value in records:
        if key in seen:
            raise FormatError(f"{path}: the cell {', '.join(key)} is given twice")
        seen.add(key)
        counts[tuple(index[d][key[d]] for d in range(dims))] = value
    return CountTable(counts, tuple(header[:dims]), labels, header[dims])


def format_table(table: CountTable, values: np.ndarray) -> str:
    """Write ``values`` in the layout of ``table``'s file (matrix or long CSV)."""

    def fmt(v: Any) -> str:
        f = float(v)
        return str(int(f)) if f == int(f) else f"{f:g}"

    if table.names is None or table.labels is None:
        return "\n".join(",".join(fmt(v) for v in row) for row in values) + "\n"
    lines = [",".join([*table.names, table.count_name])]
    for idx in np.ndindex(*values.shape):
        labs = [table.labels[d][i] for d, i in enumerate(idx)]
        lines.append(",".join([*labs, fmt(values[idx])]))
    return "\n".join(lines) + "\n"


def cell_name(table: CountTable, idx: tuple[int, ...]) -> str:
    """``t(1,2)`` for a matrix (1-based), ``t(a,b,c)`` with labels for a long table."""
    if table.labels is None:
        return "t(" + ",".join(str(i + 1) for i in idx) + ")"
    return "t(" + ",".join(table.labels[d][i] for d, i in enumerate(idx)) + ")"
