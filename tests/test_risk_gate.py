"""The putative-risk ceiling (issue 28): a published-only figure, and the gate that reads it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import tablesafe as ts
from tablesafe._cli._methods import protection_from_options
from tablesafe.attacks._reconstruct._risk import putative_risk
from tablesafe.catalog._dataset import Dataset
from tablesafe.server import create_app
from test_server import USER_KEY, error_of, site

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _latent_class import write_latent_class

THREE_WAY = [("A", "B", "C"), ("A", "B", "D"), ("A", "C", "D"), ("B", "C", "D")]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """300 records, 4 variables of 3, 4, 2 and 5 categories (120 cells)."""
    return write_latent_class(tmp_path_factory.mktemp("risk") / "d", 300, seed=28)


def _share(data: Dataset, dims: list[tuple[str, ...]]) -> float:
    prot = protection_from_options("ckm")
    builder = ts.TableBuilder(data, prot)
    tables = [builder.build(ts.TableRequest(d, statistic="count")) for d in dims]
    return putative_risk(data.catalog, tables, prot).share


def test_the_figure_grows_as_tables_pin_the_full_cells(small):
    one_way = _share(small, [("A",), ("B",), ("C",), ("D",)])
    two_way = _share(small, [("A", "B"), ("C", "D")])
    partial = [_share(small, THREE_WAY[:k]) for k in (1, 2, 3)]
    every = _share(small, THREE_WAY)
    assert one_way == 0.0  # the one-way guess's many uniques move in nearly-as-good tables
    assert every > 0 and every >= max([two_way, *partial])
    # The same tables, in another order: the same figure.
    assert _share(small, THREE_WAY[::-1]) == every


def _ask(client: Any, dims: tuple[str, ...]) -> Any:
    return client.post(
        "/api/datasets/demo/tables",
        json={"dimensions": list(dims), "statistic": "count"},
        headers={"x-api-key": USER_KEY},
    )


def test_the_ceiling_refuses_a_table_that_raises_the_figure_past_it(small, tmp_path):
    first, last = THREE_WAY[:3], THREE_WAY[3]
    before = _share(small, first)
    after = _share(small, [*first, last])
    assert after > before
    ceiling = (before + after) / 2
    # A one-way table that keeps the figure under the ceiling, measured the same way.
    fits = [d for d in (("A",), ("B",), ("C",), ("D",)) if _share(small, [*first, d]) <= ceiling]
    assert fits
    rules = {"min_universe_size": 0, "sliver_min_difference": 0}
    config = site(
        small.path.parent,
        tmp_path,
        protection={"method": "ckm"},
        rules={**rules, "putative_uniques_ceiling": ceiling},
    )
    with TestClient(create_app(config)) as client:
        answered = [_ask(client, d) for d in first]
        assert [r.status_code for r in answered] == [200, 200, 200]
        refused = _ask(client, last)
        assert refused.status_code == 403
        err = error_of(refused)
        assert err["type"] == "RiskCeilingExceeded"
        assert f"{100 * after:.1f}% of their records" in err["message"]
        assert f"({100 * before:.1f}% without it)" in err["message"]
        # The same request again: the same refusal; a table already published is answered.
        assert error_of(_ask(client, last)) == err
        assert _ask(client, first[0]).content == answered[0].content
        assert _ask(client, fits[0]).status_code == 200
    # A site without the ceiling answers the refused table.
    config = site(small.path.parent, tmp_path / "open", protection={"method": "ckm"}, rules=rules)
    with TestClient(create_app(config)) as client:
        assert _ask(client, last).status_code == 200
