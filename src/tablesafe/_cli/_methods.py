"""Command line: turning --method options into a Protection (shared by several commands).

The options become the same validated
:class:`~tablesafe._settings.ProtectionSettings` a site configuration
holds, and :func:`tablesafe._protection.protection_from_settings` turns
them into a Protection: one meaning for every method name, in the CLI,
the server and the Python API.

Options that plainly pass the settings' checks (the bounds and choices of
:mod:`tablesafe._protection_limits`, from which ``ProtectionSettings`` is
built; a test checks that both paths accept the same options and give the
same Protection) skip pydantic, whose import alone costs ``tablesafe
table`` about 0.07 s; any other options go through ``ProtectionSettings``,
whose messages say what is wrong.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from tablesafe._cli import number
from tablesafe._errors import ParameterError
from tablesafe._protection import protection_from_settings
from tablesafe._protection_limits import BOUNDS, CHOICES, INTEGERS, ProtectionMethod
from tablesafe._rounding import Rounding
from tablesafe._seeds import SeedScheme

if TYPE_CHECKING:
    from tablesafe._protection import Protection
    from tablesafe._settings import ProtectionSettings

#: Methods the command line knows, for messages: no protection first, a ptable by its file.
#: dp-marginals is a site's (its release is made once and kept in the state store).
METHODS: tuple[str, ...] = (
    str(ProtectionMethod.NONE),
    *(
        str(m)
        for m in ProtectionMethod
        if m not in (ProtectionMethod.NONE, ProtectionMethod.PTABLE, ProtectionMethod.DP_MARGINALS)
    ),
    f"{ProtectionMethod.PTABLE}:FILE",
)

#: Why the command line has no dp-marginals.
_SITE_ONLY = (
    "dp-marginals is a site's method: its release is made once and kept in the state store; "
    "serve it (tablesafe serve) with [datasets.protection] method = 'dp-marginals' "
    "(docs/dp-marginals.md)"
)

F = TypeVar("F", bound=Callable[..., Any])

# The protection options, declared once for every command that takes them:
# name -> (type, default, help).
_PROTECTION_OPTIONS: dict[str, tuple[Any, Any, str]] = {
    "epsilon": (number("protection.epsilon"), 1.0, "dp: epsilon."),
    "cap": (number("protection.cap"), 7, "dp, q: cap."),
    "rate": (number("protection.rate"), 0.01, "q, q-records: rate."),
    "max-deviation": (number("protection.max_deviation"), 3, "ckm: maximum deviation D."),
    "variance": (number("protection.variance"), 1.0, "ckm: variance V."),
    "seeds": (
        str,
        "cellkey",
        "cellkey, keyed (record-set keyed hashes, needs a secret) or dynamic (Li & Krenzke; "
        "workbench only).",
    ),
    "secret-env": (str, None, "Environment variable with the secret (keyed, dynamic seeds)."),
    "additivity": (str, "aggregate", "aggregate, independent or ipf."),
}


@dataclass(frozen=True)
class _CheckedOptions:
    """Options that passed every check of ``ProtectionSettings`` (the fields it reads)."""

    method: str
    epsilon: float
    cap: int
    rate: float
    max_deviation: int
    variance: float
    js: int
    additivity: str
    weight_noise: float
    rounding: str
    se_min_count: int
    seeds: str
    secret_env: str | None = None
    ptable_file: str | None = None
    secret_file: str | None = None


def _checked(options: dict[str, Any]) -> _CheckedOptions | None:
    """The options as ``ProtectionSettings`` would hold them, or None if any check fails."""
    options = dict(options)
    for name, (low, low_ok, high) in BOUNDS.items():
        value = options[name]
        if name in INTEGERS:
            if type(value) is not int:  # pydantic's conversions are left to pydantic
                return None
        elif type(value) in (int, float):
            value = options[name] = float(value)
        else:
            return None
        if not (value >= low if low_ok else value > low) or (high is not None and value > high):
            return None  # NaN too
    for name, allowed in CHOICES.items():
        if options[name] not in allowed:
            return None
    if options["method"] == ProtectionMethod.PTABLE and not options.get("ptable_file"):
        return None
    if options["method"] == ProtectionMethod.Q_RECORDS and options["seeds"] == SeedScheme.CELLKEY:
        return None
    if options["seeds"] != SeedScheme.CELLKEY and not options.get("secret_env"):
        return None
    secret = options.get("secret_env") or options.get("secret_file")
    if options["method"] == ProtectionMethod.DP_MARGINALS and not secret:
        return None
    if not isinstance(options["rounding"], str):
        return None
    try:
        rounding = str(Rounding.parse(options["rounding"]).check_owner())
    except ValueError:  # ParameterError, or anything else the settings would refuse
        return None
    return _CheckedOptions(**{**options, "rounding": rounding})


def protection_options(*names: str) -> Callable[[F], F]:
    """Add the named protection options (``epsilon``, ``max-deviation``, ...) in that order."""

    def decorate(f: F) -> F:
        for name in reversed(names):
            kind, default, text = _PROTECTION_OPTIONS[name]
            f = click.option(f"--{name}", type=kind, default=default, help=text)(f)
        return f

    return decorate


def protection_from_options(
    method: str,
    *,
    epsilon: float = 1.0,
    cap: int = 7,
    rate: float = 0.01,
    max_deviation: int = 3,
    variance: float = 1.0,
    js: int = 0,
    seeds: str = "cellkey",
    secret_env: str | None = None,
    additivity: str = "aggregate",
    weight_noise: float = 0.5,
    rounding: str = "1",
    se_min_count: int = 10,
) -> Protection:
    """Build the Protection named by command-line options.

    Raises:
        ParameterError: for an unknown method, an impossible parameter or a
            missing secret.
    """
    options: dict[str, Any] = {
        "epsilon": epsilon,
        "cap": cap,
        "rate": rate,
        "max_deviation": max_deviation,
        "variance": variance,
        "js": js,
        "additivity": additivity,
        "weight_noise": weight_noise,
        "rounding": rounding,
        "se_min_count": se_min_count,
    }
    if method.startswith(f"{ProtectionMethod.PTABLE}:"):
        options.update(method=ProtectionMethod.PTABLE, ptable_file=method.split(":", 1)[1])
    elif method in METHODS:
        options["method"] = method
    elif method == ProtectionMethod.DP_MARGINALS:
        raise ParameterError(_SITE_ONLY)
    else:
        raise ParameterError(f"unknown method {method!r}; allowed: {', '.join(METHODS)}")
    secret = None
    if seeds != SeedScheme.CELLKEY or method == ProtectionMethod.Q_RECORDS:
        # Record-level drop/add-up-to-q draws from keyed hashes: keyed seeds unless
        # Li & Krenzke's dynamic ones are asked for.
        scheme = SeedScheme.KEYED if seeds == SeedScheme.CELLKEY else seeds
        name = secret_env or "TABLESAFE_SECRET"
        value = os.environ.get(name)
        if not value:
            raise ParameterError(
                f"{scheme} seeds need a secret: set the environment variable {name} (or name "
                "another one with --secret-env)"
            )
        options.update(seeds=scheme, secret_env=name)
        secret = value.encode()
    else:
        options["seeds"] = seeds

    checked = _checked(options)
    if checked is not None:
        # The same fields, the same values: protection_from_settings reads no other.
        return protection_from_settings(cast("ProtectionSettings", checked), secret=secret)
    from pydantic import ValidationError

    # Start-up: pydantic loads only for a site configuration (test_cli_registry).
    from tablesafe._settings import ProtectionSettings

    try:
        settings = ProtectionSettings.model_validate(options)
    except ValidationError as exc:
        problems = "; ".join(
            f"--{'.'.join(str(p) for p in e['loc']).replace('_', '-') or 'method'}: {e['msg']}"
            for e in exc.errors()
        )
        raise ParameterError(f"invalid protection options: {problems}") from None
    return protection_from_settings(settings, secret=secret)
