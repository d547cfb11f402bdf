"""The guard's index finds every published set near a new one (brute force over random sets)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tablesafe.rules._guard as guard
from tablesafe.rules._guard import BUCKETS, RecordSet, SetIndex, fingerprint


def _random_set(rng: np.random.Generator, i: int, keys: np.ndarray, sketch: bool) -> RecordSet:
    size = int(rng.integers(1, 60))
    members = np.sort(rng.choice(keys.size, size=size, replace=False))
    counts = np.bincount(keys[members] % BUCKETS, minlength=BUCKETS).astype(np.int64)
    return RecordSet(
        definition=(("ID", (f"s{i}",)),),
        columns=frozenset({"SEX"}),
        size=size,
        fingerprint=fingerprint(size, int(keys[members].sum()) % 2**32),
        sketch=counts if sketch else None,
    )


@pytest.mark.parametrize("recent", [2048, 100])
def test_near_is_every_row_within_m_in_size_and_sketch(recent, monkeypatch):
    """Rows of m records or more, within m of the new set in size, whose sketches are
    within m in L1 (or that have no sketch): the coarse filter over groups of buckets
    drops none of them, in order of size then publication, whether the rows were
    merged into the arrays in size order or are still recent."""
    monkeypatch.setattr(guard, "_RECENT", recent)
    rng = np.random.default_rng(31)
    keys = rng.integers(0, 2**32, size=400, dtype=np.int64)
    index = SetIndex()
    assert index.near(_random_set(rng, -1, keys, sketch=True), 5).tolist() == []  # nothing yet
    stored = [_random_set(rng, i, keys, sketch=rng.random() < 0.9) for i in range(3_000)]
    for start in range(0, len(stored), 700):  # read in several catch-ups
        index.add((i + 1, "k", s) for i, s in enumerate(stored[start : start + 700], start))
        index.near(stored[0], 5)
    sketches = [s.sketch for s in stored]
    for probe in [_random_set(rng, -j, keys, sketch=True) for j in range(60)]:
        for m in (3, 10, 25):
            expected = [
                row
                for row, s in enumerate(stored)
                if s.size >= m
                and abs(s.size - probe.size) < m
                and (sketches[row] is None or int(np.abs(sketches[row] - probe.sketch).sum()) < m)
            ]
            expected.sort(key=lambda row: (stored[row].size, row))
            assert index.near(probe, m).tolist() == expected


def test_near_many_is_near_of_each(monkeypatch):
    """One pass for a table's sets gives each what near() gives it alone (merged and recent rows,
    sets with and without sketches, sizes whose windows overlap or hold nothing)."""
    monkeypatch.setattr(guard, "_RECENT", 300)
    rng = np.random.default_rng(32)
    keys = rng.integers(0, 2**32, size=400, dtype=np.int64)
    index = SetIndex()
    stored = [_random_set(rng, i, keys, sketch=rng.random() < 0.9) for i in range(2_000)]
    index.add((i + 1, "k", s) for i, s in enumerate(stored[:1_500]))
    index.near(stored[0], 5)  # merged into the arrays in size order
    index.add((i + 1, "k", s) for i, s in enumerate(stored[1_500:], 1_500))  # recent
    probes = [_random_set(rng, -j, keys, sketch=rng.random() < 0.8) for j in range(80)]
    for m in (3, 10, 25):
        many = index.near_many(probes, m)
        assert [r.tolist() for r in many] == [index.near(p, m).tolist() for p in probes]
        expected = [
            sorted(
                (
                    row
                    for row, s in enumerate(stored)
                    if s.size >= m
                    and abs(s.size - p.size) < m
                    and (
                        s.sketch is None
                        or p.sketch is None
                        or int(np.abs(s.sketch - p.sketch).sum()) < m
                    )
                ),
                key=lambda row: (stored[row].size, row),
            )
            for p in probes
        ]
        assert [r.tolist() for r in many] == expected
    assert index.near_many([], 5) == []


def test_near_many_by_columns_is_near_of_rows_sharing_one(monkeypatch):
    """Searching only the rows broken down by a set's compared columns gives the rows of
    near() that share one of them, each once, in the same order (rows broken down by
    several columns are in several columns' arrays)."""
    monkeypatch.setattr(guard, "_RECENT", 200)
    rng = np.random.default_rng(33)
    keys = rng.integers(0, 2**32, size=400, dtype=np.int64)
    names = ["SEX", "AGE", "OCC", "*"]

    def with_columns(s: RecordSet) -> RecordSet:
        pick = rng.choice(len(names), size=int(rng.integers(1, 4)), replace=False)
        return dataclasses.replace(s, columns=frozenset(names[int(i)] for i in pick))

    stored = [with_columns(_random_set(rng, i, keys, rng.random() < 0.9)) for i in range(2_000)]
    index = SetIndex()
    index.add((i + 1, "k", s) for i, s in enumerate(stored[:1_200]))
    index.near(stored[0], 5)  # merged into the arrays in size order
    index.add((i + 1, "k", s) for i, s in enumerate(stored[1_200:], 1_200))  # recent
    probes = [_random_set(rng, -j, keys, sketch=rng.random() < 0.8) for j in range(80)]
    compare = [set(with_columns(p).columns) for p in probes]
    for m in (3, 10, 25):
        many = index.near_many(probes, m, compare)
        expected = [
            [row for row in index.near(p, m).tolist() if stored[row].columns & c]
            for p, c in zip(probes, compare, strict=True)
        ]
        assert [r.tolist() for r in many] == expected
        assert any(len(r) for r in expected)
