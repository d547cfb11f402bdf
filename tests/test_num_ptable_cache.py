"""The numeric ptable of magnitudes, cached on disk, is the very table num_ptable() builds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tablesafe._errors import ParameterError
from tablesafe.mechanisms import _num_ptable_cache as _num_ptable_cache
from tablesafe.mechanisms._magnitudes import MagnitudeProtection, _cached_ptable
from tablesafe.mechanisms._num_ptable import NumPTable, num_ptable
from tablesafe.mechanisms._num_ptable_cache import _load, _store, cached_num_ptable


def _same(a: NumPTable, b: NumPTable) -> None:
    assert (a.D, a.V, a.step, a.icat) == (b.D, b.V, b.step, b.icat)
    for xa, xb in ((a.v, b.v), (a.p, b.p), (a.ub, b.ub)):
        assert len(xa) == len(xb)
        for ra, rb in zip(xa, xb, strict=True):
            assert ra.dtype == rb.dtype and ra.tobytes() == rb.tobytes()  # bit for bit
    assert a.table() == b.table()


@pytest.mark.parametrize(
    ("D", "V", "step", "icat"), [(3, 1.0, 4, None), (5, 2.0, 4, (1, 3, 5)), (2, 0.5, 1, None)]
)
def test_stored_table_equals_a_fresh_one(
    tmp_path: Path, D: int, V: float, step: int, icat: tuple[int, ...] | None
) -> None:
    fresh = num_ptable(D, V, step=step, icat=icat)
    path = tmp_path / "t.npz"
    _store(path, fresh)
    loaded = _load(path)
    _same(loaded, fresh)
    rows = loaded.row_for(np.linspace(0, D + 1, 40))
    u = np.linspace(0.001, 0.999, 40)
    assert np.array_equal(loaded.lookup(rows, u), fresh.lookup(rows, u))


def test_second_build_reads_the_disk_and_survives_a_bad_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TABLESAFE_CACHE_DIR", str(tmp_path))
    first = cached_num_ptable(3, 1.0, 4, None)
    (entry,) = (tmp_path / "ptables").glob("num-D3-V1.0-step4-icat1-3-*.npz")

    def refuse(*args: object, **kwargs: object) -> NumPTable:
        raise AssertionError("the solver ran although the cache holds the table")

    monkeypatch.setattr(_num_ptable_cache, "num_ptable", refuse)
    _same(cached_num_ptable(3, 1.0, 4, (3, 1)), first)  # icat in any order: one entry
    monkeypatch.undo()
    monkeypatch.setenv("TABLESAFE_CACHE_DIR", str(tmp_path))
    entry.write_bytes(b"not an npz file")
    _same(cached_num_ptable(3, 1.0, 4, None), first)  # recomputed and rewritten
    _same(_load(entry), first)


def test_the_protection_uses_the_disk_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TABLESAFE_CACHE_DIR", str(tmp_path))
    _cached_ptable.cache_clear()
    try:
        table = MagnitudeProtection(D=2, V=0.75, step=3).ptable()
        assert list((tmp_path / "ptables").glob("num-D2-V0.75-step3-icat1-2-*.npz"))
        _same(table, num_ptable(2, 0.75, step=3))
    finally:
        _cached_ptable.cache_clear()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((5, 1.0, 10, None), "D \\* step must be below 50"),
        ((3, -1.0, 4, None), "V \\(variance\\)"),
        ((3, 1.0, 4, (2, 3)), "icat must hold 1"),
        ((3, 1.0, 4, ("a",)), "icat must be whole numbers"),
    ],
)
def test_refused_parameters_are_never_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple, message: str
) -> None:
    monkeypatch.setenv("TABLESAFE_CACHE_DIR", str(tmp_path))
    with pytest.raises(ParameterError, match=message):
        cached_num_ptable(*args)
    assert not list(tmp_path.rglob("*.npz"))
