"""Magnitudes under dynamic seeds: every draw of a variable from one keyed hash per cell."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tablesafe import _seeds
from tablesafe._builder import TableBuilder
from tablesafe._cli._methods import protection_from_options
from tablesafe._errors import ParameterError
from tablesafe._request import TableRequest
from tablesafe._seeds import dynamic_words
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import DuckDBEngine, MemoryEngine
from tablesafe.mechanisms import _magnitudes
from tablesafe.mechanisms._magnitudes import _WORDS, magnitude_uniforms

SECRET = b"magnitude-secret-0123456789abcdef"


@pytest.fixture(scope="module")
def demo(demo_dir: Path) -> Dataset:
    return Dataset.open(demo_dir)


def _brute_words(keys: np.ndarray, cell: tuple[int, ...], salt: bytes, count: int) -> list[float]:
    """The definition for one cell: its key sum, then its margins' (fewest totals first)."""
    totals = tuple(s - 1 for s in keys.shape)
    free = [i for i, c in enumerate(cell) if c != totals[i]]
    parts = [int(keys[cell])]
    for r in range(1, len(free) + 1):
        for drop in itertools.combinations(free, r):
            margin = tuple(totals[i] if i in drop else c for i, c in enumerate(cell))
            parts.append(int(keys[margin]))
    message = b"".join(p.to_bytes(4, "little") for p in parts)
    h = hashlib.blake2b(
        message,
        key=SECRET,
        digest_size=8 * count,
        person=b"tablesafe-words",
        salt=hashlib.blake2b(salt, digest_size=16).digest(),
    ).digest()
    return [(int.from_bytes(h[8 * i : 8 * i + 8], "little") + 0.5) / 2.0**64 for i in range(count)]


def test_words_follow_the_definition_cell_by_cell() -> None:
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 2**32, (4, 3, 3), dtype=np.uint32)
    words = dynamic_words(keys, SECRET, b"magnitude:INCOME", 7)
    assert len(words) == 7 and all(w.shape == keys.shape for w in words)
    for cell in itertools.product(*(range(s) for s in keys.shape)):
        expect = _brute_words(keys, cell, b"magnitude:INCOME", 7)
        assert [float(w[cell]) for w in words] == expect, cell


def test_words_are_independent_uniforms() -> None:
    rng = np.random.default_rng(11)
    keys = rng.integers(0, 2**32, (101, 101), dtype=np.uint32)
    words = np.stack([w.ravel() for w in dynamic_words(keys, SECRET, b"s", 7)])
    for w in words:
        assert stats.kstest(w, "uniform").pvalue > 1e-4
    corr = np.corrcoef(words)
    # 10,404 cells: |r| of independent words is below 0.05 with overwhelming probability.
    assert np.abs(corr[~np.eye(7, dtype=bool)]).max() < 0.05


def test_long_salts_are_not_truncated_and_one_record_changes_every_word() -> None:
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**32, (6, 5), dtype=np.uint32)
    a = dynamic_words(keys, SECRET, b"magnitude:INCOME:long-name-1", 2)
    b = dynamic_words(keys, SECRET, b"magnitude:INCOME:long-name-2", 2)
    assert not np.any(a[0] == b[0])
    moved = keys.copy()
    moved[-1, -1] += np.uint32(1)  # the universe holds one more (or another) record
    c = dynamic_words(moved, SECRET, b"magnitude:INCOME:long-name-1", 2)
    assert not np.any(a[0] == c[0]) and not np.any(a[1] == c[1])


@pytest.mark.parametrize("count", [0, 9])
def test_word_count_is_checked(count: int) -> None:
    with pytest.raises(ParameterError, match="1..8"):
        dynamic_words(np.zeros((2, 2), dtype=np.uint32), SECRET, b"s", count)


def test_every_draw_of_a_magnitude_is_its_own_stream() -> None:
    """Each (draw, contribution) takes its own word (16-byte salts once made them one)."""
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 2**32, (30, 4), dtype=np.uint32)
    draws = {
        wj: magnitude_uniforms(keys, "INCOME", wj[1], wj[0], "dynamic", SECRET) for wj in _WORDS
    }
    for (a, ua), (b, ub) in itertools.combinations(draws.items(), 2):
        assert not np.any(ua == ub), (a, b)
    other = magnitude_uniforms(keys, "INCOMES", 0, "v", "dynamic", SECRET)
    assert not np.any(other == draws[("v", 0)])


def test_dynamic_tables_same_bytes_and_one_hash_pass_per_variable(
    demo: Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[bytes] = []
    real = _seeds.dynamic_words

    def counting(
        cell_key: np.ndarray, secret: bytes | str, salt: bytes, count: int
    ) -> list[np.ndarray]:
        calls.append(salt)
        return real(cell_key, secret, salt, count)

    # Counted where the magnitudes call it (they import it at their top).
    monkeypatch.setattr(_magnitudes, "dynamic_words", counting)
    prot = dataclasses.replace(protection_from_options("ckm"), seeds="dynamic", secret=SECRET)
    request = TableRequest(
        ("REGION", "AGEGRP"),
        statistic="count",
        magnitudes=("sum:INCOME", "mean:INCOME", "sum:HOURS"),
    )
    outputs = set()
    for engine in (DuckDBEngine(threads=2), MemoryEngine(), DuckDBEngine(threads=1)):
        calls.clear()
        table = TableBuilder(demo, prot, engine=engine).build(request)
        assert sorted(calls) == [b"magnitude:HOURS", b"magnitude:INCOME"]
        outputs.add((table.to_csv(), table.to_json()))
    assert len(outputs) == 1
    sums = table.statistics()["sum_INCOME"]
    assert np.all(np.isfinite(sums[table.computed]))
