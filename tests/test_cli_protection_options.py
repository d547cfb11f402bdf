"""The command line's protection options skip pydantic only where pydantic would agree.

``tablesafe._cli._methods`` checks the options against its own copy of
``ProtectionSettings``'s bounds and choices (so that ``tablesafe table``
need not import pydantic); these tests compare the copy with the model,
field by field, and both paths on a grid of good and bad values.
"""

from __future__ import annotations

import enum
import itertools
import math

import annotated_types
import pytest
from pydantic import ValidationError

from tablesafe._cli import _methods
from tablesafe._cli._methods import (
    _checked,
    protection_from_options,
)
from tablesafe._errors import ParameterError
from tablesafe._protection_limits import BOUNDS as _BOUNDS
from tablesafe._protection_limits import CHOICES as _CHOICES
from tablesafe._protection_limits import INTEGERS as _INTEGERS
from tablesafe._settings import ProtectionSettings

BASE = {
    "method": "ckm",
    "epsilon": 1.0,
    "cap": 7,
    "rate": 0.01,
    "max_deviation": 3,
    "variance": 1.0,
    "js": 0,
    "additivity": "aggregate",
    "weight_noise": 0.5,
    "rounding": "1",
    "se_min_count": 10,
    "seeds": "cellkey",
}


def test_bounds_are_the_models():
    bounds: dict[str, tuple[float, bool, float | None]] = {}
    # dp-marginals' delta is a site setting only: the command line refuses the method.
    site_only = {"delta"}
    for name, field in ProtectionSettings.model_fields.items():
        if name in site_only:
            continue
        low: tuple[float, bool] | None = None
        high = None
        for m in field.metadata:
            if isinstance(m, annotated_types.Gt):
                low = (m.gt, False)
            elif isinstance(m, annotated_types.Ge):
                low = (m.ge, True)
            elif isinstance(m, annotated_types.Le):
                high = m.le
            elif isinstance(m, annotated_types.Lt):  # pragma: no cover - none today
                pytest.fail(f"{name}: an exclusive upper bound the CLI's check does not know")
        if low is not None or high is not None:
            assert low is not None, name
            bounds[name] = (*low, high)
    assert bounds == _BOUNDS
    ints = {n for n in _BOUNDS if ProtectionSettings.model_fields[n].annotation is int}
    assert ints == _INTEGERS
    assert all(
        ProtectionSettings.model_fields[n].annotation is float for n in _BOUNDS.keys() - ints
    )


def test_choices_are_the_models():
    # Each choice is the option's StrEnum, defined once, that the model's field holds.
    for name, allowed in _CHOICES.items():
        options = ProtectionSettings.model_fields[name].annotation
        assert isinstance(options, type) and issubclass(options, enum.StrEnum), name
        assert tuple(options) == allowed, name
        assert allowed and all(isinstance(a, str) for a in allowed), name


def _cases():
    for name, (low, _, high) in _BOUNDS.items():
        top = high if high is not None else low + 5
        for value in (low - 1, low, low + 0.5, top, top + 0.5, math.nan, math.inf, -math.inf):
            kind = type(BASE[name])
            if kind is int and value == value and math.isfinite(value):
                value = int(value) if value == int(value) else value
            yield {**BASE, name: value}
    for name, allowed in _CHOICES.items():
        for value in (*allowed, "other", ""):
            yield {**BASE, name: value}
    for rounding in ("1", "1000", "0.1", "3sf", " 2SF ", "0", "-1", "0sf", "sf", "abc", "nan"):
        yield {**BASE, "rounding": rounding}
    for method, seeds, secret_env, ptable_file in itertools.product(
        ("ckm", "q-records", "ptable"), ("cellkey", "dynamic"), (None, "S"), (None, "", "x.csv")
    ):
        yield {
            **BASE,
            "method": method,
            "seeds": seeds,
            "secret_env": secret_env,
            "ptable_file": ptable_file,
        }


@pytest.mark.parametrize("options", list(_cases()))
def test_the_fast_check_accepts_exactly_what_the_model_accepts(options):
    options = {k: v for k, v in options.items() if v is not None}
    fast = _checked(options)
    try:
        model = ProtectionSettings.model_validate(options)
    except ValidationError:
        model = None
    assert (fast is None) == (model is None), options
    if fast is not None and model is not None:
        for name in fast.__dataclass_fields__:
            assert getattr(fast, name) == getattr(model, name), name


@pytest.mark.parametrize(
    "kwargs",
    [
        {"method": "ckm"},
        {"method": "ckm", "max_deviation": 2, "variance": 0.5, "additivity": "ipf"},
        {"method": "dp", "epsilon": 0.5, "cap": 5},
        {"method": "q", "rate": 0.05, "cap": 3, "rounding": "3sf", "weight_noise": 0},
        {"method": "pram", "se_min_count": 1},
        {"method": "none"},
        {"method": "q-records", "rate": 0.02},
        {"method": "ckm", "seeds": "dynamic"},
    ],
)
def test_both_paths_give_the_same_protection(kwargs, monkeypatch):
    monkeypatch.setenv("TABLESAFE_SECRET", "a test secret")
    fast = protection_from_options(**kwargs)
    monkeypatch.setattr(_methods, "_checked", lambda options: None)
    slow = protection_from_options(**kwargs)
    assert repr(fast) == repr(slow)
    assert fast.describe() == slow.describe()
    assert fast.secret == slow.secret


def test_bad_options_keep_the_models_messages():
    with pytest.raises(ParameterError, match=r"invalid protection options: --epsilon: .*greater"):
        protection_from_options("dp", epsilon=0.0)
    with pytest.raises(ParameterError, match=r"--weight-noise: .*less than or equal to 10"):
        protection_from_options("ckm", weight_noise=11.0)
