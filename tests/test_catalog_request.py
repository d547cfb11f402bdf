"""Catalog loading and TableRequest validation: every error names what is wrong and what is allowed."""

from __future__ import annotations

import copy

import pytest

from tablesafe._errors import CatalogError, FormatError, RequestError
from tablesafe._request import TableRequest
from tablesafe.catalog._catalog import Catalog
from tsdata import RANDOM_CATALOG


@pytest.fixture
def catalog() -> Catalog:
    return Catalog.from_dict(RANDOM_CATALOG)


def test_catalog_round_trips_through_toml(tmp_path, catalog):
    path = tmp_path / "catalog.toml"
    path.write_text(catalog.to_toml())
    again = Catalog.from_toml(path)
    assert again.variables == catalog.variables
    assert again.replicates == catalog.replicates
    assert again.variable("CG").members == ((0, 1, 2, 3), (4, 5, 6), (7, 8, 9))


def test_replicate_coefficient_defaults_by_method():
    raw = copy.deepcopy(RANDOM_CATALOG)
    assert Catalog.from_dict(raw).replicates.coefficient == pytest.approx(3 / 4)
    raw["dataset"]["replicate_method"] = "BRR"
    raw["dataset"]["fay"] = 0.5
    assert Catalog.from_dict(raw).replicates.coefficient == pytest.approx(1 / (4 * 0.25))


def _broken(mutate) -> dict:
    raw = copy.deepcopy(RANDOM_CATALOG)
    mutate(raw)
    return raw


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r["variables"][0]["categories"].append({"code": 1}), "duplicate code"),
        (lambda r: r["variables"].append(copy.deepcopy(r["variables"][0])), "used twice"),
        (lambda r: r["variables"][0].update(name="1bad"), "not allowed"),
        (lambda r: r["variables"][0].update(categories=[]), "non-empty list"),
        (lambda r: r["variables"][0]["categories"].append({"code": "z"}), "not a mix"),
        (lambda r: r.update(structural_zeros=[{"NOPE": [1]}]), "unknown variable 'NOPE'"),
        (lambda r: r.update(structural_zeros=[{"A": [9]}]), "unknown category 9 of A"),
        (lambda r: r["dataset"].update(replicate_method="XYZ"), "allowed: JK1, JK2, BRR"),
        (lambda r: r["dataset"].update(weight="A"), "weight or a replicate weight"),
        (lambda r: r["dataset"].update(colour="red"), "unknown key"),
        (lambda r: r["variables"][2]["groupings"][0]["groups"].pop(), "are in no group"),
        (
            lambda r: r["variables"][2]["groupings"][0]["groups"][0]["members"].append(5),
            "groups must not overlap",
        ),
        (
            lambda r: r["variables"][2]["groupings"][0]["groups"][0]["members"].append(99),
            "not a category of C",
        ),
    ],
)
def test_invalid_catalogs_are_refused(mutate, message):
    with pytest.raises(CatalogError, match=message):
        Catalog.from_dict(_broken(mutate))


def test_malformed_toml_is_a_format_error(tmp_path):
    path = tmp_path / "catalog.toml"
    path.write_text("[dataset\nrecord_key = ")
    with pytest.raises(FormatError, match="not valid TOML"):
        Catalog.from_toml(path)


def test_missing_catalog_file(tmp_path):
    with pytest.raises(CatalogError, match="does not exist"):
        Catalog.from_toml(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dimensions": ()}, "1 to 4 dimension"),
        ({"dimensions": ("A", "B", "C", "D", "E")}, "at most 4 dimensions"),
        ({"dimensions": ("A", "A")}, "given twice"),
        ({"dimensions": ("A",), "universe": {"B": []}}, "empty category list"),
        ({"dimensions": ("A",), "statistic": "mean"}, "allowed: count, weighted, both"),
        ({"dimensions": ("A",), "margins": "some"}, "allowed: all, none, total"),
        ({"dimensions": ("A", "B"), "margins": (("C",),)}, "not a dimension"),
    ],
)
def test_request_structure_errors(kwargs, message):
    with pytest.raises(RequestError, match=message):
        TableRequest(**kwargs)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (TableRequest(("A", "NOPE")), r"unknown variable 'NOPE'; available: A, B, C, CG, D, E"),
        (
            TableRequest(("A",), universe={"B": ["q"]}),
            r"unknown category 'q' of variable B; allowed: 'x'",
        ),
        (
            TableRequest(("A",), universe={"A": ["7"]}),
            r"unknown category 7 of variable A; allowed: 1, 2, 3, 4",
        ),
        (TableRequest(("A",), universe={"ZZ": [1]}), "unknown variable 'ZZ'"),
        (TableRequest(("C", "CG")), "classify the same variable"),
    ],
)
def test_request_catalog_errors(catalog, request_, message):
    with pytest.raises(RequestError, match=message):
        request_.bind(catalog)


def test_text_codes_from_the_command_line_are_converted(catalog):
    plan = TableRequest(("B",), universe={"A": ["1", " 3"], "CG": ["hi"]}).bind(catalog)
    assert dict(plan.universe) == {"A": (1, 3), "C": (7, 8, 9)}


def test_universe_conditions_on_a_variable_and_its_grouping_intersect(catalog):
    plan = TableRequest(("A",), universe={"CG": ["lo"], "C": [2, 3, 4]}).bind(catalog)
    assert dict(plan.universe) == {"C": (2, 3)}


def test_dimension_limit_of_the_data_owner(catalog):
    with pytest.raises(RequestError, match="at most 2 dimensions"):
        TableRequest(("A", "B", "D")).bind(catalog, max_dimensions=2)


def test_requests_are_frozen_values(catalog):
    req = TableRequest(["A", "B"], universe={"D": [1]})
    assert req.dimensions == ("A", "B")
    with pytest.raises(TypeError):
        req.universe["E"] = (10,)  # type: ignore[index]
    wider = req.with_universe(E=[10])
    assert "E" not in req.universe and wider.universe["E"] == (10,)
    assert hash(req) == hash(TableRequest(("A", "B"), universe={"D": [1]}))


def test_grouping_sets_are_inner_first(catalog):
    assert TableRequest(("A", "B")).grouping_sets() == ((0, 1), (0,), (1,), ())
    assert TableRequest(("A", "B"), margins="total").grouping_sets() == ((0, 1), ())
