"""Every TOML file tablesafe writes reads back as written, whatever its text (issue 38, item 10).

Catalogs (``Catalog.to_toml``, the demo's), ``catalog init``'s drafts and ``api-key new``'s
``[[keys]]`` entries are written by tomli-w: labels holding newlines, quotes, backslashes,
control characters or any Unicode read back unchanged.
"""

from __future__ import annotations

import tomllib

import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tablesafe import Dataset
from tablesafe._cli import get_app
from tablesafe._errors import UserError
from tablesafe.catalog._catalog import Catalog, toml_value
from tablesafe.prepare._catalog_init import init_catalog

HOSTILE = [
    "two\nlines",
    'a "quoted" label',
    "back\\slash \\n not a newline",
    "tab\tand\rreturn",
    "Ünïcödé — 日本語 🙂",
    "bell\x07 and delete\x7f",
    "''' and \"\"\"",
    "# not a comment",
    "]",
]

#: Any text a TOML string can hold (all of Unicode but the surrogates).
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)


def _catalog(labels: list[str]) -> dict:
    """A catalog whose every label (and the title, a citation, codes) is one of ``labels``."""
    first, *rest = labels
    return {
        "dataset": {"title": first, "citation": labels[-1], "record_key": "RKEY"},
        "variables": [
            {
                "name": "A",
                "label": first,
                "categories": [{"code": i + 1, "label": lab} for i, lab in enumerate(labels)],
                "groupings": [
                    {
                        "name": "A_G",
                        "label": labels[-1],
                        "groups": [
                            {"code": "g", "label": first, "members": [1]},
                            {
                                "code": "h",
                                "label": rest[0],
                                "members": list(range(2, len(labels) + 1)),
                            },
                        ],
                    }
                ],
            },
            {
                "name": "B",
                "label": "B",
                # Codes are text too (bracketed: a code has no outer spaces).
                "categories": [{"code": f"<{lab}>", "label": lab} for lab in dict.fromkeys(labels)],
            },
        ],
        "magnitudes": [{"name": "X", "label": first, "unit": labels[-1], "lower": 0, "upper": 9}],
    }


def _round_trip(raw: dict) -> None:
    catalog = Catalog.from_dict(raw)
    text = catalog.to_toml()
    again = Catalog.from_dict(tomllib.loads(text))
    assert again.to_dict() == catalog.to_dict()
    assert again.title == raw["dataset"]["title"]
    labels = [c["label"] for c in raw["variables"][0]["categories"]]
    assert [c.label for c in again.variable("A").categories] == labels


def test_hostile_labels_read_back():
    _round_trip(_catalog(HOSTILE))


@settings(max_examples=60, deadline=None)
@given(st.lists(TEXT, min_size=2, max_size=5))
def test_any_text_reads_back(labels):
    _round_trip(_catalog(labels))


@given(TEXT)
def test_a_value_on_a_line_reads_back(text):
    assert tomllib.loads(f"v = {toml_value(text)}")["v"] == text
    assert tomllib.loads(f"v = {toml_value([text, 1, 2.5])}")["v"] == [text, 1, 2.5]


def test_catalog_init_with_hostile_codes_and_file_name(tmp_path):
    codes = [c for c in HOSTILE if "\r" not in c]  # CSV itself turns \r\n into \n
    frame = pd.DataFrame({"A": codes * 10, "B": list(range(len(codes))) * 10})
    source = tmp_path / "odd # name\nhere.csv"
    frame.to_csv(source, index=False)
    init_catalog(source, tmp_path / "ds")
    text = (tmp_path / "ds" / "catalog.toml").read_text(encoding="utf-8")
    tomllib.loads(text)  # valid TOML, comments and all
    catalog = Dataset.open(tmp_path / "ds").catalog
    assert {c.label for c in catalog.variable("A").categories} == set(codes)
    assert {c.code for c in catalog.variable("A").categories} == set(codes)


def test_api_key_entry_reads_back_and_a_bad_id_is_refused():
    runner = CliRunner()
    made = runner.invoke(get_app(), ["api-key", "new", "a.b-c_1", "--expires", "2027-01-01"])
    assert made.exit_code == 0, made.output
    entry = tomllib.loads(made.output.split("\n", 1)[1])["keys"][0]
    assert entry["id"] == "a.b-c_1" and str(entry["expires"]) == "2027-01-01"
    for bad in ('we"ird', "two\nlines", "x" * 41):
        refused = runner.invoke(get_app(), ["api-key", "new", bad])
        assert isinstance(refused.exception, UserError), bad
        assert "is not allowed" in str(refused.exception)
        assert "key (shown once" not in refused.output


def test_a_table_is_not_a_value():
    with pytest.raises(TypeError):
        toml_value({"a": 1})
