"""format=sdmx-json (issue 30): an SDMX-JSON 2.0.0 data message, and the structure a site declares.

The message's shape is checked against the required fields and patterns of
the SDMX-JSON 2.0.0 data-message schema (sdmx-twg/sdmx-json,
``data-message/tools/schemas/2.0.0``), transcribed below by hand; its
observations are read back and found equal to the SDMX-CSV rows of the same
request (which tests/test_sdmx.py checks against the JSON format's cells).
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import re
import shutil

import pytest

import tablesafe as ts
from publishing import PROFILES, REQUESTS, client
from tablesafe._errors import CatalogError
from tablesafe.catalog._catalog import Catalog

ID = re.compile(r"^[A-Za-z0-9_@$-]+$")  # a message, party or code id
COMPONENT = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")  # a dimension, measure or attribute id
KEY = re.compile(r"^[0-9]+(:[0-9]+)*$")
RELATIONSHIPS = {"dimensions", "dataflow", "observation", "primaryMeasure"}
ACTIONS = {"Information", "Append", "Replace", "Delete"}


def _check_values(values, *, coded_only):
    assert isinstance(values, list) and values, "values: at least one"
    keys = [json.dumps(v, sort_keys=True) for v in values]
    assert len(set(keys)) == len(keys), "values are unique"
    for v in values:
        if v is None and not coded_only:
            continue
        forms = [{"id", "name"} <= set(v), "value" in v, "values" in v and not coded_only]
        assert sum(forms) == 1, v  # oneOf: a code with its name, or a value
        if "id" in v:
            assert ID.match(v["id"]), v


def _check_structure(s):
    assert set(s) >= {"dimensions"}
    assert set(s["dimensions"]) <= {"dataSet", "series", "observation"}
    positions = []
    for dims in s["dimensions"].values():
        for d in dims:
            assert COMPONENT.match(d["id"]) and isinstance(d["keyPosition"], int)
            assert d["keyPosition"] >= 0
            positions.append(d["keyPosition"])
            _check_values(d["values"], coded_only=True)
            for link in d.get("links", []):
                assert "rel" in link and ("urn" in link or "href" in link)
    assert len(positions) == len(set(positions))
    assert set(s.get("measures", {})) <= {"observation"}
    for m in s.get("measures", {}).get("observation", []):
        assert COMPONENT.match(m["id"])
    assert set(s.get("attributes", {})) <= {"dataSet", "dimensionGroup", "series", "observation"}
    for attrs in s.get("attributes", {}).values():
        for a in attrs:
            assert COMPONENT.match(a["id"])
            (relation,) = a["relationship"].items()  # oneOf: exactly one
            assert relation[0] in RELATIONSHIPS
            if relation[0] in ("dataflow", "observation"):
                assert relation[1] == {}
            _check_values(a["values"], coded_only=False)
    assert all(isinstance(i, int) for i in s.get("dataSets", []))


def check_message(doc):
    """The required fields of an SDMX-JSON 2.0.0 data message, and the indices they hold."""
    assert set(doc) <= {"meta", "data", "errors"} and not {"data", "errors"} <= set(doc)
    meta = doc["meta"]
    assert {"id", "prepared", "sender"} <= set(meta)
    assert ID.match(meta["id"]) and ID.match(meta["sender"]["id"])
    prepared = datetime.datetime.fromisoformat(meta["prepared"])
    assert prepared.tzinfo is not None  # date and time with a time zone
    assert isinstance(meta.get("test", False), bool)
    structures = doc["data"]["structures"]
    for s in structures:
        _check_structure(s)
    for ds in doc["data"]["dataSets"]:
        assert ds["links"] and all("rel" in x and ("urn" in x or "href" in x) for x in ds["links"])
        assert ds.get("action", "Information") in ACTIONS
        s = structures[ds["structure"]]
        dims = s["dimensions"]["observation"]
        n_measures = len(s["measures"]["observation"])
        obs_attrs = s["attributes"].get("observation", [])
        set_attrs = s["attributes"].get("dataSet", [])
        assert len(ds.get("attributes", [])) == len(set_attrs)
        for a, i in zip(set_attrs, ds.get("attributes", []), strict=True):
            assert i is None or 0 <= i < len(a["values"])
        for key, obs in ds["observations"].items():
            assert KEY.match(key)
            idx = [int(k) for k in key.split(":")]
            assert len(idx) == len(dims)
            assert all(0 <= i < len(d["values"]) for i, d in zip(idx, dims, strict=True))
            assert n_measures <= len(obs) <= n_measures + len(obs_attrs)
            assert all(v is None or isinstance(v, int | float) for v in obs[:n_measures])
            for a, i in zip(obs_attrs, obs[n_measures:], strict=False):
                assert i is None or (isinstance(i, int) and 0 <= i < len(a["values"]))


def read_message(doc):
    """(dimension codes..., statistic) -> (OBS_VALUE, OBS_STATUS, CONF_STATUS, COMMENT_OBS)."""
    s = doc["data"]["structures"][0]
    dims = s["dimensions"]["observation"]
    attrs = s["attributes"]["observation"]
    out = {}
    for key, obs in doc["data"]["dataSets"][0]["observations"].items():
        codes = tuple(d["values"][int(i)]["id"] for d, i in zip(dims, key.split(":"), strict=True))
        shown = {}
        for a, i in zip(attrs, obs[1:], strict=False):
            v = None if i is None else a["values"][i]
            shown[a["id"]] = "" if v is None else v.get("id", v.get("value"))
        out[codes] = (
            obs[0],
            shown["OBS_STATUS"],
            shown["CONF_STATUS"],
            shown.get("COMMENT_OBS", ""),
        )
    return out


@pytest.fixture(scope="module")
def answers(demo_dir, tmp_path_factory):
    """(profile, request number) -> (SDMX-JSON text, SDMX-CSV text)."""
    out = {}
    with client(demo_dir, tmp_path_factory.mktemp("site")) as c:
        for profile in PROFILES:
            for i, body in enumerate(REQUESTS):
                url = f"/api/datasets/{profile}/tables"
                js = c.post(f"{url}?format=sdmx-json", json=body)
                assert js.status_code == 200, js.text
                assert js.headers["content-type"] == "application/vnd.sdmx.data+json; version=2.0.0"
                out[profile, i] = (js.text, c.post(f"{url}?format=sdmx-csv", json=body).text)
    return out


@pytest.mark.parametrize("profile", list(PROFILES))
def test_valid_and_the_same_observations_as_sdmx_csv(answers, profile):
    for i in range(len(REQUESTS)):
        text, sdmx_csv = answers[profile, i]
        doc = json.loads(text)
        check_message(doc)
        got = read_message(doc)
        rows = list(csv.DictReader(io.StringIO(sdmx_csv)))[1:]
        dims = [c for c in rows[0] if c not in ("STRUCTURE", "STRUCTURE_ID", "ACTION")]
        dims = dims[: dims.index("OBS_VALUE")]
        assert [d["id"] for d in doc["data"]["structures"][0]["dimensions"]["observation"]] == dims
        assert len(got) == len(rows)
        for row in rows:
            value, obs, conf, comment = got[tuple(row[d] for d in dims)]
            assert (obs, conf, comment) == (
                row["OBS_STATUS"],
                row["CONF_STATUS"],
                row["COMMENT_OBS"],
            )
            assert value == (float(row["OBS_VALUE"]) if row["OBS_VALUE"] else None)
        head = next(iter(csv.DictReader(io.StringIO(sdmx_csv))))
        dataset_attrs = doc["data"]["structures"][0]["attributes"]["dataSet"]
        assert [a["values"][0]["value"] for a in dataset_attrs] == [
            head["TITLE"],
            head["COMMENT_DSET"],
        ]


def test_meta_is_the_same_bytes_every_time(answers, demo_dir, tmp_path):
    with client(demo_dir, tmp_path) as c:
        again = c.post("/api/datasets/lt/tables?format=sdmx-json", json=REQUESTS[0]).text
    assert again == answers["lt", 0][0]
    meta = json.loads(again)["meta"]
    # No clock: without a date of update in the catalog, the epoch; the id is the content's.
    assert meta["prepared"] == "1970-01-01T00:00:00Z" and meta["sender"] == {"id": "TABLESAFE"}
    ids = {json.loads(text)["meta"]["id"] for text, _ in answers.values()}
    assert len(ids) == len(answers)


SDMX = """
[dataset.sdmx]
dataflow = "ESTAT:DF_CENSUS_HC(1.2.0)"
dimensions = { AGEGRP = "AGE", SEX = "SEX_", STATISTIC = "MEASURE" }
codelists = { AGEGRP = "ESTAT:CL_AGE(1.0)" }
"""


def test_a_declared_structure_names_the_dataflow_dimensions_and_codelists(demo_dir, tmp_path):
    folder = tmp_path / "declared"
    folder.mkdir()
    shutil.copy(demo_dir / "microdata.parquet", folder / "microdata.parquet")
    text = (demo_dir / "catalog.toml").read_text()
    head, rest = text.split("\n\n", 1)  # the [dataset] table, then the variables
    (folder / "catalog.toml").write_text(f"{head}\nupdated = 2024-05-02\n{SDMX}\n{rest}")
    dataset = ts.Dataset.open(folder)
    assert dataset.catalog.sdmx is not None
    assert dataset.catalog.sdmx.reference == "ESTAT:DF_CENSUS_HC(1.2.0)"
    request = ts.TableRequest(("AGEGRP", "SEX"), statistic="both")
    table = ts.TableBuilder(dataset, ts.Protection(None)).build(request)
    rows = list(csv.DictReader(io.StringIO(table.render("sdmx-csv"))))
    assert list(rows[1])[:6] == ["STRUCTURE", "STRUCTURE_ID", "ACTION", "AGE", "SEX_", "MEASURE"]
    assert {r["STRUCTURE_ID"] for r in rows} == {"ESTAT:DF_CENSUS_HC(1.2.0)"}
    doc = json.loads(table.render("sdmx-json"))
    check_message(doc)
    assert doc["meta"]["sender"] == {"id": "ESTAT"}
    assert doc["meta"]["prepared"] == "2024-05-02T00:00:00Z"
    urn = "urn:sdmx:org.sdmx.infomodel.datastructure.Dataflow=ESTAT:DF_CENSUS_HC(1.2.0)"
    assert doc["data"]["dataSets"][0]["links"] == [{"rel": "dataflow", "urn": urn}]
    dims = doc["data"]["structures"][0]["dimensions"]["observation"]
    assert [d["id"] for d in dims] == ["AGE", "SEX_", "MEASURE"]
    assert dims[0]["links"] == [
        {
            "rel": "codelist",
            "urn": "urn:sdmx:org.sdmx.infomodel.codelist.Codelist=ESTAT:CL_AGE(1.0)",
        }
    ]
    again = Catalog.from_dict(dataset.catalog.to_dict())
    assert again.sdmx == dataset.catalog.sdmx


@pytest.mark.parametrize(
    ("sdmx", "message"),
    [
        ({"dataflow": "DF_CENSUS"}, r"must be written AGENCY:ID\(VERSION\)"),
        ({"dataflow": "ESTAT:DF(1.0)", "agency": "X"}, r"unknown key\(s\) \['agency'\]"),
        ({"dataflow": "ESTAT:DF(1.0)", "dimensions": {"NOPE": "X"}}, "names NOPE, which"),
        ({"dataflow": "ESTAT:DF(1.0)", "dimensions": {"SEX": "1X"}}, "not an SDMX id"),
        (
            {"dataflow": "ESTAT:DF(1.0)", "dimensions": {"SEX": "REGION"}},
            "gives the id REGION to variables of different columns",
        ),
        ({"dataflow": "ESTAT:DF(1.0)", "codelists": {"SEX": "CL_SEX"}}, "must be written"),
    ],
)
def test_a_wrong_declaration_is_refused(demo_dir, sdmx, message):
    raw = ts.Dataset.open(demo_dir).catalog.to_dict()
    with pytest.raises(CatalogError, match=message):
        Catalog.from_dict({**raw, "dataset": {**raw["dataset"], "sdmx": sdmx}})


def test_levels_of_one_variable_may_share_a_dimension(demo_dir):
    raw = ts.Dataset.open(demo_dir).catalog.to_dict()
    sdmx = {"dataflow": "ESTAT:DF(1.0)", "dimensions": {"AGEGRP": "AGE", "AGE5": "AGE"}}
    catalog = Catalog.from_dict({**raw, "dataset": {**raw["dataset"], "sdmx": sdmx}})
    assert catalog.sdmx is not None and catalog.sdmx.dimension_id("AGE5") == "AGE"
