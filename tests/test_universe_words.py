"""The universe in words reads one way only (issue 30), whatever the category labels hold.

Labels with a comma, "or", "and", a semicolon or a quote are written in
double quotes; a reader written here from that rule gets every condition
and every label back, for random labels drawn from an alphabet full of
separators, and for the labels of a custom grouping in every format.
"""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from fastapi.testclient import TestClient
from openpyxl import load_workbook

from tablesafe._request import TableRequest
from tablesafe._settings import load_site_config
from tablesafe.catalog._catalog import Catalog
from tablesafe.output._describe import universe_label
from tablesafe.server import create_app

PIECES = ["North", "East", " or ", ",", " and ", ";", '"', "Or", "x", " ", "Andorra", "é"]


def _tokens(text: str, separators: tuple[str, ...]) -> list[str]:
    """``text`` split at any of ``separators`` outside double quotes (doubled quotes inside)."""
    out, here, i, quoted = [], "", 0, False
    while i < len(text):
        if text[i] == '"':
            if quoted and text[i : i + 2] == '""':
                here, i = here + '""', i + 2
                continue
            quoted = not quoted
            here, i = here + '"', i + 1
            continue
        sep = next((s for s in separators if not quoted and text.startswith(s, i)), None)
        if sep is not None:
            out.append(here)
            here, i = "", i + len(sep)
            continue
        here, i = here + text[i], i + 1
    return [*out, here]


def read_universe(text: str) -> list[tuple[str, list[str]]]:
    """(variable label, category labels) of each condition of a universe in words."""
    out = []
    for condition in _tokens(text, ("; ",)):
        variable, _, listed = condition.partition(" is ")
        labels = [
            t[1:-1].replace('""', '"') if t.startswith('"') else t
            for t in _tokens(listed, (", ", " or "))
        ]
        out.append((variable, labels))
    return out


def _catalog(labels: dict[str, list[str]]) -> Catalog:
    variables = [
        {
            "name": name,
            "label": f"Variable {name}",
            "categories": [{"code": i + 1, "label": lab} for i, lab in enumerate(cats)],
        }
        for name, cats in labels.items()
    ]
    return Catalog.from_dict({"dataset": {"record_key": "RKEY"}, "variables": variables})


def test_random_labels_are_read_back(tmp_path):
    rng = np.random.default_rng(30)
    checked = 0
    for _ in range(300):
        labels = {}
        for name in ("A", "B"):
            cats = set()
            while len(cats) < 4:
                parts = rng.choice(len(PIECES), size=int(rng.integers(1, 5)))
                label = "".join(PIECES[p] for p in parts).strip() or "x"
                cats.add(label)
            labels[name] = sorted(cats)
        catalog = _catalog(labels)
        universe = {
            name: sorted(rng.choice(4, size=int(rng.integers(1, 5)), replace=False) + 1)
            for name in labels
        }
        request = TableRequest(
            ("A",), universe={k: [int(c) for c in v] for k, v in universe.items()}
        )
        words = universe_label(request, catalog)
        want = [
            (f"Variable {n}", [labels[n][c - 1] for c in codes]) for n, codes in universe.items()
        ]
        assert read_universe(words) == want, words
        checked += 1
    assert checked == 300


def test_plain_labels_stay_unquoted():
    catalog = _catalog({"A": ["North", "North East", "Oregon", "Andorra"]})
    request = TableRequest(("A",), universe={"A": [1, 2, 3, 4]})
    assert universe_label(request, catalog) == "Variable A is North, North East, Oregon or Andorra"


MARITAL = {
    "name": "MARB",
    "variable": "MARSTAT",
    "label": "Marital status (groups)",
    "groups": [
        {"code": "m", "label": "Married or in a civil partnership", "members": [2]},
        {"code": "d", "label": 'Divorced, widowed or "separated"', "members": [3, 4]},
    ],
    "other": "Single",
}
WORDS = 'Marital status (groups) is "Married or in a civil partnership" or "Divorced, widowed or ""separated"""'


@pytest.fixture(scope="module")
def site(demo_dir, tmp_path_factory):
    config = load_site_config(
        data={
            "base": str(tmp_path_factory.mktemp("site")),
            "server": {"audit_db": "audit.sqlite"},
            "datasets": [{"name": "demo", "path": str(demo_dir), "protection": {"method": "none"}}],
        }
    )
    with TestClient(create_app(config)) as client:
        yield client


def test_every_format_writes_the_quoted_labels(site):
    body = {"dimensions": ["SEX"], "universe": {"MARB": ["m", "d"]}, "groupings": [MARITAL]}
    url = "/api/datasets/demo/tables"
    meta = site.post(url, json=body).json()["meta"]
    assert meta["universe_label"] == WORDS
    assert read_universe(WORDS) == [
        ("Marital status (groups)", [g["label"] for g in MARITAL["groups"]])
    ]
    line = f"Universe: {WORDS}."
    assert f"\n# {line}\n" in site.post(f"{url}?format=csv", json=body).text
    assert json.loads(site.post(f"{url}?format=jsonstat", json=body).text)["note"][0] == line
    rows = list(csv.DictReader(io.StringIO(site.post(f"{url}?format=sdmx-csv", json=body).text)))
    assert rows[0]["COMMENT_DSET"].startswith(f"{line} ")
    book = load_workbook(io.BytesIO(site.post(f"{url}?format=xlsx", json=body).content))
    about = {r[0]: r[1] for r in book["about"].iter_rows(values_only=True)}
    assert about["Universe"] == WORDS
    assert book.worksheets[0]["A2"].value == line.rstrip(".")
