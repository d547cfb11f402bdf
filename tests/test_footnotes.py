"""Footnotes and flags: every published form of a table says what was done to it."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from tablesafe._catalog import Catalog
from tablesafe._errors import CatalogError
from tablesafe._footnotes import footnote_lines
from tablesafe._settings import load_site_config
from tablesafe.server import create_app

CKM = {"method": "ckm", "max_deviation": 3, "variance": 1.0, "seeds": "cellkey"}
BODY = {"dimensions": ["AGEGRP", "SEX"], "universe": {"REGION": [1, 2]}, "statistic": "both"}


def make_client(demo_dir, tmp_path, protection, rules=None):
    site = load_site_config(
        data={
            "base": str(tmp_path),
            "server": {"audit_db": "audit.sqlite"},
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": protection,
                    "rules": {
                        "min_universe_size": 20,
                        "min_cell_size": 3,
                        "small_cell_action": "show_less_than",
                        **(rules or {}),
                    },
                }
            ],
        }
    )
    return TestClient(create_app(site))


@pytest.fixture
def ckm_client(demo_dir, tmp_path):
    with make_client(demo_dir, tmp_path, CKM) as c:
        yield c


def test_json_meta_states_the_protection_flags_and_citation(ckm_client, demo_dir):
    doc = ckm_client.post("/api/datasets/demo/tables", json=BODY).json()
    notes = doc["meta"]["footnotes"]
    text = " ".join(notes["statement"])
    assert "cell-key method" in text
    assert "changed slightly" in text and "deliberate" in text
    assert "add up" in text  # totals and additivity
    assert "rounded to whole units" in text  # the site's rounding of weighted figures
    assert 'shown as "<3"' in text  # the small-cell rule
    citation = Catalog.from_toml(demo_dir / "catalog.toml").citation
    assert citation and notes["citation"] == citation and f"Source: {citation}" in text
    assert set(notes["flags"]) == {"structural_zero", "suppressed"}
    # Every flag the legend explains is a column of the cells, and no other flag is.
    assert {"structural_zero", "suppressed"} <= set(doc["cells"][0])
    assert "perturbed" not in doc["cells"][0] and "adjusted" not in doc["cells"][0]


def test_footnotes_reveal_nothing_about_the_cells(ckm_client):
    """The statement depends on the settings and the request's form, never on the data."""
    a = ckm_client.post("/api/datasets/demo/tables", json=BODY).json()
    other = {**BODY, "dimensions": ["EDUC", "TENURE"], "universe": {"REGION": [4]}}
    b = ckm_client.post("/api/datasets/demo/tables", json=other).json()
    assert a["meta"]["footnotes"] == b["meta"]["footnotes"]
    text = json.dumps(a["meta"]["footnotes"])
    for key in ("RKEY", "secret", "seed", "cell_key"):
        assert key not in text
    # No published number (count or weighted figure) appears in the statement.
    numbers = {str(c[s]) for c in a["cells"] for s in ("n", "weighted") if c[s] is not None}
    words = set(text.replace('"', " ").replace(",", " ").replace(".", " ").split())
    assert not {n for n in numbers if len(n) > 2} & words


def test_csv_ends_with_the_footnotes_and_the_cells_read_back(ckm_client):
    doc = ckm_client.post("/api/datasets/demo/tables", json=BODY).json()
    text = ckm_client.post("/api/datasets/demo/tables?format=csv", json=BODY).text
    plain = ckm_client.post("/api/datasets/demo/tables?format=csv&footnotes=false", json=BODY).text
    assert text.startswith(plain) and "#" not in plain
    tail = text[len(plain) :].splitlines()
    assert tail[0] == ""
    assert [t.removeprefix("# ") for t in tail[1:]] == footnote_lines(doc["meta"]["footnotes"])
    cells = pd.read_csv(io.StringIO(text), comment="#")
    pd.testing.assert_frame_equal(cells, pd.read_csv(io.StringIO(plain)))
    assert cells["n"].tolist() == [c["n"] for c in doc["cells"]]


def test_xlsx_about_sheet_starts_with_the_footnotes(ckm_client):
    doc = ckm_client.post("/api/datasets/demo/tables", json=BODY).json()
    raw = ckm_client.post("/api/datasets/demo/tables?format=xlsx", json=BODY).content
    about = pd.read_excel(io.BytesIO(raw), sheet_name="about")
    lines = footnote_lines(doc["meta"]["footnotes"])
    notes = about.loc[about["key"] == "note", "value"].tolist()
    assert notes == lines and about["key"].tolist()[: len(lines)] == ["note"] * len(lines)
    assert "mechanism" in about["key"].tolist()


def test_unprotected_tables_say_so(demo_dir, tmp_path):
    with make_client(demo_dir, tmp_path, {"method": "none"}, {"min_cell_size": 0}) as c:
        notes = c.post("/api/datasets/demo/tables", json=BODY).json()["meta"]["footnotes"]
    text = " ".join(notes["statement"])
    assert "no protection" in text and "changed slightly" not in text
    assert set(notes["flags"]) == {"structural_zero"}  # no small-cell rule, no such flag


def test_independent_additivity_warns_that_totals_may_not_add_up(demo_dir, tmp_path):
    with make_client(demo_dir, tmp_path, {**CKM, "additivity": "independent"}) as c:
        notes = c.post("/api/datasets/demo/tables", json=BODY).json()["meta"]["footnotes"]
    assert any("may not equal the sum of their cells" in s for s in notes["statement"])


def test_catalog_citation_round_trips_and_is_checked():
    raw = {
        "dataset": {"title": "T", "citation": "Office (2026), Survey [data set]"},
        "variables": [{"name": "A", "categories": [{"code": 1}]}],
    }
    cat = Catalog.from_dict(raw)
    assert cat.citation == "Office (2026), Survey [data set]"
    import tomllib

    assert Catalog.from_dict(tomllib.loads(cat.to_toml())).citation == cat.citation
    with pytest.raises(CatalogError, match="citation must be a string"):
        Catalog.from_dict({**raw, "dataset": {"citation": 3}})
