"""Options as StrEnums (issue 27): each defined once, texts accepted, members held, texts published.

Every option of the protection, the request and the site is one
``enum.StrEnum`` in the module that owns the decision. These tests check
that the settings, the value objects and the mechanisms share that one
class, that each still takes the option's text (a member equals its text),
that a wrong value is the typed error naming it and every allowed value,
and that no member reaches what is published (a member's repr names its
class, so a repr, a container's text or a hash input holding one would
change bytes).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tablesafe._errors import (
    CatalogError,
    DataError,
    ParameterError,
    RequestError,
    UserError,
    choice,
)
from tablesafe._protection import Protection
from tablesafe._protection_limits import CHOICES, Additivity, ProtectionMethod
from tablesafe._request import Margins, Percent, Statistic, TableRequest
from tablesafe._seeds import SeedScheme
from tablesafe._settings import (
    AuditFailure,
    EmbeddedWorker,
    EngineKind,
    EngineSettings,
    MagnitudeSettings,
    ProtectionSettings,
    RuleSettings,
    ServerSettings,
    SliverScope,
    SmallCellAction,
    UnreliableAction,
)
from tablesafe.catalog._catalog import REPLICATE_METHODS, Catalog, ReplicateMethod
from tablesafe.catalog._dataset import DataFormat, Dataset
from tablesafe.catalog._units import Unit
from tablesafe.mechanisms import cyclic_perturb, destatis, heer_bootstrap
from tablesafe.mechanisms._cyclic import Likelihood, SkipRule, cyclic_posterior
from tablesafe.mechanisms._magnitudes import MagnitudeMethod, MagnitudeProtection, SensitiveAction
from tablesafe.mechanisms._resampling import Resampling
from tablesafe.ptable._io import ptable_csv
from tablesafe.ptable._ptable import Layout, PTable, Selector
from tablesafe.service._bodies import TableBody

SECRET = b"0123456789abcdef0123456789abcdef"

#: Every option: its enum and its texts, in the order messages list them.
OPTIONS: dict[type[enum.StrEnum], tuple[str, ...]] = {
    SeedScheme: ("cellkey", "keyed", "dynamic"),
    ProtectionMethod: ("ckm", "dp", "pram", "q", "q-records", "ptable", "dp-marginals", "none"),
    Additivity: ("aggregate", "independent", "ipf"),
    MagnitudeMethod: ("ckm", "dp", "none"),
    SensitiveAction: ("flag", "suppress"),
    Statistic: ("count", "weighted", "both"),
    Margins: ("all", "none", "total"),
    Percent: ("row", "column", "total"),
    Selector: ("value", "residue", "loop"),
    Layout: ("destatis", "abs"),
    SkipRule: ("zero", "negative"),
    Likelihood: ("exact", "slides"),
    EngineKind: ("duckdb", "memory", "spark"),
    SmallCellAction: ("suppress", "show_less_than"),
    UnreliableAction: ("np", "flag"),
    SliverScope: ("dataset", "key"),
    AuditFailure: ("refuse", "answer"),
    EmbeddedWorker: ("auto", "on", "off"),
    DataFormat: ("parquet", "csv"),
    ReplicateMethod: ("JK1", "JK2", "BRR", "bootstrap"),
    Resampling: ("bootstrap", "binomial"),
    Unit: ("person", "family", "household", "dwelling"),
}


@pytest.mark.parametrize("options", list(OPTIONS), ids=lambda e: e.__name__)
def test_each_option_is_a_strenum_whose_members_equal_their_texts(options):
    texts = OPTIONS[options]
    assert [m.value for m in options] == list(texts)
    for member, text in zip(options, texts, strict=True):
        assert member == text and hash(member) == hash(text)
        assert str(member) == f"{member}" == text
        assert json.dumps(member) == json.dumps(text)


# -- one definition, shared ------------------------------------------------------------


def _field_type(model: Any, name: str) -> Any:
    return model.model_fields[name].annotation


def _hint(cls: type, name: str) -> Any:
    return typing.get_type_hints(cls)[name]


def test_settings_and_value_objects_share_one_class_per_option():
    assert _field_type(ProtectionSettings, "method") is ProtectionMethod
    assert _field_type(ProtectionSettings, "seeds") is SeedScheme is _hint(Protection, "seeds")
    assert _field_type(ProtectionSettings, "additivity") is Additivity
    assert _hint(Protection, "additivity") is Additivity
    assert _field_type(MagnitudeSettings, "method") is MagnitudeMethod
    assert _hint(MagnitudeProtection, "method") is MagnitudeMethod
    assert _field_type(MagnitudeSettings, "sensitive_action") is SensitiveAction
    assert _hint(MagnitudeProtection, "action") is SensitiveAction
    assert _field_type(EngineSettings, "kind") is EngineKind
    assert _field_type(RuleSettings, "small_cell_action") is SmallCellAction
    assert _field_type(RuleSettings, "sliver_scope") is SliverScope
    assert _field_type(RuleSettings, "unreliable_action") is UnreliableAction
    assert _field_type(ServerSettings, "audit_failure") is AuditFailure
    assert _field_type(ServerSettings, "embedded_worker") is EmbeddedWorker
    assert _hint(TableRequest, "percentages") == tuple[Percent, ...]
    assert _hint(PTable, "selector") is Selector
    assert _hint(Dataset, "format") is DataFormat
    # The command line's pydantic-free check and the replicate tool use the same members.
    assert {
        "method": tuple(ProtectionMethod),
        "seeds": tuple(SeedScheme),
        "additivity": tuple(Additivity),
    } == CHOICES
    assert tuple(ReplicateMethod) == REPLICATE_METHODS
    from tablesafe.prepare import _replicates

    assert _replicates.Method is ReplicateMethod


def test_settings_defaults_are_members():
    # pydantic does not validate defaults: a text default would stay a plain str.
    models = (ProtectionSettings, MagnitudeSettings, EngineSettings, RuleSettings, ServerSettings)
    for model in models:
        for name, f in model.model_fields.items():
            if isinstance(f.annotation, type) and issubclass(f.annotation, enum.StrEnum):
                assert type(f.default) is f.annotation, (model.__name__, name)


# -- texts in, members held ---------------------------------------------------------------


def test_texts_are_accepted_and_held_as_members():
    prot = Protection(destatis(3, 1.0), seeds="keyed", secret=SECRET, additivity="ipf")
    assert prot.seeds is SeedScheme.KEYED and prot.additivity is Additivity.IPF
    request = TableRequest(("A",), statistic="count,sum:X", margins="total")
    assert request.statistic is Statistic.COUNT and request.magnitudes == ("sum:X",)
    assert request.margins is Margins.TOTAL
    assert TableRequest(("A", "B"), margins=[["B"]]).margins == (("B",),)
    mags = MagnitudeProtection(method="dp", action="suppress")
    assert mags.method is MagnitudeMethod.DP and mags.action is SensitiveAction.SUPPRESS
    settings = ProtectionSettings(method="q-records", seeds="keyed", secret_env="S")
    assert settings.method is ProtectionMethod.Q_RECORDS and settings.seeds is SeedScheme.KEYED
    assert RuleSettings(small_cell_action="show_less_than").small_cell_action is (
        SmallCellAction.SHOW_LESS_THAN
    )
    table = PTable.from_rows("t", [([0], [1.0]), ([0], [1.0])], selector="loop", loop_start=1)
    assert table.selector is Selector.LOOP
    counts = np.array([[5, 3], [2, 7]])
    assert cyclic_perturb(counts, 0.3, 0.3, skip="negative", rng=1).skip is SkipRule.NEGATIVE
    post = cyclic_posterior(counts, 0.3, 0.3, skip="negative", likelihood="slides")
    assert post.skip is SkipRule.NEGATIVE and post.likelihood is Likelihood.SLIDES
    assert heer_bootstrap(counts, 3.0, rng=1).method is Resampling.BOOTSTRAP
    # Members are accepted where texts are.
    same = Protection(destatis(3, 1.0), seeds=SeedScheme.KEYED, secret=SECRET)
    assert same.seeds is SeedScheme.KEYED
    assert ptable_csv(destatis(3, 1.0), "destatis") == ptable_csv(destatis(3, 1.0))


def _catalog_with(method: object) -> dict[str, Any]:
    return {
        "dataset": {
            "record_key": "KEY",
            "weight": "W",
            "replicate_weights": ["R1", "R2", "R3"],
            "replicate_method": method,
        },
        "variables": [{"name": "A", "categories": [{"code": 1, "label": "one"}]}],
    }


@pytest.mark.parametrize("method", [*REPLICATE_METHODS, "JK1", "BRR"])
def test_a_catalog_holds_its_replicate_method_as_a_member_and_writes_its_text(method):
    catalog = Catalog.from_dict(_catalog_with(str(method)))
    assert catalog.replicates is not None
    assert type(catalog.replicates.method) is ReplicateMethod
    assert f'replicate_method = "{method}"' in catalog.to_toml()
    assert type(catalog.to_dict()["dataset"]["replicate_method"]) is str


# -- a wrong value --------------------------------------------------------------------


WRONG: list[tuple[Callable[[], object], type[UserError], str]] = [
    (lambda: Protection(None, seeds="random"), ParameterError, "seeds"),
    (lambda: Protection(None, additivity="magic"), ParameterError, "additivity"),
    (lambda: MagnitudeProtection(method="exact"), ParameterError, "magnitude method"),
    (lambda: MagnitudeProtection(action="hide"), ParameterError, "action"),
    (lambda: TableRequest(("A",), statistic="mean"), RequestError, "statistic"),
    (lambda: PTable("t", (([0], [1.0]),), selector="row"), ParameterError, "selector"),
    (lambda: ptable_csv(destatis(3, 1.0), "ons"), ParameterError, "layout"),
    (lambda: cyclic_perturb([[1, 2], [3, 4]], 0.3, 0.3, skip="never"), ParameterError, "skip rule"),
    (
        lambda: cyclic_posterior([[1, 2], [3, 4]], 0.3, 0.3, likelihood="x"),
        ParameterError,
        "likelihood",
    ),
]


@pytest.mark.parametrize("make, error, what", WRONG, ids=[w for _, _, w in WRONG])
def test_a_wrong_value_names_itself_and_every_allowed_one(make, error, what):
    with pytest.raises(error) as caught:
        make()
    message = str(caught.value)
    assert message.startswith(f"unknown {what} "), message
    allowed = message.split("; allowed: ", 1)[1]
    options = next(e for e in OPTIONS if allowed == ", ".join(OPTIONS[e]))
    assert all(text in allowed for text in OPTIONS[options])


def test_choice_takes_a_member_or_its_text_and_nothing_else():
    assert choice(SeedScheme, "keyed", "seeds") is SeedScheme.KEYED
    assert choice(SeedScheme, SeedScheme.DYNAMIC, "seeds") is SeedScheme.DYNAMIC
    # Another option's member with the same text is that text.
    assert choice(MagnitudeMethod, ProtectionMethod.DP, "method") is MagnitudeMethod.DP
    for wrong in ("KEYED", " keyed", "", None, 3, ["keyed"]):
        with pytest.raises(RequestError, match=r"^unknown seeds .*; allowed: cellkey, keyed, "):
            choice(SeedScheme, wrong, "seeds", RequestError)


def test_a_wrong_format_or_replicate_method_is_the_typed_error():
    catalog = Catalog.from_dict(_catalog_with("JK1"))
    with pytest.raises(DataError, match="unknown format 'xls'; allowed: parquet, csv"):
        Dataset(catalog, Path("x.xls"), "xls", "x")  # type: ignore[arg-type]
    with pytest.raises(CatalogError, match="allowed: JK1, JK2, BRR, bootstrap"):
        Catalog.from_dict(_catalog_with("jk1"))


# -- nothing published holds a member ----------------------------------------------------


def _leaves(value: object, where: str = "") -> Iterator[tuple[str, object]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield f"{where}[{k!r}]", k
            yield from _leaves(v, f"{where}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{where}[{i}]")
    else:
        yield where, value


def _no_member(value: object) -> list[str]:
    return [w for w, leaf in _leaves(value) if isinstance(leaf, enum.Enum)]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    from tablesafe.prepare._demo import write_demo_data

    return Dataset.open(write_demo_data(tmp_path_factory.mktemp("demo"), 3000, seed=5))


@pytest.mark.parametrize(
    "seeds, additivity, statistic",
    [
        ("cellkey", "aggregate", "both"),
        ("keyed", "ipf", "weighted"),
        ("dynamic", "independent", "count"),
    ],
)
def test_published_metadata_and_reprs_hold_texts_only(demo, seeds, additivity, statistic):
    from tablesafe._builder import TableBuilder

    prot = Protection(destatis(3, 1.0), seeds=seeds, secret=SECRET, additivity=additivity)
    rules = RuleSettings(min_universe_size=0, min_cell_size=3, small_cell_action="show_less_than")
    mags = MagnitudeProtection(method="ckm", action="suppress")
    builder = TableBuilder(demo, prot, magnitudes=mags, rules=rules)
    request = TableRequest(("REGION", "SEX"), statistic=f"{statistic},sum:INCOME", margins="total")
    table = builder.build(request)
    meta = table.public_metadata()
    assert _no_member(meta) == []
    assert _no_member(prot.describe()) == []
    assert meta["statistic"] == statistic and meta["mechanism"]["seeds"] == seeds
    assert meta["magnitudes"]["method"] == "ckm"
    assert meta["magnitudes"]["sensitive_cells"] == "suppress"
    if statistic != "weighted":  # the small-cell rule reads counts
        assert meta["small_cell_rule"]["action"] == "show_less_than"
    assert meta["additivity"].split(" ")[0] == additivity
    # A repr names the options by their texts, as before they were members.
    text = repr(prot)
    assert f"seeds='{seeds}'" in text and f"additivity='{additivity}'" in text
    assert "SeedScheme" not in text and "Additivity" not in text


def test_the_cyclic_and_resampling_publications_hold_texts_only():
    counts = np.array([[5, 3, 4], [2, 7, 1]])
    res = cyclic_perturb(counts, 0.3, 0.3, skip="negative", rng=3)
    assert _no_member(res.published()) == [] and res.published()["skip"] == "negative"
    post = cyclic_posterior(res.table, 0.3, 0.3, skip="negative", likelihood="slides")
    assert _no_member(post.to_dict()) == []
    assert heer_bootstrap(counts, 3.0, rng=1).published()["method"].startswith("Heer's")


def test_the_http_body_validates_margins_by_the_enum_and_keeps_the_schema_inline():
    from fastapi import FastAPI
    from pydantic import ValidationError

    assert TableBody(dimensions=["A"], margins="none").to_request().margins is Margins.NONE
    with pytest.raises(ValidationError, match="Input should be 'all', 'none' or 'total'"):
        TableBody(dimensions=["A"], margins="some")
    app = FastAPI()

    @app.post("/t")
    def _t(body: TableBody) -> None:
        return None

    schemas = app.openapi()["components"]["schemas"]
    assert "Margins" not in schemas
    assert schemas["TableBody"]["properties"]["margins"]["enum"] == list(OPTIONS[Margins])


def test_dataclass_fields_and_settings_hold_members_after_replace():
    request = TableRequest(("A",))
    moved = dataclasses.replace(request, statistic="weighted", margins="none")
    assert moved.statistic is Statistic.WEIGHTED and moved.margins is Margins.NONE
    assert moved == dataclasses.replace(request, statistic=Statistic.WEIGHTED, margins="none")
    assert hash(moved) == hash(dataclasses.replace(moved, statistic="weighted"))
