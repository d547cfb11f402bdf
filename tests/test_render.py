"""The machine formats: exact numbers, missing values, quoting, the same bytes every time."""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pandas as pd

from tablesafe.output._render import to_csv, to_json, to_json_bytes


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(8)
    floats = rng.lognormal(5, 3, 50)
    floats[::7] = np.nan
    floats[1] = 1234.0
    floats[2] = 0.1
    floats[3] = 1e-300
    return pd.DataFrame(
        {
            "AREA": np.array(["a,1", 'say "b"', "_T", 3, 4] * 10, dtype=object),
            "n": rng.integers(0, 10**12, 50),
            "weighted": floats,
            "shown": np.array([5, "<3", None, 7.5, 2.0] * 10, dtype=object),
            "structural_zero": rng.random(50) < 0.5,
        }
    )


def test_csv_round_trips_every_value_exactly():
    frame = _frame()
    rows = list(csv.reader(io.StringIO(to_csv(frame))))
    assert rows[0] == list(frame.columns)
    body = rows[1:]
    assert [r[0] for r in body] == [str(v) for v in frame["AREA"]]
    assert [int(r[1]) for r in body] == frame["n"].tolist()
    for text, value in zip([r[2] for r in body], frame["weighted"], strict=True):
        assert (text == "") if math.isnan(value) else float(text) == value
    assert body[1][2] == "1234" and body[2][2] == "0.1"
    assert [r[3] for r in body[:5]] == ["5", "<3", "", "7.5", "2"]
    assert [r[4] for r in body] == [str(v) for v in frame["structural_zero"]]


def test_csv_reads_back_as_pandas_wrote_it():
    """Same values as pandas' own writer with full precision (the previous writer).

    (Except in mixed object columns, where pandas writes an integral float as
    ``2.0`` and tablesafe as ``2``, as in numeric columns.)
    """
    frame = _frame().drop(columns=["shown"])
    ours = pd.read_csv(io.StringIO(to_csv(frame)), dtype={"AREA": str})
    theirs = pd.read_csv(
        io.StringIO(frame.to_csv(index=False, float_format="%.17g")),
        dtype={"AREA": str},
    )
    pd.testing.assert_frame_equal(ours, theirs)


def test_json_is_exact_and_nan_is_null():
    frame = _frame()
    meta = {"protected": True, "universe": {"AGE": [1, 2]}, "epsilon": np.float64(0.5)}
    text = to_json(frame, meta)
    assert text.encode() == to_json_bytes(frame, meta)
    doc = json.loads(text)
    assert doc["meta"] == {"protected": True, "universe": {"AGE": [1, 2]}, "epsilon": 0.5}
    assert len(doc["cells"]) == len(frame)
    for cell, (_, row) in zip(doc["cells"], frame.iterrows(), strict=True):
        assert list(cell) == list(frame.columns)
        assert cell["n"] == row["n"]
        if math.isnan(row["weighted"]):
            assert cell["weighted"] is None
        else:
            assert cell["weighted"] == row["weighted"]
        assert cell["structural_zero"] is bool(row["structural_zero"])
    assert [c["shown"] for c in doc["cells"][:5]] == [5, "<3", None, 7.5, 2.0]


def test_same_frame_same_bytes():
    frame = _frame()
    assert to_csv(frame) == to_csv(frame.copy())
    assert to_json(frame, {"a": 1}) == to_json(frame.copy(), {"a": 1})


def test_streamed_pieces_join_to_the_same_bytes():
    from tablesafe.output._render import iter_csv, iter_json

    frame = _frame()
    meta = {"protected": True, "n": 3}
    for chunk in (1, 7, 50, 1000):
        assert b"".join(iter_json(frame, meta, chunk=chunk)) == to_json_bytes(frame, meta)
        assert b"".join(iter_csv(frame, chunk=chunk)).decode() == to_csv(frame)
    empty = frame.iloc[:0]
    assert b"".join(iter_json(empty, meta)) == to_json_bytes(empty, meta)
    assert json.loads(to_json_bytes(empty, meta)) == {"meta": meta, "cells": []}


def test_json_cells_are_what_orjson_writes_for_cell_objects():
    """The column-wise writer equals orjson's dump of one dict per cell, byte for byte."""
    import orjson

    from tablesafe.output._render import iter_json

    rng = np.random.default_rng(5)
    n = 300
    floats = rng.normal(size=n) * 10.0 ** rng.integers(-8, 12, n)
    floats[::7] = np.nan
    frame = {
        "AREA": np.array([1, "_T", 'a,"b"', "é ü", None, 2.5] * 50, dtype=object),
        "n": rng.integers(-(2**40), 2**40, n),
        "u": rng.integers(0, 2**63, n, dtype=np.uint64),
        "w": floats,
        "flag": rng.random(n) < 0.5,
        "mixed": np.array([True, 1, 1.0, np.nan, "1", None] * 50, dtype=object),
        'odd "name", here': np.arange(n, dtype=np.int8),
        "floats_text": np.array([0.5, np.nan, "x", None, 1e300, -0.0] * 50, dtype=object),
        "zeros": np.zeros(n),
    }
    meta = {"protected": True}
    cells = [
        {k: v for k, v in zip(frame, row, strict=True)}
        for row in zip(*(a.tolist() for a in frame.values()), strict=True)
    ]
    expected = orjson.dumps({"meta": meta, "cells": cells})
    for chunk in (1, 16, 1000):
        assert b"".join(iter_json(frame, meta, chunk=chunk)) == expected


def test_csv_is_what_the_csv_writer_writes():
    """Plain values take a joined fast path; anything to quote goes through csv.writer."""
    import csv

    from tablesafe.output._render import _csv_value, iter_csv

    def reference(frame: dict) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(list(frame))
        for row in zip(*(a.tolist() for a in frame.values()), strict=True):
            writer.writerow([_csv_value(v) for v in row])
        return buf.getvalue()

    n = 60
    plain = {
        "AREA": np.array([1, "_T", "x y", None] * 15, dtype=object),
        "n": np.arange(n),
        "w": np.linspace(-1e6, 1e-7, n),
        "flag": np.arange(n) % 3 == 0,
        "mixed": np.array([True, 1, 1.0, np.nan, "1", None] * 10, dtype=object),
    }
    quoted = {**plain, "label": np.array(["a,b", 'say "hi"', "two\nlines", "ok"] * 15)}
    single = {"only": np.array(["", "a", ""], dtype=object)}
    for frame in (plain, quoted, single, {k: v[:0] for k, v in plain.items()}):
        assert to_csv(frame) == reference(frame)
        for chunk in (1, 7, 1000):
            assert b"".join(iter_csv(frame, chunk=chunk)).decode() == reference(frame)
