"""The guard's published sets are frozen for the collector, whatever the check decided.

Python's full collection walks every object the process holds; the guard's
index holds hundreds of thousands of sets for the life of the process, so
the store freezes them (``gc.freeze``) once enough have been read. A refused
table reads the rows committed since the last check like an answered one:
they count too.
"""

from __future__ import annotations

import gc

import pytest

import tablesafe.state._store as store_module
from tablesafe._errors import RefusedError
from tablesafe.state import SQLiteState
from test_guard import _store_set


def test_rows_read_by_a_refused_check_count_towards_the_freeze(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "_FREEZE_AFTER", 5)
    path = str(tmp_path / "state.sqlite")
    writer, reader = SQLiteState(path), SQLiteState(path)
    try:
        for i in range(6):
            with writer.transaction("micro") as tx:
                tx.remember("k", [_store_set(40 + i, i)])
        gc.unfreeze()
        # The reader's first check reads the 6 rows and is refused: they are frozen all the same.
        with pytest.raises(RefusedError), reader.transaction("micro") as tx:
            assert len(tx.index) == 6
            raise RefusedError("refused")
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        writer.close()
        reader.close()


def test_families_a_check_makes_count_towards_the_freeze(tmp_path, monkeypatch):
    """Families live as long as the sets: a check that makes many gets them frozen too."""
    monkeypatch.setattr(store_module, "_FREEZE_AFTER", 5)
    state = SQLiteState(str(tmp_path / "state.sqlite"))
    try:
        gc.unfreeze()
        with state.transaction("micro") as tx:
            for i in range(4):
                tx.index.family_state(f"ctx{i}", "AGE", "*", None, (1, 2, 3))
        assert gc.get_freeze_count() == 0  # 4 families: not yet
        with state.transaction("micro") as tx:
            tx.index.family_state("ctx0", "AGE", "*", None, (1, 2, 3))  # not made again
        assert gc.get_freeze_count() == 0
        with state.transaction("micro") as tx:
            tx.index.family_state("ctx9", "AGE", "*", None, (1, 2, 3))
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        state.close()
