"""Workbooks written column by column (tablesafe.output._xlsx), read back by openpyxl."""

from __future__ import annotations

import io
import math
import zipfile

import numpy as np
import pandas as pd
import pytest
from openpyxl import load_workbook

from tablesafe.output._xlsx import workbook_bytes


def _read(data: bytes) -> dict[str, list[list[object]]]:
    book = load_workbook(io.BytesIO(data))
    return {ws.title: [[c.value for c in row] for row in ws.iter_rows()] for ws in book.worksheets}


@pytest.fixture(scope="module")
def mixed() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "code": pd.Series([1, "x", 3, None, "total"], dtype=object),
            "label": pd.Series(["a & b", "<tag>", 'q"uote', "ünïcode", "ctl\x01char"]),
            "n": np.array([0, -5, 2**40, 7, 1], dtype=np.int64),
            "w": np.array([0.1, np.nan, -1234.5678, 1e-300, 2.0]),
            "flag": np.array([True, False, True, False, True]),
            "text_na": pd.Series(["p", pd.NA, "p", "q", pd.NA], dtype="string"),
        }
    )


def test_values_read_back_as_written(mixed):
    sheets = _read(workbook_bytes([("cells", mixed), ("about", pd.DataFrame({"k": ["v"]}))]))
    assert list(sheets) == ["cells", "about"]
    cells = sheets["cells"]
    assert cells[0] == list(mixed.columns)
    assert [r[0] for r in cells[1:]] == [1, "x", 3, None, "total"]
    # XML's special characters survive; control characters XML cannot carry are dropped.
    assert [r[1] for r in cells[1:]] == ["a & b", "<tag>", 'q"uote', "ünïcode", "ctlchar"]
    assert [r[2] for r in cells[1:]] == [0, -5, 2**40, 7, 1]
    w = [r[3] for r in cells[1:]]
    assert w[0] == 0.1 and w[1] is None and w[2] == -1234.5678 and w[3] == 1e-300 and w[4] == 2
    assert [r[4] for r in cells[1:]] == [True, False, True, False, True]
    assert [r[5] for r in cells[1:]] == ["p", None, "p", "q", None]
    assert sheets["about"] == [["k"], ["v"]]


def test_floats_keep_every_digit():
    rng = np.random.default_rng(7)
    x = rng.normal(0, 1e6, 500) * rng.choice([1, 1e-9, 1e9], 500)
    got = [r[0] for r in _read(workbook_bytes([("s", pd.DataFrame({"x": x}))]))["s"][1:]]
    assert got == x.tolist()


def test_infinity_is_text_and_header_is_bold():
    data = workbook_bytes([("s", pd.DataFrame({"x": [math.inf, 1.5]}))])
    book = load_workbook(io.BytesIO(data))
    ws = book["s"]
    assert ws["A2"].value == "inf" and ws["A3"].value == 1.5
    assert ws["A1"].font.b and not ws["A2"].font.b


def test_same_frames_same_bytes_and_no_clock(mixed):
    a = workbook_bytes([("cells", mixed)])
    assert a == workbook_bytes([("cells", mixed.copy())])
    with zipfile.ZipFile(io.BytesIO(a)) as zf:
        assert zf.namelist()[0] == "[Content_Types].xml"
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert not any(n.startswith("docProps/") for n in zf.namelist())


def test_empty_frame_and_many_columns():
    empty = pd.DataFrame({"a": pd.Series([], dtype=np.int64), "b": pd.Series([], dtype=object)})
    assert _read(workbook_bytes([("e", empty)]))["e"] == [["a", "b"]]
    wide = pd.DataFrame({f"c{i}": [i, None] for i in range(30)})  # columns past Z
    rows = _read(workbook_bytes([("w", wide)]))["w"]
    assert rows[1] == list(range(30)) and rows[2] == [None] * 30
