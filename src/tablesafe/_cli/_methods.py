"""Command line: turning --method options into a Protection (shared by several commands)."""

from __future__ import annotations

import os
from pathlib import Path

from tablesafe._builder import Protection
from tablesafe._errors import ParameterError

#: Methods the command line knows, for messages.
METHODS = ("none", "ckm", "dp", "pram", "q", "q-records", "ptable:FILE")


def protection_from_options(
    method: str,
    *,
    epsilon: float = 1.0,
    cap: int = 7,
    rate: float = 0.01,
    max_deviation: int = 3,
    variance: float = 1.0,
    seeds: str = "cellkey",
    secret_env: str | None = None,
    weighting: str = "overall_mean",
    additivity: str = "aggregate",
) -> Protection:
    """Build the Protection named by command-line options.

    Raises:
        ParameterError: for an unknown method or a missing secret.
    """
    secret = None
    if seeds == "dynamic" or method == "q-records":
        seeds = "dynamic"
        name = secret_env or "TABLESAFE_SECRET"
        value = os.environ.get(name)
        if not value:
            raise ParameterError(
                f"dynamic seeds need a secret: set the environment variable {name} (or name "
                "another one with --secret-env)"
            )
        secret = value.encode()
    from tablesafe import mechanisms

    mech: object
    if method == "none":
        mech = None
    elif method == "q-records":
        mech = mechanisms.drop_add_records(rate=rate)
    elif method == "dp":
        mech = mechanisms.dp_geometric(epsilon, cap=cap)
    elif method == "q":
        mech = mechanisms.drop_add_q(rate=rate, cap=cap)
    elif method == "pram":
        mech = mechanisms.pram_shlomo_young()
    elif method == "ckm":
        mech = mechanisms.destatis(max_deviation, variance)
    elif method.startswith("ptable:"):
        from tablesafe._ptable import PTable

        mech = PTable.read_csv(Path(method.split(":", 1)[1]))
    else:
        raise ParameterError(f"unknown method {method!r}; allowed: {', '.join(METHODS)}")
    return Protection(
        mech,  # type: ignore[arg-type]
        seeds=seeds,  # type: ignore[arg-type]
        secret=secret,
        weighting=weighting,  # type: ignore[arg-type]
        additivity=additivity,  # type: ignore[arg-type]
    )
