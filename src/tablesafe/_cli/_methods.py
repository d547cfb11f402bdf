"""Command line: turning --method options into a Protection (shared by several commands).

The options become the same validated
:class:`~tablesafe._settings.ProtectionSettings` a site configuration
holds, and :func:`tablesafe._protection.protection_from_settings` turns
them into a Protection: one meaning for every method name, in the CLI,
the server and the Python API.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click
from pydantic import ValidationError

from tablesafe._errors import ParameterError
from tablesafe._protection import Protection, protection_from_settings

#: Methods the command line knows, for messages.
METHODS = ("none", "ckm", "dp", "pram", "q", "q-records", "ptable:FILE")

F = TypeVar("F", bound=Callable[..., Any])

# The protection options, declared once for every command that takes them:
# name -> (type, default, help).
_PROTECTION_OPTIONS: dict[str, tuple[Any, Any, str]] = {
    "epsilon": (float, 1.0, "dp: epsilon."),
    "cap": (int, 7, "dp, q: cap."),
    "rate": (float, 0.01, "q, q-records: rate."),
    "max-deviation": (int, 3, "ckm: maximum deviation D."),
    "variance": (float, 1.0, "ckm: variance V."),
    "seeds": (str, "cellkey", "cellkey or dynamic."),
    "secret-env": (str, None, "Environment variable with the secret (dynamic seeds)."),
    "additivity": (str, "aggregate", "aggregate, independent or ipf."),
}


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
    if method.startswith("ptable:"):
        options.update(method="ptable", ptable_file=method.split(":", 1)[1])
    elif method in METHODS:
        options["method"] = method
    else:
        raise ParameterError(f"unknown method {method!r}; allowed: {', '.join(METHODS)}")
    secret = None
    if seeds == "dynamic" or method == "q-records":
        name = secret_env or "TABLESAFE_SECRET"
        value = os.environ.get(name)
        if not value:
            raise ParameterError(
                f"dynamic seeds need a secret: set the environment variable {name} (or name "
                "another one with --secret-env)"
            )
        options.update(seeds="dynamic", secret_env=name)
        secret = value.encode()
    else:
        options["seeds"] = seeds
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
