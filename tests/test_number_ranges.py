"""Every owner-facing number has a documented range, checked before any work (issue 38, item 9).

The ranges are ``tablesafe._protection_limits.RANGES``: every numeric option of every
command, every numeric setting of the site configuration and the ptable constructors take
theirs from it, docs/cli.md and docs/site-config.md list them, and absurd values (1e308,
10**20, NaN, text) are a one-line error naming the number and its range. No value here
is large enough to cost memory or time before the check: the checks run first.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import annotated_types
import click
import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from tablesafe import ParameterError, Protection
from tablesafe._cli import Number, get_app, main
from tablesafe._errors import ConfigError
from tablesafe._protection_limits import RANGES, Range
from tablesafe._rounding import Rounding
from tablesafe._settings import (
    ApiKeySettings,
    EngineSettings,
    MagnitudeSettings,
    MarginalSettings,
    ProtectionSettings,
    RuleSettings,
    ServerSettings,
    StateSettings,
    load_site_config,
)
from tablesafe.mechanisms import destatis, dp_geometric, drop_add_q, pram_shlomo_young
from tablesafe.mechanisms._magnitudes import MagnitudeProtection
from tablesafe.mechanisms._marginals import DPMarginals
from tablesafe.mechanisms._num_ptable import num_ptable
from tablesafe.prepare._demo import write_demo_data

DOCS = Path(__file__).resolve().parent.parent / "docs"
#: Each settings model, its key in RANGES, and where the docs write its section.
MODELS: dict[type[BaseModel], tuple[str, str]] = {
    ServerSettings: ("server", "[server]"),
    StateSettings: ("state", "[state]"),
    EngineSettings: ("engine", "[engine]"),
    ProtectionSettings: ("protection", "[datasets.protection]"),
    MarginalSettings: ("marginals", "[datasets.protection.marginals]"),
    RuleSettings: ("rules", "[datasets.rules]"),
    MagnitudeSettings: ("magnitudes", "[datasets.magnitudes]"),
    ApiKeySettings: ("keys", "[[keys]]"),
}
#: Values no range holds: too large, too small, not finite, not a number.
ABSURD = ["1e308", "-1e308", "99999999999999999999", "-1", "nan", "inf", "abc"]


def _options() -> list[tuple[str, click.Option]]:
    """Every option of every command: (command path, option)."""
    out: list[tuple[str, click.Option]] = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        out.extend((" ".join(path), p) for p in cmd.params if isinstance(p, click.Option))
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(click.Context(cmd)):
                sub = cmd.get_command(click.Context(cmd), name)
                assert sub is not None
                walk(sub, [*path, name])

    walk(get_app(), [])
    return out


NUMERIC = [(path, o) for path, o in _options() if isinstance(o.type, Number)]


def _numeric_fields() -> list[tuple[type[BaseModel], str, str]]:
    """(model, field, RANGES key) of every int or float setting."""
    out = []
    for model, (section, _) in MODELS.items():
        for name, info in model.model_fields.items():
            if typing.get_origin(info.annotation) is list:
                continue  # quantile_move: two shares, checked together (docs say so)
            kinds = typing.get_args(info.annotation) or (info.annotation,)
            if int in kinds or float in kinds:
                out.append((model, name, f"{section}.{name}"))
    return out


def test_every_numeric_option_takes_its_range():
    plain = (click.types.IntParamType, click.types.FloatParamType)
    unchecked = [(path, o.opts[0]) for path, o in _options() if isinstance(o.type, plain)]
    assert not unchecked, f"numeric options without a range: {unchecked}"
    assert len(NUMERIC) > 70


def test_every_numeric_setting_takes_its_range():
    fields = _numeric_fields()
    assert len(fields) > 50
    for model, name, key in fields:
        assert key in RANGES, f"give {key} a range in _protection_limits.RANGES (and the docs)"
        bounds = {
            k: v
            for m in model.model_fields[name].metadata
            if isinstance(
                m, annotated_types.Gt | annotated_types.Ge | annotated_types.Lt | annotated_types.Le
            )
            for k, v in dataclasses.asdict(m).items()
        }
        assert bounds == RANGES[key].field(), key


def test_the_docs_list_every_range():
    cli = (DOCS / "cli.md").read_text()
    for path, option in NUMERIC:
        row = re.search(rf"^\| `{re.escape(option.opts[0])}` \| ([^|]*) \| ([^|]*) \|$", cli, re.M)
        rows = re.findall(
            rf"^\| `{re.escape(option.opts[0])}` \| ([^|]*) \| ([^|]*) \|$", cli, re.M
        )
        assert row is not None, option.opts[0]
        assert any(
            path in [c.strip() for c in commands.split(",")]
            and words.strip() == option.type.range.words()
            for commands, words in rows
        ), (path, option.opts[0])
    site = (DOCS / "site-config.md").read_text()
    for model, name, key in _numeric_fields():
        section = MODELS[model][1]
        assert f"| `{section} {name}` | {RANGES[key].words()} |" in site, key


@pytest.mark.parametrize(("path", "option"), NUMERIC, ids=[f"{p} {o.opts[0]}" for p, o in NUMERIC])
def test_absurd_options_are_refused_before_any_work(path, option):
    runner = CliRunner()
    words = option.type.range.words()
    for value in ABSURD:
        if option.type.range.holds(value):  # pragma: no cover - no range holds these
            continue
        # No other argument: the option is read, and refused, before the command runs.
        result = runner.invoke(get_app(), [*path.split(), option.opts[0], value])
        assert isinstance(result.exception, ParameterError), (path, option.opts[0], value)
        assert str(result.exception) == f"{option.opts[0]} must be {words}, not {value}"


@pytest.mark.parametrize(
    "args",
    [
        ["table", "DATA", "--rows", "REGION", "--method", "dp", "--epsilon", "1000"],
        ["table", "DATA", "--rows", "REGION", "--method", "dp", "--epsilon", "1e308"],
        ["table", "DATA", "--rows", "REGION", "--method", "dp", "--cap", "1e20"],
        ["table", "DATA", "--rows", "REGION", "--method", "dp", "--cap", "1000000"],
        ["table", "DATA", "--rows", "REGION", "--max-deviation", "1000"],
        ["table", "DATA", "--rows", "REGION", "--rounding", "1e-300"],
        ["demo-data", "OUT", "--records", "99999999999999"],
        ["evaluate", "DATA", "--table", "REGION", "--epsilon", "1,1000"],
        ["ptable", "q", "--out", "OUT", "--rate", "0.000001", "--cap", "1000"],
    ],
)
def test_the_issues_cases_are_one_line_errors(args, demo_dir, tmp_path, capsys):
    where = {"DATA": str(demo_dir), "OUT": str(tmp_path / "out")}
    with pytest.raises(SystemExit) as exit_:
        main([where.get(a, a) for a in args])
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("error: ") and "must be" in captured.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("model", "name", "key"), _numeric_fields())
def test_absurd_settings_are_refused_when_loaded(model, name, key, demo_dir):
    section = MODELS[model][0]
    for value in (1e308, -1e308, 10**30, float("nan")):
        dataset: dict[str, typing.Any] = {"name": "d", "path": str(demo_dir)}
        data: dict[str, typing.Any] = {"datasets": [dataset]}
        if section in ("protection", "rules", "magnitudes"):
            dataset[section] = {name: value}
        elif section == "marginals":
            dataset["protection"] = {section: {name: value}}
        elif section == "keys":
            data["keys"] = [{"id": "k", "hash": "sha256:" + "0" * 64, name: value}]
        else:
            data[section] = {name: value}
        with pytest.raises(ConfigError) as info:
            load_site_config(data=data)
        assert f"{name}: must be {RANGES[key].words()}, not " in str(info.value), key


@pytest.mark.parametrize(
    "build",
    [
        lambda: dp_geometric(1000),
        lambda: dp_geometric(1e308),
        lambda: dp_geometric(1.0, cap=10**6),
        lambda: dp_geometric(1.0, sensitivity=float("inf")),
        lambda: drop_add_q(rate=1e-300),
        lambda: drop_add_q(rate=0.01, cap=1000),
        lambda: pram_shlomo_young(2.0, cap=10**6),
        lambda: destatis(1000, 1.0),
        lambda: destatis(3, 1e308),
        lambda: destatis(3, 1.0, js=10**9),
        lambda: destatis(3, 1.0, pstay=1.5),
        lambda: num_ptable(1000, 1.0),
        lambda: Protection(None, weight_noise=1e308),
        lambda: Protection(None, se_min_count=10**30),
        lambda: MagnitudeProtection(epsilon=1e308),
        lambda: MagnitudeProtection(quantile_window=10**9),
        lambda: DPMarginals(4.0, delta=1e308),
        lambda: DPMarginals(4.0, iterations=10**30),
        lambda: Rounding.parse("1e308").check_owner(),
        lambda: Rounding.parse("99sf"),
        lambda: write_demo_data(Path("never-written"), 99_999_999_999_999),
    ],
)
def test_constructors_refuse_absurd_numbers(build):
    with pytest.raises(ParameterError, match="must be"):
        build()
    assert not Path("never-written").exists()


def test_range_words_and_edges():
    assert Range(0, 50, low_open=True).words() == "a number greater than 0 and at most 50"
    assert Range(1, 1000, integer=True).words() == "a whole number from 1 to 1,000"
    assert Range(1e-9, 1e12).words() == "a number from 0.000000001 to 1,000,000,000,000"
    cap = RANGES["protection.cap"]
    assert cap.holds(1) and cap.holds(1000) and not cap.holds(1001) and not cap.holds(0)
    assert not cap.holds(7.0) and not cap.holds(True) and not cap.holds(10**400)
    eps = RANGES["protection.epsilon"]
    assert not eps.holds(0) and eps.holds(50) and not eps.holds(float("nan"))
