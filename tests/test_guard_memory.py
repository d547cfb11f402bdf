"""The guard's published sets are frozen for the collector, whatever the check decided.

Python's full collection walks every object the process holds; the guard's
index holds hundreds of thousands of sets for the life of the process, so
the store freezes them (``gc.freeze``) once enough have been read. A refused
table reads the rows committed since the last check like an answered one:
they count too.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import tablesafe.state._store as store_module
from tablesafe._errors import RefusedError
from tablesafe._settings import RuleSettings
from tablesafe.rules._guard import RecordSet, SetIndex, guard_check
from tablesafe.state import SQLiteState
from test_guard import _Counting, _store_set, _synthetic


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


def test_a_refused_check_leaves_no_cycle_for_the_collector():
    """A refusal found among the pairs is raised after the families are checked; the check's
    frame held it while its traceback held the frame: a cycle that kept the table's objects
    until a full collection, or for good once the store froze them."""
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 2**32, size=1_000, dtype=np.int64)
    members = {"old": set(range(100)), "near": set(range(3, 100)) | {500}}
    index = SetIndex()
    index.add([(1, "k", _synthetic("old", members["old"], keys))])
    rules = RuleSettings.model_validate({"sliver_min_difference": 10})
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with pytest.raises(RefusedError, match="fewer than 10 records"):
            guard_check(index, [_synthetic("near", members["near"], keys)], key_id="k",
                        rules=rules, counts=_Counting(members), all_codes={})  # fmt: skip
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, RecordSet | RefusedError)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert left == []
