"""The limits of every owner-facing number, in one place and without pydantic.

:data:`RANGES` gives each number the owner sets (the site configuration's
settings, the command line's options, the ptable constructors' parameters)
its documented :class:`Range`, checked before any work: a value outside it is
a one-line :class:`~tablesafe.ParameterError` that says what is allowed.

:class:`tablesafe._settings.ProtectionSettings` builds its fields' bounds and
choices from these tables, and the command line checks its protection
options against the same tables to decide whether it can skip importing
pydantic (``tablesafe._cli._methods``): one definition of what is allowed.

The protection's options are defined here, once: the cell-wise method
(:class:`ProtectionMethod`) and the additivity (:class:`Additivity`, which
:mod:`tablesafe.mechanisms._additivity` carries out); the seed scheme is
:class:`tablesafe._seeds.SeedScheme`.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any

from tablesafe._errors import ParameterError
from tablesafe._seeds import SeedScheme

__all__ = [
    "BOUNDS",
    "CHOICES",
    "INTEGERS",
    "MAX_Q_ENTRIES",
    "MAX_SEED",
    "RANGES",
    "Additivity",
    "ProtectionMethod",
    "Range",
    "SliverScope",
    "SmallCellAction",
    "UnreliableAction",
    "check_number",
    "field_bounds",
]


class ProtectionMethod(StrEnum):
    """The protection of counts a dataset is served with (a member equals its text)."""

    CKM = "ckm"
    DP = "dp"
    PRAM = "pram"
    Q = "q"
    Q_RECORDS = "q-records"
    PTABLE = "ptable"
    DP_MARGINALS = "dp-marginals"
    NONE = "none"


class Additivity(StrEnum):
    """The data owner's additivity option (DESIGN decision 6; a member equals its text).

    ``aggregate``: margins are sums of the perturbed inner cells;
    ``independent``: every cell perturbed on its own; ``ipf``: independent,
    then IPF to the perturbed margins and controlled rounding.
    """

    AGGREGATE = "aggregate"
    INDEPENDENT = "independent"
    IPF = "ipf"


class SmallCellAction(StrEnum):
    """What the small-cell rule does to a protected count below ``min_cell_size``."""

    SUPPRESS = "suppress"
    SHOW_LESS_THAN = "show_less_than"


class UnreliableAction(StrEnum):
    """What the precision rule does to an estimate above ``max_rse``.

    ``np``: the estimate, its standard error and interval show ``"np"`` (not
    published: too unreliable); ``flag``: they are published, with a flag.
    """

    NP = "np"
    FLAG = "flag"


class SliverScope(StrEnum):
    """Which earlier tables the sliver guard compares a new one with."""

    DATASET = "dataset"
    KEY = "key"


@dataclass(frozen=True)
class Range:
    """The documented range of one owner-facing number, checked before any work.

    Attributes:
        low: The lowest value.
        high: The highest value.
        integer: Whether the number is a whole number.
        low_open: Whether ``low`` itself is excluded ("greater than").
        high_open: Whether ``high`` itself is excluded ("less than").
    """

    low: float
    high: float
    integer: bool = False
    low_open: bool = False
    high_open: bool = False

    def words(self) -> str:
        """The range in words, as the docs and every message write it."""
        kind = "a whole number" if self.integer else "a number"
        if not self.low_open and not self.high_open:
            return f"{kind} from {_number(self.low)} to {_number(self.high)}"
        low = (
            f"greater than {_number(self.low)}"
            if self.low_open
            else f"at least {_number(self.low)}"
        )
        high = (
            f"less than {_number(self.high)}" if self.high_open else f"at most {_number(self.high)}"
        )
        return f"{kind} {low} and {high}"

    def holds(self, value: object) -> bool:
        """Whether ``value`` is a number of this range (``bool`` and NaN are not numbers)."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.integer and not isinstance(value, numbers.Integral):
            return False
        # Compared as given: a huge int is never turned into a float that overflows.
        x: Any = int(value) if isinstance(value, numbers.Integral) else float(value)
        above = x > self.low if self.low_open else x >= self.low
        below = x < self.high if self.high_open else x <= self.high
        return bool(above and below)

    def check(self, value: object, name: str) -> Any:
        """``value`` if it is in the range, as an ``int`` or ``float``.

        Raises:
            ParameterError: ``NAME must be <the range in words>, not VALUE``.
        """
        if not self.holds(value):
            raise ParameterError(f"{name} must be {self.words()}, not {value!r}")
        if self.integer:
            assert isinstance(value, numbers.Integral)
            return int(value)
        assert isinstance(value, numbers.Real)
        return float(value)

    def field(self) -> dict[str, Any]:
        """The range as pydantic ``Field`` arguments (``gt``/``ge``, ``lt``/``le``)."""
        return {
            ("gt" if self.low_open else "ge"): self.low,
            ("lt" if self.high_open else "le"): self.high,
        }


def _number(x: float) -> str:
    """A bound as the docs write it: ``1,000``, ``0.05``, ``0.000001`` (never ``1e-06``)."""
    if float(x).is_integer():
        return f"{int(x):,}"
    return format(Decimal(repr(float(x))), "f")


def _r(
    low: float,
    high: float,
    *,
    integer: bool = False,
    low_open: bool = False,
    high_open: bool = False,
) -> Range:
    return Range(low, high, integer, low_open, high_open)


def _i(low: int, high: int) -> Range:
    return Range(low, high, integer=True)


#: The largest ``cap**2 / rate`` of drop/add-up-to-q (about its ptable's entries: its rows
#: run to ``cap / rate``, each ``2q + 1`` wide): 7 and 0.01 give 4,900.
MAX_Q_ENTRIES = 10_000_000

#: The largest seed a command takes (numpy's generators take any up to 2**63 - 1).
MAX_SEED = 2**63 - 1

#: Every owner-facing number's range, by name: the site configuration's settings
#: (``section.setting``; :mod:`tablesafe._settings` builds its fields' bounds from
#: these), the command line's other options (``command.option``) and the ptable
#: constructors. docs/site-config.md and docs/cli.md list them (a test checks), and
#: tests/test_number_ranges.py tries every one with absurd values.
RANGES: dict[str, Range] = {
    # [datasets.protection], the --method options and the ptable constructors.
    "protection.epsilon": _r(0, 50, low_open=True),
    "protection.cap": _i(1, 1000),
    "protection.rate": _r(0, 1, low_open=True),
    "protection.max_deviation": _i(1, 10),
    "protection.variance": _r(0, 100, low_open=True),
    "protection.js": _i(0, 10),
    "protection.weight_noise": _r(0, 10),
    "protection.se_min_count": _i(1, 1_000_000),
    "protection.delta": _r(0, 1e-3, low_open=True),
    # [datasets.protection.marginals] (method dp-marginals)
    "marginals.max_model_mib": _r(0, 4096, low_open=True),
    "marginals.max_marginal_cells": _i(1, 10_000_000),
    "marginals.weight_bins": _i(1, 1000),
    "marginals.iterations": _i(1, 100_000),
    "ptable.sensitivity": _r(0, 1000, low_open=True),
    "ptable.pram_cap": _i(2, 1000),
    "ptable.pstay": _r(0, 1, low_open=True, high_open=True),
    "ptable.keys": _i(2, 65_536),
    "ptable.rows": _i(1, 1_000_000),
    "rounding.base": _r(1e-9, 1e12),
    "rounding.digits": _i(1, 15),
    # [datasets.rules]
    "rules.max_dimensions": _i(1, 4),
    "rules.min_universe_size": _i(0, 1_000_000_000),
    "rules.min_cell_size": _i(0, 1_000_000),
    "rules.max_cells": _i(1, 10_000_000),
    "rules.max_job_cells": _i(1, 100_000_000),
    "rules.job_timeout_seconds": _r(0, 604_800, low_open=True),
    "rules.max_rse": _r(0, 1000, low_open=True),
    "rules.min_effective_count": _i(0, 1_000_000),
    "rules.query_timeout_seconds": _r(0, 86_400, low_open=True),
    "rules.sliver_min_difference": _i(0, 1_000_000),
    "rules.sliver_max_candidates": _i(1, 1_000_000),
    "rules.max_withheld_share": _r(0, 1),
    "rules.alternatives_max_dry_runs": _i(0, 1000),
    "rules.privacy_budget_epsilon": _r(0, 1_000_000, low_open=True),
    "rules.privacy_budget_epsilon_per_key": _r(0, 1_000_000, low_open=True),
    "rules.privacy_budget_delta": _r(0, 1, low_open=True, high_open=True),
    "rules.putative_uniques_ceiling": _r(0, 1, low_open=True),
    "rules.putative_max_cells": _i(1, 200_000),
    "rules.max_custom_groups": _i(0, 1000),
    "rules.max_categories_per_group": _i(1, 100_000),
    # [datasets.magnitudes]
    "magnitudes.max_deviation": _i(1, 10),
    "magnitudes.variance": _r(0, 100, low_open=True),
    "magnitudes.step": _i(1, 10),
    "magnitudes.share": _r(0, 1, low_open=True),
    "magnitudes.top_k": _i(1, 3),
    "magnitudes.mu": _r(0, 10),
    "magnitudes.epsilon": _r(0, 100, low_open=True),
    "magnitudes.dominance_n": _i(0, 3),
    "magnitudes.dominance_k": _r(0, 100, low_open=True),
    "magnitudes.p_percent": _r(0, 100),
    "magnitudes.quantile_window": _i(1, 50),
    "magnitudes.quantile_cap": _r(0, 1, low_open=True),
    "magnitudes.quantile_min_count": _i(3, 1_000_000),
    # [server], [state], [engine], [[keys]]
    "server.max_body_bytes": _i(1, 10_000_000),
    "server.rate_limit_per_minute": _i(1, 1_000_000),
    "server.cache_tables": _i(0, 1_000_000),
    "server.concurrent_tables": _i(0, 1024),
    "server.header_timeout_seconds": _r(0, 300, low_open=True),
    "server.body_timeout_seconds": _r(0, 300, low_open=True),
    "server.keep_alive_seconds": _i(1, 300),
    "server.max_header_bytes": _i(1024, 1_048_576),
    "server.max_connections": _i(1, 1_000_000),
    "server.auth_failures_per_minute": _i(1, 1_000_000),
    "server.shutdown_timeout_seconds": _r(0, 3600, low_open=True),
    "server.job_result_days": _r(0, 366, low_open=True),
    "server.job_stale_seconds": _r(10, 86_400),
    "server.max_queued_jobs_per_key": _i(0, 100_000),
    "state.pool_size": _i(1, 1000),
    "state.connect_timeout_seconds": _r(0, 300, low_open=True),
    "engine.threads": _i(1, 1024),
    "engine.max_cube_cells": _i(1, 1_000_000_000),
    "engine.max_cache_mib": _r(0, 1_048_576, low_open=True),
    "keys.rate_limit_per_minute": _i(1, 1_000_000),
    # The command line's other numbers.
    "seed": _i(0, MAX_SEED),
    "demo-data.records": _i(1, 100_000_000),
    "demo-data.replicates": _i(0, 1000),
    "catalog.max_categories": _i(1, 100_000),
    "catalog.zeros_min_records": _i(0, 1_000_000_000),
    "attack.tables": _i(1, 100_000),
    "attack.min_difference": _i(0, 1_000_000),
    "attack.pairs": _i(1, 100_000),
    "attack.tries": _i(1, 100_000),
    "attack.partners": _i(1, 1000),
    "attack.all_k_way": _i(1, 4),
    "attack.min_cell_size": _i(0, 1_000_000),
    "attack.time_limit": _r(0, 86_400, low_open=True),
    "attack.ranked": _i(0, 1000),
    "attack.limit": _i(1, 100_000_000),
    "audit.limit": _i(1, 1_000_000),
    "cyclic.probability": _r(0, 1),
    "postprocess.weight": _r(0, 1_000_000_000, low_open=True),
    "replicates.replicates": _i(2, 10_000),
    "replicates.fay": _r(0, 1, high_open=True),
    "reproduce.reps": _i(1, 100_000),
    "reproduce.pram_alpha": _r(0, 1),
    "resample.quality": _r(0, 1_000_000, low_open=True),
    "resample.tables": _i(1, 999),
    "serve.port": _i(0, 65_535),
    "worker.poll_seconds": _r(0.05, 60),
}


def check_number(name: str, value: object, label: str | None = None) -> Any:
    """``value`` checked against the range :data:`RANGES` gives ``name``.

    Args:
        name: The range's name (``"protection.epsilon"``).
        value: The value given.
        label: How the message names it (default: the setting's name).

    Raises:
        ParameterError: naming the value and the range in words.
    """
    return RANGES[name].check(value, label or name.rsplit(".", 1)[-1])


#: The protection settings (their names in ``ProtectionSettings``) and their ranges.
_PROTECTION = (
    "epsilon",
    "cap",
    "rate",
    "max_deviation",
    "variance",
    "js",
    "weight_noise",
    "se_min_count",
)

#: The numeric protection settings' bounds: name -> (lower bound, whether the bound
#: itself is allowed, upper bound (allowed)), from :data:`RANGES` (the command line's
#: fast check reads these).
BOUNDS: dict[str, tuple[float, bool, float | None]] = {
    n: (
        RANGES[f"protection.{n}"].low,
        not RANGES[f"protection.{n}"].low_open,
        RANGES[f"protection.{n}"].high,
    )
    for n in _PROTECTION
}

#: The numeric settings that are integers (the others of :data:`BOUNDS` are floats).
INTEGERS = frozenset(n for n in _PROTECTION if RANGES[f"protection.{n}"].integer)

#: The text settings' allowed values.
CHOICES: dict[str, tuple[str, ...]] = {
    "method": tuple(ProtectionMethod),
    "seeds": tuple(SeedScheme),
    "additivity": tuple(Additivity),
}


def field_bounds(name: str) -> dict[str, Any]:
    """The range :data:`RANGES` gives ``name`` as pydantic ``Field`` arguments.

    ``name`` is the range's name, or a protection setting's own (``"epsilon"``).
    """
    return RANGES[name if "." in name else f"protection.{name}"].field()
