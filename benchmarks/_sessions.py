"""A researcher's session of ordinary tables: a seeded, reusable generator (issue 40).

An honest analyst asks about a hundred tables of one, two or three
variables, over the whole population or a common universe (one region, one
zone, one region and one more condition), as counts, weighted counts, both,
percentages or means. :func:`research_session` draws such a session from a
:class:`SessionSpec` with a seeded ``random.Random``: the same seed gives the
same tables, in the same order, on every machine. The default spec is the
demo survey's (``tablesafe demo-data DIR --records 200000 --seed 2026``);
another dataset gives its own pool of variables, universes and magnitudes.

A session is a list of table request bodies (the JSON the API takes), so it
can be sent to ``POST /api/datasets/NAME/tables``, given to
``TableService.answer`` (:func:`as_body`), or to a ``TableBuilder``
(:func:`as_request`).

Used by ``benchmarks/bench_ceiling.py`` (the putative-risk ceiling on a
session) and meant for any benchmark that asks what honest use looks like.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

__all__ = ["CENSUS_LIKE", "DEMO", "SessionSpec", "as_body", "as_request", "research_session"]


@dataclass(frozen=True)
class SessionSpec:
    """What a session draws from.

    Attributes:
        variables: The variables (and groupings) a dimension is drawn from.
        exclusive: Pairs never in one table (a variable and its own grouping).
        areas: The area variable and its codes (a universe of one area).
        zones: A grouping of the area variable and its codes (a universe of one
            zone), or None (its weight in ``universes`` must then be 0).
        conditions: Variables and codes of the extra condition of a universe
            of one area and one condition.
        magnitude: The continuous variable means are asked of (None: none).
        dimensions: Weights of 1, 2 and 3 dimensions.
        universes: Weights of the whole population, one area, one zone, one
            area and one condition.
        statistics: What is asked, equally often: ``count``, ``weighted``,
            ``both``, ``percent`` (weighted row percentages, of the total for
            one dimension) and ``mean`` (the weighted mean of ``magnitude``).
    """

    variables: tuple[str, ...]
    exclusive: tuple[tuple[str, str], ...]
    areas: tuple[str, tuple[Any, ...]]
    zones: tuple[str, tuple[Any, ...]] | None
    conditions: tuple[tuple[str, tuple[Any, ...]], ...]
    magnitude: str | None
    dimensions: tuple[float, float, float] = (2.0, 5.0, 3.0)
    universes: tuple[float, float, float, float] = (4.0, 3.0, 1.0, 2.0)
    statistics: tuple[str, ...] = ("count", "weighted", "both", "percent", "mean")


#: The demo survey's variables (``tablesafe demo-data``).
DEMO = SessionSpec(
    variables=(
        "REGION", "ZONE", "SEX", "AGEGRP", "AGE5", "MARSTAT", "HHSIZE", "EDUC", "EMPSTAT",
        "OCC", "TENURE",
    ),
    exclusive=(("REGION", "ZONE"), ("AGEGRP", "AGE5")),
    areas=("REGION", tuple(range(1, 9))),
    zones=("ZONE", ("N", "C", "S")),
    conditions=(("SEX", (1, 2)), ("AGEGRP", tuple(range(2, 9)))),
    magnitude="INCOME",
)  # fmt: skip

#: The census-like file of ``benchmarks/_census_like.py`` (counts only: no weights).
CENSUS_LIKE = SessionSpec(
    variables=("AGE", "SEX", "AREA", "HHSIZE", "TENURE"),
    exclusive=(),
    areas=("AREA", tuple(range(1, 7))),
    zones=None,
    conditions=(("SEX", (1, 2)), ("AGE", tuple(range(18)))),
    magnitude=None,
    universes=(4.0, 4.0, 0.0, 2.0),
    statistics=("count",),
)


def _universe(rng: random.Random, spec: SessionSpec) -> dict[str, list[Any]]:
    kind = rng.choices(range(4), weights=spec.universes)[0]
    area, codes = spec.areas
    if kind == 0:
        return {}
    if kind == 1:
        return {area: [rng.choice(codes)]}
    if kind == 2 and spec.zones is not None:
        zone, zone_codes = spec.zones
        return {zone: [rng.choice(zone_codes)]}
    variable, values = rng.choice(spec.conditions)
    return {area: [rng.choice(codes)], variable: [rng.choice(values)]}


def _statistic(rng: random.Random, spec: SessionSpec, k: int) -> str:
    kind = rng.choice(spec.statistics)
    if kind == "percent":
        return "weighted,percent:row" if k > 1 else "weighted,percent:total"
    if kind == "mean":
        return f"weighted,mean:{spec.magnitude}"
    return kind


def _clash(spec: SessionSpec, names: set[str]) -> bool:
    return any(a in names and b in names for a, b in spec.exclusive)


def research_session(n: int = 100, seed: int = 1, spec: SessionSpec = DEMO) -> list[dict[str, Any]]:
    """``n`` distinct ordinary table requests, as request bodies, in the order asked.

    Args:
        n: How many tables.
        seed: The ``random.Random`` seed: the same seed, the same session.
        spec: What to draw from (default: the demo survey's).

    Returns:
        Request bodies: ``dimensions``, ``universe`` (possibly empty) and ``statistic``.
    """
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    while len(out) < n:
        universe = _universe(rng, spec)
        k = rng.choices([1, 2, 3], weights=spec.dimensions)[0]
        pool = [v for v in spec.variables if v not in universe and not _clash(spec, {v, *universe})]
        dims = rng.sample(pool, k)
        if _clash(spec, set(dims)):
            continue
        body = {"dimensions": dims, "universe": universe, "statistic": _statistic(rng, spec, k)}
        key = json.dumps(body, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(body)
    return out


def as_body(body: dict[str, Any]) -> Any:
    """A session's body as the server's validated ``TableBody``."""
    from tablesafe.service._bodies import TableBody

    return TableBody.model_validate(body)


def as_request(body: dict[str, Any]) -> Any:
    """A session's body as a ``TableRequest`` (for a ``TableBuilder``)."""
    return as_body(body).to_request()
