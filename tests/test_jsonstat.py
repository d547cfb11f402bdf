"""format=jsonstat (issue 30): a JSON-stat 2.0 dataset, valid, read back to the JSON format's cells."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from jsonstat_validator import validate_jsonstat

import tablesafe as ts
from publishing import PROFILES, REQUESTS, client, flagged_status
from tablesafe._protection import Protection
from tablesafe.engines import MemoryEngine
from tablesafe.mechanisms import dp_geometric


@pytest.fixture(scope="module")
def answers(demo_dir, tmp_path_factory):
    """(profile, request number) -> (JSON-stat document text, JSON format document)."""
    out = {}
    with client(demo_dir, tmp_path_factory.mktemp("site")) as c:
        for profile in PROFILES:
            for i, body in enumerate(REQUESTS):
                js = c.post(f"/api/datasets/{profile}/tables?format=jsonstat", json=body)
                doc = c.post(f"/api/datasets/{profile}/tables", json=body)
                assert js.status_code == 200 and doc.status_code == 200, js.text
                assert js.headers["content-type"].startswith("application/json")
                out[profile, i] = (js.text, doc.json())
    return out


def read_jsonstat(doc):
    """A reader written from the spec: (category ids..., statistic id) -> (value, status)."""
    ids, sizes = doc["id"], doc["size"]
    assert math.prod(sizes) == len(doc["value"])
    index = []
    for dim, size in zip(ids, sizes, strict=True):
        cats = doc["dimension"][dim]["category"]["index"]
        if isinstance(cats, dict):  # the object form: id -> position
            cats = sorted(cats, key=cats.__getitem__)
        assert len(cats) == size
        index.append(cats)
    status = doc.get("status", {})
    out = {}
    # Row-major: the last dimension varies fastest.
    for pos, key in enumerate(itertools.product(*index)):
        out[key] = (doc["value"][pos], status.get(str(pos)))
    return out


@pytest.mark.parametrize("profile", list(PROFILES))
def test_valid_and_read_back_to_the_same_cells(answers, profile):
    for i, body in enumerate(REQUESTS):
        text, json_doc = answers[profile, i]
        doc = json.loads(text)
        assert validate_jsonstat(doc)
        dims = json_doc["meta"]["dimensions"]
        assert doc["id"][: len(dims)] == dims == [d for d in body["dimensions"]]
        stat_id = doc["id"][-1]
        assert doc["role"] == {"metric": [stat_id]}
        cube = read_jsonstat(doc)
        stats = doc["dimension"][stat_id]["category"]["index"]
        less_than = PROFILES[profile][2].get("small_cell_action") == "show_less_than"
        seen = set()
        for cell in json_doc["cells"]:
            for s in stats:
                key = (*(str(cell[d]) for d in dims), s)
                value, status = cube[key]
                shown = cell[s]
                assert value == (None if isinstance(shown, str) else shown), (key, value, shown)
                assert status == flagged_status(cell, s, less_than), (key, status)
                seen.add(key)
        # Every other position of the cube is a margin the request did not ask for: null.
        assert all(cube[k] == (None, None) for k in cube.keys() - seen)


def test_the_metric_dimension_states_each_statistics_unit(answers, demo_dir):
    # Issue 38: category.unit (JSON-stat 2.0) for every statistic: what it counts or its
    # variable's unit, its decimals where its rounding is to a base, % after percentages.
    catalog = ts.Dataset.open(demo_dir).catalog
    for text, json_doc in answers.values():
        doc = json.loads(text)
        category = doc["dimension"][doc["id"][-1]]["category"]
        assert set(category["unit"]) == set(category["index"])
        for name, unit in category["unit"].items():
            figures = [c[name] for c in json_doc["cells"] if isinstance(c.get(name), int | float)]
            if "decimals" in unit:
                # Every published figure has at most its decimals.
                assert all(round(v, unit["decimals"]) == v for v in figures), (name, unit)
            if name in ("n", "weighted"):
                assert unit == {"label": "persons" if name == "n" else "persons (weighted)",
                                "decimals": 0}  # fmt: skip
            elif name.startswith(("sum_", "mean_")):
                variable = name.split("_")[1]
                assert unit["label"] == catalog.magnitudes[variable].unit
                assert unit["decimals"] == (2 if name.startswith("mean_") else 0)
    # A percentage's unit: percent, two decimals, the symbol after the figure.
    table = ts.TableBuilder(ts.Dataset.open(demo_dir), Protection(None)).build(
        ts.TableRequest(("SEX", "EDUC"), statistic="weighted,percent:row", replicates=True)
    )
    unit = json.loads(table.render("jsonstat"))["dimension"]["STATISTIC"]["category"]["unit"]
    assert unit["percent_row"] == unit["percent_row_se"] == {
        "label": "percent", "decimals": 2, "symbol": "%", "position": "end",
    }  # fmt: skip
    assert unit["se"] == unit["weighted"]
    assert validate_jsonstat(json.loads(table.render("jsonstat")))


def test_every_flag_has_its_status_somewhere(answers):
    statuses = {
        code
        for (profile, _), (text, _) in answers.items()
        for code in json.loads(text).get("status", {}).values()
    }
    assert {"M", "Q", "<5", "d"} <= statuses


def test_dimensions_labels_totals_hierarchy_and_groupings(answers, demo_dir):
    catalog = ts.Dataset.open(demo_dir).catalog
    doc = json.loads(answers["none", 0][0])
    agegrp = doc["dimension"]["AGEGRP"]
    assert agegrp["label"] == "Age group"
    codes = [str(c.code) for c in catalog.variable("AGEGRP").categories]
    assert agegrp["category"]["index"] == [*codes, "_T"]
    assert agegrp["category"]["label"]["_T"] == "Total"
    assert agegrp["category"]["child"] == {"_T": codes}
    assert doc["label"] == answers["none", 0][1]["meta"]["title"]
    assert doc["note"][0] == "Universe: Region is North or North East."
    # Margins "total": only the grand total, so the totals stay in every dimension.
    zone = json.loads(answers["none", 1][0])["dimension"]["ZONE"]
    assert zone["extension"]["variable"] == "REGION"
    assert zone["extension"]["members"] == {
        c.code: list(m)
        for c, m in zip(
            catalog.variable("ZONE").categories, catalog.variable("ZONE").members, strict=True
        )
    }
    # Margins "none": no total, no child; AGE5 is a level of AGE_TREE below AGEGRP.
    age5 = json.loads(answers["none", 2][0])["dimension"]["AGE5"]
    assert "_T" not in age5["category"]["index"] and "child" not in age5["category"]
    tree = next(h for h in catalog.hierarchies if h.name == "AGE_TREE")
    parents = dict(zip(catalog.variable("AGE5").codes, tree.parents[0], strict=True))
    assert age5["extension"]["hierarchy"]["parent_level"] == "AGEGRP"
    assert age5["extension"]["hierarchy"]["parent"] == parents
    # A custom grouping: the request's labels, its members.
    ageb = json.loads(answers["none", 3][0])["dimension"]["AGEB"]
    assert ageb["label"] == "Age band"
    assert ageb["category"]["label"] == {
        "young": "Under 35",
        "middle": "35 to 64",
        "other": "65 and over",
        "_T": "Total",
    }
    # Members are codes of the microdata's column (AGE): those of age groups 7 and 8.
    agegrp_var = catalog.variable("AGEGRP")
    assert ageb["extension"]["variable"] == "AGE"
    assert ageb["extension"]["members"]["other"] == [
        *agegrp_var.source_codes(7),
        *agegrp_var.source_codes(8),
    ]


def test_status_legend_and_meta_come_from_the_footnotes(answers):
    text, json_doc = answers["lt", 0]
    doc = json.loads(text)
    flags = json_doc["meta"]["footnotes"]["flags"]
    legend = doc["extension"]["status"]
    assert legend["M"] == flags["structural_zero"] and legend["<5"] == flags["suppressed"]
    assert all(f"{k}: {v}" in legend["d"] for k, v in flags.items() if k.startswith("sensitive_"))
    assert doc["extension"]["meta"] == json_doc["meta"]
    assert doc["note"][1:] == json_doc["meta"]["footnotes"]["statement"]


@pytest.mark.filterwarnings("ignore:Shouldn't use this function:DeprecationWarning")
def test_pyjstat_reads_the_same_cells(answers):
    from pyjstat import pyjstat

    text, json_doc = answers["blank", 0]
    frame = pyjstat.Dataset.read(text).write("dataframe", naming="id")
    dims = json_doc["meta"]["dimensions"]
    got = {
        tuple(row[:-1]): row[-1]
        for row in frame.itertuples(index=False, name=None)
        if not (isinstance(row[-1], float) and math.isnan(row[-1]))
    }
    want = {
        (*(str(c[d]) for d in dims), s): c[s]
        for c in json_doc["cells"]
        for s in ("n", "weighted", "mean_INCOME_weighted", "sum_HOURS_weighted")
        if c[s] is not None and not isinstance(c[s], str)
    }
    assert got == pytest.approx(want)


def test_same_bytes_across_restarts_engines_and_requests(answers, demo_dir, tmp_path):
    with client(demo_dir, tmp_path) as c:
        again = c.post("/api/datasets/lt/tables?format=jsonstat", json=REQUESTS[0]).text
    assert again == answers["lt", 0][0]
    dataset = ts.Dataset.open(demo_dir)
    request = ts.TableRequest(("REGION", "SEX"), statistic="both", replicates=True)
    texts = {
        ts.TableBuilder(dataset, Protection(dp_geometric(1.0)), engine=engine)
        .build(request)
        .render("jsonstat")
        for engine in (None, MemoryEngine())
    }
    assert len(texts) == 1
    doc = json.loads(texts.pop())
    assert validate_jsonstat(doc)
    stats = doc["dimension"]["STATISTIC"]["category"]["index"]
    assert stats == ["n", "weighted", "se", "ci_low", "ci_high"]
