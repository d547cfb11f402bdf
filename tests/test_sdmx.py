"""format=sdmx-csv (issue 30): an SDMX-CSV 2.0 data message, one row per cell and statistic."""

from __future__ import annotations

import csv
import io
import re

import pytest

import tablesafe as ts
from publishing import PROFILES, REQUESTS, client
from tablesafe._protection import Protection
from tablesafe.catalog._magnitudes import read_magnitude_column
from tablesafe.output._sdmx import CONF_STATUS, OBS_STATUS, dataflow, sdmx_code


@pytest.fixture(scope="module")
def answers(demo_dir, tmp_path_factory):
    """(profile, request number) -> (SDMX-CSV text, its labels=true text, JSON document)."""
    out = {}
    with client(demo_dir, tmp_path_factory.mktemp("site")) as c:
        for profile in PROFILES:
            for i, body in enumerate(REQUESTS):
                url = f"/api/datasets/{profile}/tables"
                sdmx = c.post(f"{url}?format=sdmx-csv", json=body)
                named = c.post(f"{url}?format=sdmx-csv&labels=true&footnotes=false", json=body)
                assert sdmx.status_code == 200 and named.status_code == 200, sdmx.text
                assert sdmx.headers["content-type"].startswith(
                    "application/vnd.sdmx.data+csv; version=2.0.0"
                )
                out[profile, i] = (sdmx.text, named.text, c.post(url, json=body).json())
    return out


def _rows(text):
    return list(csv.DictReader(io.StringIO(text)))


def _expected(cell, statistic, profile):
    """OBS_VALUE, OBS_STATUS, CONF_STATUS and whether COMMENT_OBS is set, from the JSON flags."""
    shown = cell[statistic]
    parts = read_magnitude_column(statistic)
    sensitive = parts is not None and cell.get(f"sensitive_{parts[1]}")
    if cell.get("structural_zero"):
        # 0, or blank for a mean (no records to average).
        return _number(shown), "M", "F", True
    if cell.get("suppressed"):
        return "", "Q", "C", True
    if shown is None:
        # A dominated sum or mean left blank is confidential; anything else blank is missing.
        return ("", "Q", "C", True) if sensitive else ("", "O", "F", False)
    changed = PROFILES[profile][0]["method"] != "none"
    return _number(shown), "E" if changed else "A", "F", bool(sensitive)


def _number(value):
    """A number as the CSV formats write it: whole numbers without a decimal point."""
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else repr(value)


@pytest.mark.parametrize("profile", list(PROFILES))
def test_one_row_per_cell_and_statistic_with_its_statuses(answers, profile):
    for i in range(len(REQUESTS)):
        text, _, doc = answers[profile, i]
        rows = _rows(text)
        dims = doc["meta"]["dimensions"]
        assert list(rows[0]) == [
            "STRUCTURE",
            "STRUCTURE_ID",
            "ACTION",
            *dims,
            "STATISTIC",
            "OBS_VALUE",
            "OBS_STATUS",
            "CONF_STATUS",
            "COMMENT_OBS",
            "TITLE",
            "COMMENT_DSET",
        ]
        # The first row holds the dataset-level attributes, attached to no key.
        head, rows = rows[0], rows[1:]
        assert head["TITLE"] == doc["meta"]["title"]
        assert head["COMMENT_DSET"].startswith(f"Universe: {doc['meta']['universe_label']}. ")
        assert all(head[d] == "" for d in [*dims, "STATISTIC", "OBS_VALUE"])
        stats = [s for s in doc["cells"][0] if s not in dims and not _is_flag(s)]
        assert len(rows) == len(doc["cells"]) * len(stats)
        # The table's own dataflow (its structure is format=sdmx-structure's).
        assert re.fullmatch(rf"TABLESAFE:DF_{profile}_[0-9A-F]{{10}}\(1\.0\)", head["STRUCTURE_ID"])
        for row in rows:
            assert row["STRUCTURE"] == "dataflow" and row["ACTION"] == "I"
            assert row["STRUCTURE_ID"] == head["STRUCTURE_ID"]
            assert row["OBS_STATUS"] in OBS_STATUS and row["CONF_STATUS"] in CONF_STATUS
        for k, cell in enumerate(doc["cells"]):
            for j, s in enumerate(stats):
                row = rows[k * len(stats) + j]
                assert [row[d] for d in dims] == [sdmx_code(str(cell[d])) for d in dims]
                assert row["STATISTIC"] == s
                value, obs, conf, comment = _expected(cell, s, profile)
                assert (row["OBS_VALUE"], row["OBS_STATUS"], row["CONF_STATUS"]) == (
                    value,
                    obs,
                    conf,
                ), (profile, i, cell, s)
                assert bool(row["COMMENT_OBS"]) == comment


def _is_flag(column):
    return column in ("structural_zero", "suppressed") or column.startswith("sensitive_")


def test_every_code_is_used_and_flagged_rows_say_why(answers):
    statuses = {
        (row["OBS_STATUS"], row["CONF_STATUS"])
        for text, _, _ in answers.values()
        for row in _rows(text)[1:]
    }
    assert {("M", "F"), ("Q", "C"), ("E", "F"), ("A", "F")} <= statuses
    text, _, doc = answers["lt", 0]
    flags = doc["meta"]["footnotes"]["flags"]
    comments = {row["COMMENT_OBS"] for row in _rows(text)[1:]} - {""}
    assert comments <= set(flags.values()) and flags["suppressed"] in comments


def test_labels_write_id_and_name(answers, demo_dir):
    _, named, doc = answers["none", 3]
    rows = _rows(named)
    assert list(rows[0])[:6] == [
        "STRUCTURE",
        "STRUCTURE_ID",
        "ACTION",
        "AGEB: Age band",
        "EDUC: Highest education",
        "STATISTIC: Statistic",
    ]
    flow, title = rows[0]["STRUCTURE_ID"].split(": ", 1)
    assert re.fullmatch(r"TABLESAFE:DF_none_[0-9A-F]{10}\(1\.0\)", flow)
    assert title == doc["meta"]["title"]
    # An unprotected table keeps its dataset-level row without footnotes: its title says so.
    assert rows[0]["TITLE: Title"].startswith("UNPROTECTED: ")
    assert rows[0]["AGEB: Age band"] == ""
    rows = rows[1:]
    assert {r["AGEB: Age band"] for r in rows} == {
        "young: Under 35",
        "middle: 35 to 64",
        "other: 65 and over",
        "_T: Total",
    }
    assert {r["OBS_STATUS: Observation status"] for r in rows} <= {
        f"{k}: {v}" for k, v in OBS_STATUS.items()
    }
    assert len(rows) == len(_rows(answers["none", 3][0])) - 1
    # A protected table without footnotes has no dataset-level row and no TITLE column.
    protected = _rows(answers["blank", 3][1])
    assert "TITLE: Title" not in protected[0] and len(protected) == len(rows)


def test_codes_are_sdmx_ids_and_read_back():
    for code in ("90+", "1", "_T", "a b", "x$2B", "é", "0-4"):
        escaped = sdmx_code(code)
        assert re.fullmatch(r"[A-Za-z0-9_@$-]+", escaped)
        back = re.sub(
            r"(\$[0-9A-F]{2})+", lambda m: bytes.fromhex(m[0].replace("$", "")).decode(), escaped
        )
        assert back == code
    assert sdmx_code("90+") == "90$2B" and sdmx_code("0-4") == "0-4"


def test_dataflow_ids_and_same_bytes(answers, demo_dir, tmp_path):
    assert dataflow("demo") == "TABLESAFE:demo(1.0)"
    assert dataflow("my data.v2") == "TABLESAFE:my_data_v2(1.0)"
    with client(demo_dir, tmp_path) as c:
        again = c.post("/api/datasets/lt/tables?format=sdmx-csv", json=REQUESTS[0]).text
    assert again == answers["lt", 0][0]
    table = ts.TableBuilder(ts.Dataset.open(demo_dir), Protection(None)).build(
        ts.TableRequest(("SEX",))
    )
    assert table.render("sdmx-csv") == table.render("sdmx-csv")
