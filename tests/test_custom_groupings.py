"""Custom groupings at request time: same records, same keys, same values; guarded and limited."""

from __future__ import annotations

import pandas as pd
import pytest
from fastapi.testclient import TestClient

import tablesafe as ts
from tablesafe._errors import RequestError
from tablesafe._settings import load_site_config
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._custom import CustomGroup, CustomGrouping
from tablesafe.server import create_app, hash_key

KEYS = {"alice": "ts_alice_key_for_tests_0123456789", "bob": "ts_bob_key_for_tests_0123456789"}
CKM = {"method": "ckm", "max_deviation": 3, "variance": 1.0, "seeds": "cellkey"}


def ages(lo: int, hi: int) -> list[int]:
    return list(range(lo, hi + 1))


def grouping(young_hi: int = 29, **extra):
    return {
        "name": "AGEB",
        "variable": "AGE",
        "label": "Age in three bands",
        "groups": [
            {"code": "young", "label": f"0 to {young_hi}", "members": ages(0, young_hi)},
            {"code": "middle", "label": "middle", "members": ages(young_hi + 1, 59)},
        ],
        "other": "60 and over",
        **extra,
    }


def make_client(demo_dir, tmp_path, rules=None):
    site = load_site_config(
        data={
            "base": str(tmp_path),
            "server": {"audit_db": "audit.sqlite"},
            "keys": [{"id": k, "hash": hash_key(v), "role": "user"} for k, v in KEYS.items()],
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": CKM,
                    "rules": {"min_universe_size": 20, "sliver_min_difference": 0, **(rules or {})},
                }
            ],
        }
    )
    return TestClient(create_app(site))


@pytest.fixture
def client(demo_dir, tmp_path):
    with make_client(demo_dir, tmp_path) as c:
        yield c


def post(client, body, key="alice", **params):
    return client.post(
        "/api/datasets/demo/tables", json=body, headers={"x-api-key": KEYS[key]}, params=params
    )


def cells(doc, dim):
    return {(c[dim], c["SEX"]): (c["n"], c["weighted"]) for c in doc["cells"]}


def test_a_custom_grouping_equal_to_a_catalog_grouping_gives_its_values(client, demo_dir):
    """Cell keys come from the records: the same records give the same protected values."""
    cat = Catalog.from_toml(demo_dir / "catalog.toml")
    agegrp = cat.variable("AGEGRP")
    custom = {
        "name": "MYAGE",
        "variable": "AGE",
        "groups": [
            {"code": f"g{c.code}", "label": c.label, "members": list(m)}
            for c, m in zip(agegrp.categories, agegrp.members or (), strict=True)
        ],
    }
    body = {"dimensions": ["MYAGE", "SEX"], "universe": {"REGION": [1, 2]}, "groupings": [custom]}
    mine = post(client, body).json()
    ref = post(client, {"dimensions": ["AGEGRP", "SEX"], "universe": {"REGION": [1, 2]}}).json()
    renamed = {(f"g{a}" if a != "_T" else a, s): v for (a, s), v in cells(ref, "AGEGRP").items()}
    assert cells(mine, "MYAGE") == renamed
    assert any(v[0] != 0 for v in renamed.values())


def test_the_same_group_asked_by_two_keys_gets_the_same_value(client):
    body = {"dimensions": ["AGEB", "SEX"], "groupings": [grouping()]}
    a = post(client, body, "alice").json()
    b = post(client, {**body, "groupings": [grouping()]}, "bob").json()
    assert a["cells"] == b["cells"]
    assert [c["AGEB"] for c in a["cells"][::3]] == ["young", "middle", "other", "_T"]


def test_values_are_the_protection_of_the_true_group_counts(demo_dir):
    """Brute force: the unprotected table equals counts recomputed from the microdata."""
    frame = pd.read_parquet(demo_dir / "microdata.parquet", columns=["AGE", "SEX", "REGION"])
    ds = ts.Dataset.open(demo_dir)
    request = ts.TableRequest(("AGEB", "SEX"), statistic="count", groupings=[grouping()])
    table = ts.TableBuilder(ds, ts.Protection(None)).build(request)
    got = table.to_frame()
    band = pd.cut(frame["AGE"], [-1, 29, 59, 200], labels=["young", "middle", "other"])
    want = frame.groupby([band, "SEX"], observed=True).size()
    for (b, s), n in want.items():
        row = got[(got["AGEB"] == b) & (got["SEX"] == s)]
        assert row["n"].item() == n


def test_universe_on_a_custom_grouping(client):
    by_group = post(
        client,
        {"dimensions": ["EDUC"], "universe": {"AGEB": ["young"]}, "groupings": [grouping()]},
    ).json()
    by_codes = post(client, {"dimensions": ["EDUC"], "universe": {"AGE": ages(0, 29)}}).json()
    assert by_group["cells"] == by_codes["cells"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda g: g["groups"][0]["members"].append(999), "unknown category 999 of variable AGE"),
        (lambda g: g["groups"][1]["members"].append(3), "is in groups 'young' and 'middle'"),
        (lambda g: g["groups"][1].update(members=[]), "is empty"),
        (lambda g: g.update(variable="NOPE"), "unknown variable 'NOPE'"),
        (lambda g: g.update(name="AGEGRP"), "already a variable of the catalog"),
        (lambda g: g["groups"][1].update(code="young"), "used twice"),
        (lambda g: g.update(name="1bad"), "is not allowed"),
    ],
)
def test_bad_groupings_give_a_clear_4xx(client, change, message):
    g = grouping()
    change(g)
    r = post(
        client, {"dimensions": [g["name"] if g["name"] != "1bad" else "AGEB"], "groupings": [g]}
    )
    assert 400 <= r.status_code < 500, r.text
    assert message in r.json()["error"]["message"]


def test_limits_are_the_sites_rules(demo_dir, tmp_path):
    with make_client(
        demo_dir, tmp_path, {"max_custom_groups": 2, "max_categories_per_group": 20}
    ) as c:
        many = grouping()
        many["groups"].append({"code": "x", "label": "x", "members": [70]})
        r = post(c, {"dimensions": ["AGEB"], "groupings": [many]})
        assert r.status_code == 400
        assert "define 3 groups; this dataset allows at most 2" in r.json()["error"]["message"]
        r = post(c, {"dimensions": ["AGEB"], "groupings": [grouping()]})
        assert r.status_code == 400
        assert "merges 30 categories; this dataset allows at most 20" in r.text
    with make_client(demo_dir, tmp_path / "off", {"max_custom_groups": 0}) as c:
        r = post(c, {"dimensions": ["AGEB"], "groupings": [grouping()]})
        assert "does not allow custom groupings" in r.json()["error"]["message"]


def test_a_group_a_few_records_away_from_an_answered_one_is_measured_once(demo_dir, tmp_path):
    """Groups 0-29 then 0-30 in one region differ by the region's 30-year-olds: the
    second group is one difference of inner cells (one noisy measurement, left to the
    mechanism, as the cell itself would be); measuring them again is withheld."""
    frame = pd.read_parquet(demo_dir / "microdata.parquet", columns=["AGE", "REGION"])
    few = int(((frame["AGE"] == 30) & (frame["REGION"] == 1)).sum())
    assert 7 <= few < 100
    body = {"dimensions": ["AGEB"], "universe": {"REGION": [1]}, "groupings": [grouping(29)]}
    moved = {**body, "groupings": [grouping(30)]}
    again = {"dimensions": ["SEX"], "universe": {"REGION": [1], "AGE": [30]}}
    # A block of fewer than m records, by its protected count: m = few + 1 withholds it ...
    rules = {"sliver_min_difference": few + 1, "sliver_scope": "key", "min_universe_size": 0}
    with make_client(demo_dir, tmp_path / "a", rules) as c:
        assert post(c, body).status_code == 200
        assert post(c, moved).status_code == 200
        r = post(c, again)
        assert r.status_code == 403, r.text
        assert "fewer than" in r.json()["error"]["message"]
        assert post(c, again, "bob").status_code == 200  # sliver_scope "key": per key
    # ... and m = few - 6 does not: its protected count is beyond any of fewer than m.
    rules = {"sliver_min_difference": few - 6, "min_universe_size": 0}
    with make_client(demo_dir, tmp_path / "b", rules) as c:
        for b in (body, moved, again):
            assert post(c, b).status_code == 200


def test_custom_grouping_values_and_python_api():
    g = CustomGrouping("B", "AGE", (CustomGroup("a", "A", (1, 2)),), other="rest")
    assert g.to_dict()["other"] == "rest"
    with pytest.raises(RequestError, match="has no groups"):
        CustomGrouping("B", "AGE", ())
    with pytest.raises(RequestError, match="groupings must be a list"):
        ts.TableRequest(("AGE",), groupings="AGE")  # type: ignore[arg-type]


def test_cli_group_option(demo_dir):
    from click.testing import CliRunner

    from tablesafe._cli import get_app

    app = get_app()

    spec = "AGEB:AGE:young=0..29;middle=30..59;*=60 and over"
    args = ["table", str(demo_dir), "--rows", "AGEB", "--group", spec, "--format", "json"]
    result = CliRunner().invoke(app, [*args, "--method", "none", "--statistic", "count"])
    assert result.exit_code == 0, result.output
    import json

    doc = json.loads(result.output)
    assert [c["AGEB"] for c in doc["cells"]] == ["young", "middle", "other", "_T"]
    bad = CliRunner().invoke(app, [*args[:-2], "--group", "AGEB:AGE:young"])
    assert bad.exit_code != 0 and "not CODE=MEMBERS" in str(bad.exception)
