"""The researcher's session of benchmarks/_sessions.py: seeded, ordinary, valid requests."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _sessions import DEMO, as_request, research_session


def test_a_seed_gives_one_session_and_another_seed_another():
    first = research_session(100, seed=7)
    assert research_session(100, seed=7) == first
    assert research_session(100, seed=8) != first
    assert research_session(30, seed=7) == first[:30]  # the first tables do not depend on n


def test_the_session_is_of_ordinary_distinct_tables():
    session = research_session(400, seed=3)
    assert len({repr(sorted(b.items())) for b in session}) == 400
    dims = [len(b["dimensions"]) for b in session]
    assert set(dims) == {1, 2, 3}
    universes = {tuple(sorted(b["universe"])) for b in session}
    assert universes == {(), ("REGION",), ("ZONE",), ("AGEGRP", "REGION"), ("REGION", "SEX")}
    statistics = {b["statistic"].split(",")[-1].split(":")[0] for b in session}
    assert statistics == {"count", "weighted", "both", "percent", "mean"}
    for body in session:
        names = set(body["dimensions"]) | set(body["universe"])
        assert len(names) == len(body["dimensions"]) + len(body["universe"])
        for a, b in DEMO.exclusive:
            assert not (a in names and b in names), body
    # Shares near the spec's weights (1, 2, 3 dimensions 2:5:3; loose bounds).
    assert 0.12 < dims.count(1) / 400 < 0.28 and 0.38 < dims.count(2) / 400 < 0.62


def test_every_table_of_a_session_is_a_valid_request_of_the_demo(demo_dir):
    import tablesafe as ts

    builder = ts.TableBuilder(ts.Dataset.open(demo_dir), ts.Protection(None))
    for body in research_session(100, seed=1):
        builder.check(as_request(body))
