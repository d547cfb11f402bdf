"""The precision rule (issue 29): max_rse marks unreliable estimates "np" or flags them.

What a mark reveals: the rule reads only the published estimate, its
published standard error and protected counts, so every mark is recomputed
here from the figures a flagged table publishes (estimate, standard error,
counts) and found equal; "np" then hides no more and no less than those
figures would show.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest

from tablesafe import Protection, TableBuilder, TableRequest
from tablesafe._errors import ConfigError
from tablesafe._request import Percent
from tablesafe._settings import RuleSettings, load_site_config
from tablesafe.mechanisms import destatis
from tablesafe.mechanisms._precision import denominator_index
from tsdata import random_frame, write_dataset

STATISTIC = "both,percent:row,percent:column"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("rse"), random_frame(2500, seed=2929))


def _table(data, action="np", se=True, **rules):
    settings = RuleSettings(
        max_rse=rules.pop("max_rse", 15), min_universe_size=0, unreliable_action=action, **rules
    )
    builder = TableBuilder(data, Protection(destatis(3, 1.0)), rules=settings)
    return builder.build(TableRequest(("A", "C"), statistic=STATISTIC, replicates=se))


def _by_hand(table, max_rse, least=0):
    """Each estimate's mark from the flagged table's published figures."""
    counts = table.counts
    out = {}
    pairs = [("weighted", table.weighted, table.se)] + [
        (k.column_name, table.percentages[k.column_name], table.percentages[f"{k.column_name}_se"])
        for k in (Percent.ROW, Percent.COLUMN)
    ]
    for name, value, se in pairs:
        base = counts
        if name.startswith("percent_"):
            kind = Percent(name.split("_")[1])
            base = np.minimum(counts, counts[denominator_index(kind, counts.shape)])
        with np.errstate(divide="ignore", invalid="ignore"):
            rse = 100 * se / np.abs(value)
        live = table.computed & ~np.isnan(value) & (value != 0)
        out[name] = live & (np.isnan(se) | (rse > max_rse) | (base < least))
    return out


@pytest.mark.parametrize(("max_rse", "least"), [(15, 0), (25, 0), (40, 60)])
def test_every_mark_is_recomputed_from_the_published_figures(data, max_rse, least):
    flagged = _table(data, "flag", max_rse=max_rse, min_effective_count=least)
    marks = _by_hand(flagged, max_rse, least)
    assert set(flagged.unreliable) == set(marks)
    for name, mark in marks.items():
        np.testing.assert_array_equal(flagged.unreliable[name], mark, err_msg=name)
    assert any(m.any() for m in marks.values()) and any((~m).any() for m in marks.values())
    hidden = _table(data, "np", max_rse=max_rse, min_effective_count=least)
    for name, mark in marks.items():
        np.testing.assert_array_equal(hidden.unreliable[name], mark)


def test_np_in_json_and_csv_with_standard_errors_and_intervals(data):
    table = _table(data, "np")
    mark = table.unreliable["weighted"]
    assert mark.any()
    doc = json.loads(table.to_json())
    cells = pd.DataFrame(doc["cells"])
    frame = pd.read_csv(io.StringIO(table.to_csv()), dtype=str)
    codes = [[*map(str, d.codes), "_T"] for d in table.dimensions]
    at = [
        tuple(codes[i].index(str(v)) for i, v in enumerate(row))
        for row in cells[["A", "C"]].itertuples(index=False)
    ]
    shown = np.array([mark[a] for a in at])
    for column in ("weighted", "se", "ci_low", "ci_high"):
        assert (cells.loc[shown, column] == "np").all()
        assert (frame.loc[shown, column] == "np").all()
        assert not (cells.loc[~shown, column] == "np").any()
    assert "np" in doc["meta"]["footnotes"]["flags"]
    assert any('show "np"' in s for s in doc["meta"]["footnotes"]["statement"])


def test_flags_are_columns_and_values_stay(data):
    table = _table(data, "flag")
    frame = table.to_frame()
    for name in ("weighted", "percent_row", "percent_column"):
        assert f"unreliable_{name}" in frame.columns
    assert not (frame == "np").any().any()
    assert frame["unreliable_weighted"].any()
    flags = table.footnotes()["flags"]
    assert flags["unreliable_weighted"].startswith("this estimate is too unreliable")


def test_jsonstat_and_sdmx_mark_low_reliability(data):
    for action in ("np", "flag"):
        table = _table(data, action)
        stat = json.loads(table.render("jsonstat"))
        assert stat["extension"]["status"]["U"]
        names = list(stat["dimension"][stat["id"][-1]]["category"]["index"])
        k = names.index("weighted")
        marked = [
            int(i) for i, v in stat["status"].items() if v == "U" and int(i) % len(names) == k
        ]
        assert len(marked) == int(table.unreliable["weighted"].sum())
        values = [stat["value"][i] for i in marked]
        assert (
            all(v is None for v in values) if action == "np" else all(v is not None for v in values)
        )
        sdmx = pd.read_csv(io.StringIO(table.render("sdmx-csv")), dtype=str, keep_default_na=False)
        rows = sdmx[(sdmx["STATISTIC"] == "weighted") & (sdmx["OBS_STATUS"] == "U")]
        assert len(rows) == int(table.unreliable["weighted"].sum())
        assert (rows["CONF_STATUS"] == "F").all()
        assert (
            (rows["OBS_VALUE"] == "").all() if action == "np" else (rows["OBS_VALUE"] != "").all()
        )


def test_a_standard_error_never_published_is_missing_not_unreliable(data):
    # Issue 38, one truth with docs/formats.md: an SE under the site's count is O (missing)
    # in SDMX and a plain null in JSON-stat, even beside an estimate the rule marks U; the
    # SE of an estimate shown "np" is U.
    rules = RuleSettings(max_rse=6, min_universe_size=0, unreliable_action="np")
    protection = Protection(destatis(3, 1.0), se_min_count=60)
    table = TableBuilder(data, protection, rules=rules).build(
        TableRequest(("A", "C"), statistic=STATISTIC, replicates=True)
    )
    blank = np.isnan(table.se) & table.computed
    shown_np = table.unreliable["weighted"] & ~np.isnan(table.se)
    assert (blank & table.unreliable["weighted"]).any() and shown_np.any()
    sdmx = pd.read_csv(io.StringIO(table.render("sdmx-csv")), dtype=str, keep_default_na=False)
    se_rows = sdmx[sdmx["STATISTIC"] == "se"]
    assert (se_rows["OBS_STATUS"] == "O").sum() == int(blank.sum())
    assert (se_rows["OBS_STATUS"] == "U").sum() == int(shown_np.sum())
    stat = json.loads(table.render("jsonstat"))
    names = list(stat["dimension"][stat["id"][-1]]["category"]["index"])
    k = names.index("se")
    marked = [int(i) for i, v in stat["status"].items() if v == "U" and int(i) % len(names) == k]
    assert len(marked) == int(shown_np.sum())


def test_xlsx_shows_np_or_the_flag(data, tmp_path):
    table = _table(data, "np")
    book = pd.read_excel(io.BytesIO(table.to_xlsx_bytes()), sheet_name=None, dtype=str)
    marked = int(table.unreliable["weighted"].sum())
    assert (book["cells"]["weighted"] == "np").sum() == marked
    # The cross-tab sheet of the weighted counts shows np too.
    assert (book["Weighted count"] == "np").sum().sum() == marked
    flagged = _table(data, "flag")
    book = pd.read_excel(io.BytesIO(flagged.to_xlsx_bytes()), sheet_name=None)
    assert book["cells"]["unreliable_weighted"].sum() == int(flagged.unreliable["weighted"].sum())
    assert not (book["cells"]["weighted"].astype(str) == "np").any()


def test_without_se_asked_the_rule_still_decides_and_no_se_is_published(data):
    with_se = _table(data, "np", se=True)
    without = _table(data, "np", se=False)
    assert without.se is None and "se" not in without.statistics()
    assert not any(c.endswith(("_se", "_ci_low", "_ci_high")) for c in without.statistics())
    for name, mark in with_se.unreliable.items():
        np.testing.assert_array_equal(without.unreliable[name], mark)
    assert "se_min_count" not in without.metadata
    assert without.request.replicates is False


def test_counts_alone_and_no_rule_are_untouched(data):
    builder = TableBuilder(
        data, Protection(destatis(3, 1.0)), rules=RuleSettings(min_universe_size=0)
    )
    plain = builder.build(TableRequest(("A", "C"), statistic="count,percent:row"))
    ruled = TableBuilder(
        data, Protection(destatis(3, 1.0)), rules=RuleSettings(max_rse=15, min_universe_size=0)
    ).build(TableRequest(("A", "C"), statistic="count,percent:row"))
    assert plain.unreliable is None and ruled.unreliable is None
    assert plain.to_json_bytes() == ruled.to_json_bytes()


@pytest.mark.parametrize("bad", [{"max_rse": 0}, {"max_rse": -5}, {"unreliable_action": "hide"}])
def test_bad_settings_are_refused(tmp_path, bad):
    data = {"base": str(tmp_path), "datasets": [{"name": "d", "path": ".", "rules": bad}]}
    with pytest.raises(ConfigError):
        load_site_config(data=data)


def test_the_api_refuses_se_without_replicate_weights(tmp_path):
    from fastapi.testclient import TestClient

    from tablesafe.server import create_app
    from tsdata import RANDOM_CATALOG

    catalog = {**RANDOM_CATALOG, "dataset": {"title": "t", "record_key": "RKEY", "weight": "W"}}
    folder = tmp_path / "plain"
    write_dataset(folder, random_frame(300, seed=3), catalog)
    site = load_site_config(
        data={
            "base": str(tmp_path),
            "datasets": [{"name": "d", "path": str(folder), "rules": {"min_universe_size": 0}}],
        }
    )
    with TestClient(create_app(site)) as client:
        body = {"dimensions": ["A"], "statistic": "weighted", "se": True}
        answer = client.post("/api/datasets/d/tables", json=body)
        assert answer.status_code == 400
        assert "no replicate weights" in answer.json()["error"]["message"]
        ok = client.post("/api/datasets/d/tables", json={**body, "se": False})
        assert ok.status_code == 200
