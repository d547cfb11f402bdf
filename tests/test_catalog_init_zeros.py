"""`tablesafe catalog init` proposes structural relations (issue 37), commented out.

A generated survey in which every record under 16 has the economic status
"not applicable" (5) and no one older has it: the draft proposes exactly the
two empty combinations, AGE 0..15 with ECON 1..4 and AGE 16..100 with ECON 5,
as commented ``[[structural_zeros]]`` entries with the warning that declaring
them publishes them; uncommented, they load, validate against the records and
flag the cells of a table. Proposals are checked by brute force on the
records: none holds a record, each side is large, and every empty cell of
large categories is covered.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from tablesafe import Dataset, Protection, TableBuilder, TableRequest
from tablesafe._cli import get_app
from tablesafe._errors import DataError, ParameterError
from tablesafe.catalog._catalog import Catalog
from tablesafe.engines._duckdb import DuckDBEngine
from tablesafe.prepare._catalog_init import init_catalog, uncomment_proposals
from tablesafe.prepare._zero_proposals import MIN_EXPECTED, ZeroProposal


def relation_frame(n: int = 6000, seed: int = 4) -> pd.DataFrame:
    """AGE 0..100, ECON 5 exactly under 16; SEX and REGION unrelated to either."""
    rng = np.random.default_rng(seed)
    age = rng.integers(0, 101, n)
    econ = np.where(age < 16, 5, rng.choice([1, 2, 3, 4], n, p=[0.5, 0.1, 0.3, 0.1]))
    return pd.DataFrame(
        {
            "AGE": age,
            "ECON": econ,
            "SEX": rng.choice([1, 2], n),
            "REGION": rng.choice([1, 2, 3, 4, 5, 6], n),
            "W": rng.uniform(10, 100, n),
        }
    )


def _init(tmp_path: Path, frame: pd.DataFrame, **options) -> tuple[Path, object]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    source = tmp_path / "survey.parquet"
    frame.to_parquet(source, index=False)
    out = tmp_path / "ds"
    report = init_catalog(
        source, out, weight="W", max_categories=200, rng=np.random.default_rng(1), **options
    )
    return out, report


def _boxes(report) -> set[tuple[tuple[str, tuple], tuple[str, tuple]]]:
    return {p.codes for p in report.proposed_zeros}


def _holds(frame: pd.DataFrame, proposal: ZeroProposal) -> int:
    inside = np.ones(len(frame), dtype=bool)
    for name, codes in proposal.codes:
        inside &= frame[name].isin(codes).to_numpy()
    return int(inside.sum())


@pytest.fixture(scope="module")
def drafted(tmp_path_factory) -> tuple[Path, object, pd.DataFrame]:
    frame = relation_frame()
    out, report = _init(tmp_path_factory.mktemp("zeros"), frame)
    return out, report, frame


def test_the_relation_is_proposed_as_two_short_boxes(drafted):
    out, report, frame = drafted
    young, old = tuple(range(16)), tuple(range(16, 101))
    assert _boxes(report) == {
        (("AGE", young), ("ECON", (1, 2, 3, 4))),
        (("AGE", old), ("ECON", (5,))),
    }
    text = (out / "catalog.toml").read_text()
    # Short: one entry per box, its codes as runs in the comment.
    assert "# AGE 0..15 and ECON 1..4:" in text and "# AGE 16..100 and ECON 5:" in text
    assert text.count("# [[structural_zeros]]") == 2
    assert "DECLARING ONE\n# PUBLISHES IT" in text and "approved" in text
    # Commented out: the draft declares nothing.
    assert Catalog.from_toml(out / "catalog.toml").structural_zeros == ()
    for p in report.proposed_zeros:
        assert _holds(frame, p) == 0
        sides = [int(frame[name].isin(codes).sum()) for name, codes in p.codes]
        assert list(p.records) == sides and min(sides) >= 100
        assert p.expected == pytest.approx(sides[0] * sides[1] / len(frame))
        # The comment states the sides' records and the expected count as the data has them.
        assert f"{sides[0]:,} and {sides[1]:,} records, none together" in text


def test_uncommented_proposals_load_validate_and_flag_cells(drafted, tmp_path):
    out, report, _ = drafted
    approved = tmp_path / "approved"
    approved.mkdir()
    (approved / "microdata.parquet").write_bytes((out / "microdata.parquet").read_bytes())
    (approved / "catalog.toml").write_text(uncomment_proposals((out / "catalog.toml").read_text()))
    catalog = Catalog.from_toml(approved / "catalog.toml")
    declared = {
        tuple(sorted((n, tuple(sorted(c))) for n, c in z.codes.items()))
        for z in catalog.structural_zeros
    }
    assert declared == {tuple(sorted(p.codes)) for p in report.proposed_zeros}
    dataset = Dataset.open(approved)
    DuckDBEngine().validate(dataset)  # no record in a declared zero
    table = TableBuilder(dataset, Protection(None)).build(
        TableRequest(("AGE", "ECON"), statistic="count")
    )
    frame = table.to_frame()
    inner = frame[(frame["AGE"] != "_T") & (frame["ECON"] != "_T")]
    young = inner["AGE"].astype(int) < 16
    econ5 = inner["ECON"].astype(int) == 5
    assert (inner["structural_zero"] == (young != econ5)).all()
    assert (inner.loc[young != econ5, "n"] == 0).all()


def test_a_record_breaking_the_relation_is_never_inside_a_proposal(tmp_path):
    frame = relation_frame()
    rebel = frame.index[frame["AGE"] == 10][0]
    frame.loc[rebel, "ECON"] = 1  # one ten-year-old employed
    _, report = _init(tmp_path, frame)
    assert report.proposed_zeros
    for p in report.proposed_zeros:
        assert _holds(frame, p) == 0, p
    # The rest of the relation is still proposed, around the record.
    covered = {
        (a, e)
        for p in report.proposed_zeros
        for a, e in itertools.product(dict(p.codes)["AGE"], dict(p.codes)["ECON"])
    }
    assert (10, 1) not in covered
    assert {(a, e) for a in range(16) for e in (2, 3, 4)} <= covered


def test_every_empty_cell_of_large_categories_is_covered(tmp_path):
    """Brute force over every pair of variables and every empty cell whose categories hold
    at least the minimum and whose count, were the variables unrelated, would be at least
    MIN_EXPECTED: some proposal covers it; and no proposal covers a record."""
    rng = np.random.default_rng(11)
    n = 3000
    frame = relation_frame(n, seed=11)
    # A sparse relation: REGION 6 has no SEX 2 (a men's institution, say).
    frame.loc[frame["REGION"] == 6, "SEX"] = 1
    frame["B"] = rng.choice([1, 2, 3], n, p=[0.7, 0.25, 0.05])
    m = 60
    _, report = _init(tmp_path, frame, zeros_min_records=m)
    names = ["AGE", "ECON", "SEX", "REGION", "B"]
    covered = set()
    for p in report.proposed_zeros:
        assert _holds(frame, p) == 0
        (a, ca), (b, cb) = p.codes
        covered |= {(a, x, b, y) for x in ca for y in cb}
    for a, b in itertools.combinations(names, 2):
        counts = pd.crosstab(frame[a], frame[b])
        rows, cols = counts.sum(axis=1), counts.sum(axis=0)
        for x, y in itertools.product(counts.index, counts.columns):
            big = rows[x] >= m and cols[y] >= m and rows[x] * cols[y] / n >= MIN_EXPECTED
            if counts.loc[x, y] == 0 and big:
                assert (a, x, b, y) in covered, (a, x, b, y)
    assert any(p.codes == (("SEX", (2,)), ("REGION", (6,))) for p in report.proposed_zeros)


def test_unrelated_variables_and_the_option(tmp_path):
    frame = relation_frame()
    # No relation between SEX and REGION: nothing proposed for them.
    _, report = _init(tmp_path / "a", frame)
    assert {frozenset(n for n, _ in p.codes) for p in report.proposed_zeros} == {
        frozenset({"AGE", "ECON"})
    }
    # 0 proposes none, and writes no proposal.
    out, report = _init(tmp_path / "b", frame, zeros_min_records=0)
    assert report.proposed_zeros == ()
    assert "structural_zeros" not in (out / "catalog.toml").read_text()
    # Larger than either side of the relation: none.
    _, report = _init(tmp_path / "c", frame, zeros_min_records=len(frame))
    assert report.proposed_zeros == ()
    with pytest.raises(ParameterError, match="from 0 to 1,000,000,000"):
        _init(tmp_path / "d", frame, zeros_min_records=-1)


def test_the_command_line_says_what_it_proposed(tmp_path):
    source = tmp_path / "survey.parquet"
    relation_frame().to_parquet(source, index=False)
    runner = CliRunner()
    args = ["catalog", "init", str(source), str(tmp_path / "ds"), "--weight", "W"]
    result = runner.invoke(get_app(), [*args, "--max-categories", "200"])
    assert result.exit_code == 0, result.output
    assert re.search(r"2 structural zeros proposed, commented out in catalog.toml \(AGE and ECON\)",
                     result.output)  # fmt: skip
    assert "declaring one publishes it" in result.output
    bad = runner.invoke(get_app(), [*args, "--overwrite", "--zeros-min-records", "1e12"])
    # Checked while click reads the options (exit 2 and one line from tablesafe's main).
    assert isinstance(bad.exception, ParameterError)
    assert "--zeros-min-records must be a whole number from 0 to 1,000,000,000" in str(
        bad.exception
    )
    with pytest.raises(DataError):
        init_catalog(source, tmp_path / "ds", weight="W")  # the folder holds a dataset
