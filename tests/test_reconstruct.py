"""The reconstruction attack: brute-force agreement, soundness of intervals, the CLI, bad input."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from tablesafe._cli import get_app
from tablesafe._cli._methods import protection_from_options
from tablesafe._errors import ParameterError, RequestError
from tablesafe._protection import Protection
from tablesafe._request import TableRequest
from tablesafe.attacks import all_k_way_requests, published_intervals, reconstruction_attack
from tablesafe.catalog._dataset import Dataset
from tsdata import write_dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _census_like import write_census_like

METHODS = ("ckm", "dp", "pram", "q", "q-records")


@pytest.fixture(scope="session", autouse=True)
def _secret() -> None:
    import os

    os.environ.setdefault("TABLESAFE_SECRET", "reconstruction-test-secret-0123456789")


TINY_CATALOG: dict[str, Any] = {
    "dataset": {"title": "tiny", "record_key": "RKEY"},
    "variables": [
        {"name": "X", "categories": [{"code": c, "label": f"x{c}"} for c in (1, 2, 3)]},
        {"name": "Y", "categories": [{"code": c, "label": f"y{c}"} for c in (1, 2)]},
        {
            "name": "Z",
            "categories": [{"code": c, "label": f"z{c}"} for c in (1, 2, 3, 4)],
            "groupings": [
                {
                    "name": "ZG",
                    "groups": [
                        {"code": "lo", "label": "1-2", "members": [1, 2]},
                        {"code": "hi", "label": "3-4", "members": [3, 4]},
                    ],
                }
            ],
        },
    ],
}


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    import pandas as pd

    rng = np.random.default_rng(5)
    n = 30
    frame = pd.DataFrame(
        {
            "X": rng.choice([1, 2, 3], n, p=[0.6, 0.3, 0.1]),
            "Y": rng.integers(1, 3, n),
            "Z": rng.choice([1, 2, 3, 4], n, p=[0.4, 0.3, 0.2, 0.1]),
            "RKEY": rng.integers(0, 2**32, n, dtype=np.uint32),
        }
    )
    return write_dataset(tmp_path_factory.mktemp("tiny"), frame, TINY_CATALOG)


@pytest.fixture(scope="session")
def census(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_census_like(tmp_path_factory.mktemp("census") / "d", 400, seed=0)


def _brute_force_pinned(
    dataset: Dataset, requests: list[TableRequest], protection: Protection
) -> tuple[int, int, float]:
    """Pinned cells by the definition, built independently: scipy MILP min and max per cell.

    Returns (pinned cells, all cells, share of records in pinned cells).
    """
    import pandas as pd
    from scipy.optimize import Bounds, LinearConstraint, milp

    from tablesafe._builder import TableBuilder

    cat = dataset.catalog
    frame = pd.read_parquet(dataset.path)
    columns = [
        v.column
        for v in cat.source_variables
        if any(
            v.column in {cat.variable(d).column for d in (*r.dimensions, *r.universe)}
            for r in requests
        )
    ]
    codes = [cat.variable(c).codes for c in columns]
    cells = list(itertools.product(*codes))
    truth = np.array(
        [
            int((frame[columns] == pd.Series(cell, index=columns)).all(axis=1).sum())
            for cell in cells
        ]
    )
    rows, lo, hi = [], [], []
    builder = TableBuilder(dataset, protection)
    for r in requests:
        table = builder.build(r)
        t_lo, t_hi, used = published_intervals(table, protection)
        plan = r.coerced(cat).bind(cat)
        universe = dict(plan.universe)
        for ext in itertools.product(*(range(s) for s in table.shape)):
            if not used[ext]:
                continue
            row = np.zeros(len(cells))
            for i, cell in enumerate(cells):
                rec = dict(zip(columns, cell, strict=True))
                ok = all(rec[col] in allowed for col, allowed in universe.items())
                for d, e in zip(plan.dimensions, ext, strict=True):
                    members = (
                        {m for ms in d.members for m in ms} if e == d.size else set(d.members[e])
                    )
                    ok = ok and rec[d.column] in members
                row[i] = ok
            rows.append(row)
            lo.append(t_lo[ext])
            hi.append(t_hi[ext])
    constraint = LinearConstraint(np.array(rows), np.array(lo), np.array(hi))
    pinned = np.zeros(len(cells), dtype=bool)
    for i in range(len(cells)):
        c = np.zeros(len(cells))
        c[i] = 1.0
        low = milp(c, constraints=constraint, integrality=np.ones(len(cells)), bounds=Bounds(0))
        high = milp(-c, constraints=constraint, integrality=np.ones(len(cells)), bounds=Bounds(0))
        assert low.status == 0
        if high.status != 0:  # unbounded: free
            continue
        pinned[i] = round(low.fun) == round(-high.fun) == truth[i]
    return int(pinned.sum()), len(cells), float(truth[pinned].sum() / truth.sum())


TINY_REQUESTS = [
    TableRequest(("X", "Y"), statistic="count"),
    TableRequest(("Y", "ZG"), statistic="count"),
    TableRequest(("X", "Z"), universe={"Y": [1]}, statistic="count"),
    TableRequest(("Z",), universe={"X": [1, 2]}, statistic="count"),
]


@pytest.mark.parametrize("method", ["none", "ckm", "q", "q-records"])
def test_pinned_cells_agree_with_brute_force(tiny, method):
    protection = protection_from_options(method)
    result = reconstruction_attack(tiny, TINY_REQUESTS, protection, time_limit=60)
    pinned, cells, records = _brute_force_pinned(tiny, TINY_REQUESTS, protection)
    assert result.complete
    assert result.cells == cells
    assert result.cells_exact_share == pytest.approx(pinned / cells, abs=1e-6)
    assert result.records_exact_share == pytest.approx(records, abs=1e-6)


def test_the_full_table_is_rebuilt_exactly(census):
    """Published at full detail and unprotected, every cell is known: the attack says so."""
    request = TableRequest(("AGE", "SEX", "AREA", "TENURE"), statistic="count", margins="none")
    result = reconstruction_attack(census, [request], Protection(None), time_limit=60)
    assert result.cells_exact_share == result.records_exact_share == 1.0
    assert result.uniques_exact_share == 1.0


def test_all_three_way_tables_pin_most_cells_and_protection_pins_fewer(census, three_way):
    requests, plain = three_way
    assert len(requests) == 4
    assert plain.complete
    assert plain.cells == 18 * 2 * 6 * 4
    assert plain.records == 400
    assert plain.cells_exact_share > 0.5
    assert plain.uniques_exact_share > 0.3
    for method in METHODS:
        result = reconstruction_attack(
            census, requests, protection_from_options(method), time_limit=5
        )
        # Even counting every cell the time limit left undecided as pinned.
        assert result.cells_exact_share_upper < plain.cells_exact_share, method
        assert result.records_exact_share_upper < plain.records_exact_share, method


def test_intervals_hold_every_true_count_the_mechanism_can_publish():
    """Soundness: for every i and every j it can publish, lo[j] <= i <= hi[j]."""
    from tablesafe.rules._ceiling._intervals import ptable_hull, records_hull

    for method in ("ckm", "dp", "pram", "q"):
        mech = protection_from_options(method).mechanism
        lo, hi = ptable_hull(mech, 200)
        for i in range(150):
            for j, p in mech.distribution(i).items():
                if p > 0:
                    assert lo[j] <= i <= hi[j], (method, i, j)
    mech = protection_from_options("q-records").mechanism
    lo, hi = records_hull(mech, 400)
    for i in range(300):
        q = int(mech.q(np.array([i]))[0])
        for j in range(max(i - q, 0), i + q + 1):
            assert lo[j] <= i <= hi[j], ("q-records", i, j)


@pytest.fixture(scope="session")
def three_way(census: Dataset) -> tuple[list[TableRequest], Any]:
    requests = all_k_way_requests(census.catalog, ["AGE", "SEX", "AREA", "TENURE"], 3)
    return requests, reconstruction_attack(census, requests, Protection(None), time_limit=60)


def test_suppressed_cells_are_read_as_any_small_count(census, three_way):
    requests, open_ = three_way
    hidden = reconstruction_attack(
        census, requests, Protection(None), min_cell_size=5, time_limit=60
    )
    assert hidden.complete
    assert hidden.nonzero_cells_exact_share < open_.nonzero_cells_exact_share
    assert hidden.records_exact_share < open_.records_exact_share


def _with_counts(table: Any, counts: np.ndarray) -> Any:
    from dataclasses import replace

    return replace(table, counts=counts, structural_zero=np.zeros_like(table.computed))


def test_same_request_same_result(census):
    requests = all_k_way_requests(census.catalog, ["AGE", "SEX", "TENURE"], 2)
    prot = protection_from_options("ckm")
    a = reconstruction_attack(census, requests, prot, time_limit=60).as_dict()
    b = reconstruction_attack(census, requests, prot, time_limit=60).as_dict()
    a.pop("seconds")
    b.pop("seconds")
    assert a == b


def test_time_limit_reports_partial_bounds(census):
    requests = all_k_way_requests(census.catalog, ["AGE", "SEX", "AREA", "TENURE"], 3)
    result = reconstruction_attack(census, requests, protection_from_options("q"), time_limit=0.001)
    assert result.cells_exact_share <= result.cells_exact_share_upper
    assert result.records_exact_share <= result.records_exact_share_upper
    assert result.complete == (result.undecided == 0)


# -- command line ------------------------------------------------------------------------


def test_cli_json_has_the_figures_and_the_unprotected_comparison(census, tmp_path):
    bodies = [{"dimensions": ["AGE", "SEX"]}, {"dimensions": ["SEX", "AREA"], "statistic": "count"}]
    path = tmp_path / "requests.json"
    path.write_text(json.dumps(bodies))
    out = CliRunner().invoke(
        get_app(),
        [
            "attack",
            "reconstruct",
            str(census.path.parent),
            "--tables",
            str(path),
            "--method",
            "dp",
            "--format",
            "json",
        ],
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    for key in ("cells_exact_share", "records_exact_share", "uniques_exact_share"):
        assert 0 <= data[key] <= data["unprotected"][key] <= 1
    assert data["tables"] == 2
    assert data["variables"] == ["AGE", "SEX", "AREA"]
    text = CliRunner().invoke(
        get_app(),
        [
            "attack",
            "reconstruct",
            str(census.path.parent),
            "--all-k-way",
            "2",
            "--variables",
            "SEX,AREA,TENURE",
            "--method",
            "q-records",
        ],
    )
    assert text.exit_code == 0, text.output
    assert "records in pinned cells" in text.stdout


@pytest.mark.parametrize(
    ("args", "kind", "words"),
    [
        (["--all-k-way", "2", "--variables", "SEX,NOPE"], RequestError, "NOPE"),
        # Outside its documented range (docs/cli.md), like every numeric option.
        (["--all-k-way", "5", "--variables", "SEX,AREA"], ParameterError, "from 1 to 4"),
        # In range, but more variables a table than were given: no such table to request.
        (["--all-k-way", "3", "--variables", "SEX,AREA"], RequestError, "1 to 2 for 2"),
        (["--tables", "EMPTY"], RequestError, "no table request"),
        (["--tables", "BAD"], RequestError, "request 1 is invalid"),
        (
            ["--all-k-way", "2", "--variables", "SEX,AREA", "--time-limit", "0"],
            ParameterError,
            "--time-limit",
        ),
        (["--variables", "SEX,AREA"], RequestError, "--tables FILE or --all-k-way"),
    ],
)
def test_cli_bad_input_is_a_typed_error(census, tmp_path, args, kind, words):
    (tmp_path / "empty.json").write_text("[]")
    (tmp_path / "bad.json").write_text(json.dumps([{"dimensions": []}]))
    args = [
        str(tmp_path / "empty.json")
        if a == "EMPTY"
        else str(tmp_path / "bad.json")
        if a == "BAD"
        else a
        for a in args
    ]
    out = CliRunner().invoke(get_app(), ["attack", "reconstruct", str(census.path.parent), *args])
    assert out.exit_code != 0
    assert isinstance(out.exception, kind), out.exception
    assert words in str(out.exception)


def test_unknown_category_and_no_request_are_typed_errors(census):
    with pytest.raises(RequestError, match="at least one table request"):
        reconstruction_attack(census, [], Protection(None))
    with pytest.raises(RequestError):
        reconstruction_attack(
            census, [TableRequest(("SEX",), universe={"AREA": [99]})], Protection(None)
        )
    with pytest.raises(ParameterError, match="positive"):
        reconstruction_attack(census, [TableRequest(("SEX",))], Protection(None), time_limit=0)
