"""Hierarchical classifications: levels nested in a tree, same record keys at every level."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

import tablesafe as ts
from tablesafe._errors import CatalogError
from tablesafe._settings import load_site_config
from tablesafe.catalog._catalog import Catalog
from tablesafe.engines import DuckDBEngine
from tablesafe.mechanisms import dp_geometric
from tablesafe.server import create_app, hash_key

KEY = "ts_alice_key_for_tests_0123456789"
CKM = {"method": "ckm", "max_deviation": 3, "variance": 1.0, "seeds": "cellkey"}
ZONES = {"N": [1, 2, 3], "C": [4, 5, 6], "S": [7, 8]}


def base() -> dict[str, Any]:
    """A small catalog: AREA (6 codes) with REGION over areas and COUNTRY over regions."""
    return {
        "dataset": {"record_key": "RKEY"},
        "variables": [
            {
                "name": "AREA",
                "categories": [{"code": c} for c in range(1, 7)],
                "groupings": [
                    {
                        "name": "REGION",
                        "groups": [
                            {"code": "A", "members": [1, 2]},
                            {"code": "B", "members": [3, 4]},
                            {"code": "C", "members": [5, 6]},
                        ],
                    },
                    {
                        "name": "COUNTRY",
                        "of": "REGION",
                        "groups": [
                            {"code": "X", "members": ["A", "B"]},
                            {"code": "Y", "members": ["C"]},
                        ],
                    },
                ],
            },
            {"name": "SEX", "categories": [{"code": 1}, {"code": 2}]},
        ],
        "hierarchies": [{"name": "GEO", "levels": ["COUNTRY", "REGION", "AREA"]}],
    }


def test_a_level_declared_of_the_level_below_stands_for_its_source_codes():
    cat = Catalog.from_dict(base())
    country = cat.variable("COUNTRY")
    assert country.members == ((1, 2, 3, 4), (5, 6))
    (geo,) = cat.hierarchies
    assert geo.levels == ("COUNTRY", "REGION", "AREA")
    assert geo.parents == (("X", "X", "Y"), ("A", "A", "B", "B", "C", "C"))
    tree = geo.tree(cat.variables)
    assert [n["code"] for n in tree] == ["X", "Y"]
    assert [n["code"] for n in tree[0]["children"]] == ["A", "B"]
    assert [n["code"] for n in tree[1]["children"][0]["children"]] == [5, 6]


def test_catalog_round_trip(tmp_path):
    cat = Catalog.from_dict(base())
    path = tmp_path / "catalog.toml"
    path.write_text(cat.to_toml())
    again = Catalog.from_toml(path)
    assert again.hierarchies == cat.hierarchies
    assert again.variable("COUNTRY").members == cat.variable("COUNTRY").members


def _with(change) -> dict[str, Any]:
    raw = copy.deepcopy(base())
    change(raw)
    return raw


def _groupings(raw: dict[str, Any]) -> list[dict[str, Any]]:
    groupings: list[dict[str, Any]] = raw["variables"][0]["groupings"]
    return groupings


def _two_parents(raw):
    _groupings(raw)[1]["groups"][1]["members"] = ["B", "C"]


def _cycle_of(raw):
    _groupings(raw)[0]["of"] = "COUNTRY"
    _groupings(raw)[0]["groups"] = [{"code": "A", "members": ["X", "Y"]}]


def _unknown_code(raw):
    _groupings(raw)[1]["groups"][1]["members"] = ["C", "Z"]


def _orphan(raw):
    _groupings(raw)[1]["groups"][1]["members"] = []
    _groupings(raw)[1]["groups"] = _groupings(raw)[1]["groups"][:1]


def _repeated_level(raw):
    raw["hierarchies"][0]["levels"] = ["COUNTRY", "REGION", "COUNTRY"]


def _unknown_level(raw):
    raw["hierarchies"][0]["levels"] = ["COUNTRY", "DISTRICT"]


def _finest_first(raw):
    raw["hierarchies"][0]["levels"] = ["AREA", "REGION"]


def _straddling_level(raw):
    _groupings(raw).append(
        {
            "name": "ODD",
            "groups": [{"code": 1, "members": [1, 2, 3]}, {"code": 2, "members": [4, 5, 6]}],
        }
    )
    raw["hierarchies"][0]["levels"] = ["ODD", "REGION"]


def _other_variable(raw):
    raw["hierarchies"][0]["levels"] = ["COUNTRY", "SEX"]


def _unknown_of(raw):
    _groupings(raw)[1]["of"] = "PROVINCE"


def _one_level(raw):
    raw["hierarchies"][0]["levels"] = ["COUNTRY"]


def _name_clash(raw):
    raw["hierarchies"][0]["name"] = "REGION"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_two_parents, "'B' is in groups 'X' and 'Y'; a category has exactly one parent"),
        (_cycle_of, "cycle (REGION -> COUNTRY -> REGION)"),
        (_unknown_code, "names 'Z', which is not a code of REGION; allowed: 'A', 'B', 'C'"),
        (_orphan, "REGION categories ['C'] are in no group"),
        (_repeated_level, "names level COUNTRY twice, a cycle"),
        (_unknown_level, "unknown level 'DISTRICT'; levels are variables or groupings"),
        (_finest_first, "REGION 'A' falls in AREA 1 and 2"),
        (_straddling_level, "REGION 'B' falls in ODD 1 and 2"),
        (_other_variable, "classify different variables"),
        (_unknown_of, "declared of 'PROVINCE', which is not AREA or one of its groupings"),
        (_one_level, "needs 'levels': at least two"),
        (_name_clash, "already used by a variable"),
    ],
)
def test_bad_hierarchies_say_what_is_allowed(change, message):
    with pytest.raises(CatalogError) as err:
        Catalog.from_dict(_with(change))
    assert message in str(err.value)


# -- the demo: GEOGRAPHY (ZONE > REGION) and AGE_TREE (AGEGRP > AGE5 > AGE) ----------


def test_demo_catalog_declares_its_hierarchies(demo_dir):
    cat = Catalog.from_toml(demo_dir / "catalog.toml")
    by_name = {h.name: h for h in cat.hierarchies}
    assert by_name["GEOGRAPHY"].levels == ("ZONE", "REGION")
    assert by_name["AGE_TREE"].levels == ("AGEGRP", "AGE5", "AGE")
    tree = by_name["GEOGRAPHY"].tree(cat.variables)
    assert {n["code"]: [c["code"] for c in n["children"]] for n in tree} == ZONES
    age = by_name["AGE_TREE"].tree(cat.variables)
    # 75+ holds 75-79, 80-84, 85-89 and 90+; every single year sits under one band.
    assert [c["code"] for c in age[-1]["children"]] == ["75-79", "80-84", "85-89", "90+"]
    years = [y["code"] for g in age for b in g["children"] for y in b["children"]]
    assert years == list(range(91))


@pytest.fixture(scope="module")
def frame(demo_dir) -> pd.DataFrame:
    return pd.read_parquet(demo_dir / "microdata.parquet", columns=["REGION", "AGE", "RKEY", "SEX"])


def test_an_upper_level_cell_has_the_cell_key_of_its_records(demo_dir, frame):
    """Brute force: ZONE cell keys are the sums of the record keys of their regions' records."""
    ds = ts.Dataset.open(demo_dir)
    zone = ds.catalog.variable("ZONE")
    agg = DuckDBEngine().tabulate(
        ds, ts.TableRequest(("ZONE",), statistic="count").bind(ds.catalog)
    )
    regions = DuckDBEngine().tabulate(
        ds, ts.TableRequest(("REGION",), statistic="count").bind(ds.catalog)
    )
    region_key = dict(zip(ds.catalog.variable("REGION").codes, regions.cell_key[:8], strict=True))
    for i, code in enumerate(zone.codes):
        members = ZONES[str(code)]
        records = frame[frame["REGION"].isin(members)]
        assert agg.n[i] == len(records)
        want = int(records["RKEY"].astype(np.uint64).sum()) % 2**32
        assert int(agg.cell_key[i]) == want
        assert int(agg.cell_key[i]) == sum(int(region_key[r]) for r in members) % 2**32


def test_a_filter_by_an_upper_level_is_the_filter_by_its_children(demo_dir):
    ds = ts.Dataset.open(demo_dir)
    builder = ts.TableBuilder(ds, _ckm())
    by_zone = builder.build(ts.TableRequest(("AGEGRP", "SEX"), universe={"ZONE": ["N"]}))
    by_regions = builder.build(ts.TableRequest(("AGEGRP", "SEX"), universe={"REGION": ZONES["N"]}))
    pd.testing.assert_frame_equal(by_zone.to_frame(), by_regions.to_frame())


def _ckm() -> ts.Protection:
    return ts.Protection(dp_geometric(1.0))


def test_structural_zeros_declared_at_one_level_hold_below(demo_dir):
    """AGEGRP 0-14 cannot be married; so neither can AGE5 00-04 nor AGE 3."""
    ds = ts.Dataset.open(demo_dir)
    builder = ts.TableBuilder(ds, _ckm())
    for level, young in (("AGE5", "00-04"), ("AGE", 3)):
        got = builder.build(ts.TableRequest((level, "MARSTAT"), statistic="count")).to_frame()
        cell = got[(got[level] == young) & (got["MARSTAT"] == 2)]
        assert cell["structural_zero"].item()
        assert cell["n"].item() == 0
        older = got[(got[level] == ("20-24" if level == "AGE5" else 30)) & (got["MARSTAT"] == 2)]
        assert not older["structural_zero"].item()


@pytest.fixture(scope="module")
def client(demo_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hier")
    site = load_site_config(
        data={
            "base": str(tmp),
            "server": {"audit_db": "audit.sqlite"},
            "keys": [{"id": "alice", "hash": hash_key(KEY), "role": "user"}],
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": CKM,
                    "rules": {"min_universe_size": 20, "sliver_min_difference": 0},
                }
            ],
        }
    )
    with TestClient(create_app(site)) as c:
        yield c


def test_the_dataset_description_lists_the_hierarchies(client):
    doc = client.get("/api/datasets/demo", headers={"x-api-key": KEY}).json()
    by_name = {h["name"]: h for h in doc["hierarchies"]}
    geo = by_name["GEOGRAPHY"]
    assert geo["levels"] == ["ZONE", "REGION"]
    assert geo["label"] == "Zones and regions"
    assert [n["label"] for n in geo["tree"]] == ["North", "Centre", "South and islands"]
    assert [c["label"] for c in geo["tree"][0]["children"]] == ["North", "North East", "North West"]
    assert by_name["AGE_TREE"]["tree"][0]["children"][0] == {
        "level": "AGE5",
        "code": "00-04",
        "label": "0 to 4",
        "children": [
            {"level": "AGE", "code": a, "label": str(a), "children": []} for a in range(5)
        ],
    }

    # The tree holds codes and labels only: nothing about the records.
    def keys(nodes):
        for node in nodes:
            yield set(node)
            yield from keys(node["children"])

    for h in doc["hierarchies"]:
        assert set(h) == {"name", "label", "levels", "tree"}
        assert all(k == {"level", "code", "label", "children"} for k in keys(h["tree"]))


def test_a_zone_table_equals_the_custom_grouping_of_its_regions(client):
    """Same records, same cell keys, same protected values at every level."""
    headers = {"x-api-key": KEY}
    zone = client.post(
        "/api/datasets/demo/tables", json={"dimensions": ["ZONE", "SEX"]}, headers=headers
    ).json()
    custom = {
        "name": "MYZONE",
        "variable": "REGION",
        "groups": [{"code": k, "label": k, "members": v} for k, v in ZONES.items()],
    }
    mine = client.post(
        "/api/datasets/demo/tables",
        json={"dimensions": ["MYZONE", "SEX"], "groupings": [custom]},
        headers=headers,
    ).json()

    def values(doc, dim):
        return {(c[dim], c["SEX"]): (c["n"], c["weighted"]) for c in doc["cells"]}

    assert values(zone, "ZONE") == values(mine, "MYZONE")


def test_a_filter_by_an_upper_level_trims_the_finer_dimension(demo_dir):
    """ZONE = N by REGION shows the regions of zone N only: the same cells, no empty rows."""
    ds = ts.Dataset.open(demo_dir)
    builder = ts.TableBuilder(ds, _ckm())
    by_zone = builder.build(ts.TableRequest(("REGION", "SEX"), universe={"ZONE": ["N"]}))
    by_regions = builder.build(ts.TableRequest(("REGION", "SEX"), universe={"REGION": ZONES["N"]}))
    pd.testing.assert_frame_equal(by_zone.to_frame(), by_regions.to_frame())
    regions = sorted({c for c in by_zone.to_frame()["REGION"] if c != "_T"})
    assert regions == sorted(ZONES["N"])
    # A grouping by a condition on its source variable: age groups overlapping ages 20-34.
    plan = ts.TableRequest(("AGEGRP", "SEX"), universe={"AGE": list(range(20, 35))}).bind(
        ds.catalog
    )
    agegrp = ds.catalog.variable("AGEGRP")
    expected = [c for c in agegrp.codes if set(agegrp.source_codes(c)) & set(range(20, 35))]
    assert list(plan.dimensions[0].codes) == expected
