"""The maximum-entropy ptable cache gives the very table destatis() builds."""

from __future__ import annotations

import numpy as np
import pytest

from tablesafe.mechanisms import destatis
from tablesafe.mechanisms._ptable_cache import _load, _store, cache_dir, cached_destatis


def _same(a, b) -> None:
    assert a.name == b.name and a.paper == b.paper
    assert dict(a.parameters) == dict(b.parameters)
    assert len(a.rows) == len(b.rows)
    for (va, pa), (vb, pb) in zip(a.rows, b.rows, strict=True):
        np.testing.assert_array_equal(va, vb)
        np.testing.assert_array_equal(pa, pb)  # bit for bit
    assert a.describe() == b.describe()


@pytest.mark.parametrize(("D", "V", "js"), [(3, 1.0, 0), (2, 0.5, 0), (3, 2.0, 1)])
def test_cached_table_equals_a_fresh_one(tmp_path, monkeypatch, D, V, js):
    monkeypatch.setenv("TABLESAFE_CACHE_DIR", str(tmp_path))
    fresh = destatis(D, V, js=js)
    path = tmp_path / "t.npz"
    _store(path, fresh)
    _same(_load(path), fresh)
    u = np.linspace(0.001, 0.999, 50)
    n = np.arange(50) % 9
    np.testing.assert_array_equal(
        _load(path).perturbation(n, u, None), fresh.perturbation(n, u, None)
    )


def test_cache_lives_where_the_setting_says_and_survives_a_bad_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("TABLESAFE_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path / "ptables"
    cached_destatis.cache_clear()
    first = cached_destatis(4, 1.5, 0)
    (entry,) = (tmp_path / "ptables").glob("destatis-D4-*.npz")
    cached_destatis.cache_clear()
    _same(cached_destatis(4, 1.5, 0), first)  # read back from disk
    entry.write_bytes(b"not an npz file")
    cached_destatis.cache_clear()
    _same(cached_destatis(4, 1.5, 0), first)  # recomputed and rewritten
    _same(_load(entry), first)
    cached_destatis.cache_clear()
