"""DP within one fixed budget: marginals measured once, every table answered from them.

Per-query DP spends budget on every table, so a flexible table builder runs
out after a few tables (issue 40: a site with epsilon 3 answered 4 of 94
tables of one researcher's session). The ``dp-marginals`` method spends the
site's whole budget once, on noisy measurements of marginals chosen from the
catalog before any data is read, and answers every table by post-processing
one model fitted to them (McKenna, Sheldon & Miklau 2019, "Graphical-model
based estimation and inference for differential privacy", Private-PGM; the
measure-then-estimate design of AIM, McKenna et al. 2022, and of the Census
Bureau's TopDown algorithm, Abowd et al. 2022).

This module holds what is decided before the model is fitted:

* :class:`DPMarginals`, the owner's parameters (the mechanism of a
  :class:`~tablesafe.Protection`);
* :class:`ModelDomain`, the model's attributes: every source variable of the
  catalog (one with more than :data:`SPLIT_ABOVE` codes held as its catalog
  grouping and the position within the group, as TopDown measures a
  hierarchy's levels), the weight in bins, and the binned magnitudes;
* :func:`measurement_plan`, which marginals are measured: every 1-way
  marginal, the owner's workload, then 2-way marginals smallest first while
  the model stays within its size (AIM's bound on the junction tree);
* :func:`calibrate`, the discrete Gaussian's ``σ²`` for which the plan's
  measurements compose to the stated ``(epsilon, delta)`` under the privacy
  loss distribution accountant of ``dp-accounting`` (Doroshenko et al. 2022);
* :func:`measure`, the measurements: each cell's count plus exact discrete
  Gaussian noise (Canonne, Kamath & Steinke 2020) drawn from bits keyed by the
  secret and the release, so the same site and secret measure the same
  integers in every process.

A record adds one to one cell of each measured marginal (its bins included),
so each measurement has sensitivity 1 under adding or removing a record.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ConfigError, ParameterError
from tablesafe._protection_limits import check_number
from tablesafe.catalog._catalog import Catalog, Code
from tablesafe.mechanisms._discrete import KeyedBits, discrete_gaussian

__all__ = [
    "NAME",
    "SPLIT_ABOVE",
    "Bins",
    "ColumnMap",
    "DPMarginals",
    "ModelDomain",
    "calibrate",
    "dp_marginals",
    "load_mbi",
    "measure",
    "measurement_plan",
    "model_domain",
    "release_seed",
]

#: The method's name in settings, metadata and the ledger.
NAME = "dp-marginals"

#: A source variable with more codes than this is held as its catalog grouping (of at
#: most this many groups) and the position within the group, if it has such a grouping.
SPLIT_ABOVE = 24

#: What a site without the dp extra is told when its release is to be made.
_NEEDS_DP = (
    "method 'dp-marginals' makes its release with mbi and dp-accounting: "
    "pip install 'tablesafe[dp]'"
)

#: The personalisation of the measurements' bit streams.
_PERSON = b"ts-marginals"


@dataclass(frozen=True)
class DPMarginals:
    """The owner's parameters of ``dp-marginals`` (a :class:`~tablesafe.Protection`'s mechanism).

    Attributes:
        epsilon: The site's whole budget, spent once on the measurements.
        delta: Its delta.
        workload: Marginals to measure besides the 1-way ones, each a tuple of
            catalog variable names (measured first, whatever their size).
        max_model_mib: The largest model (its junction tree's cells, 8 bytes
            each): 2-way marginals are added, smallest first, while it fits.
        max_marginal_cells: 2-way marginals with more cells than this are not measured.
        weight_range: Public bounds of the weights (weights outside are
            counted at the nearest bound); ``None``: weighted figures are not
            published.
        weight_bins: Bins of the weight, equal on a log scale over ``weight_range``.
        bins: Per magnitude, the edges of its bins (a value below the first
            edge or above the last is counted in the first or last bin); each
            record counts at its bin's midpoint in means. Means of other
            magnitudes are not published.
        iterations: Iterations of the model's fit (mirror descent).
    """

    epsilon: float
    delta: float = 1e-9
    workload: tuple[tuple[str, ...], ...] = ()
    max_model_mib: float = 16.0
    max_marginal_cells: int = 5000
    weight_range: tuple[float, float] | None = None
    weight_bins: int = 16
    bins: tuple[tuple[str, tuple[float, ...]], ...] = field(default=())
    iterations: int = 1000

    #: Not a record-level mechanism (:class:`~tablesafe.Protection` asks).
    record_level = False

    def __post_init__(self) -> None:
        check_number("protection.epsilon", self.epsilon, "epsilon")
        check_number("protection.delta", self.delta, "delta")
        for name in ("max_model_mib", "max_marginal_cells", "weight_bins", "iterations"):
            check_number(f"marginals.{name}", getattr(self, name), name)
        object.__setattr__(self, "workload", tuple(tuple(m) for m in self.workload))
        bins = self.bins.items() if isinstance(self.bins, Mapping) else self.bins
        edges = tuple(sorted((str(k), tuple(float(e) for e in v)) for k, v in bins))
        for name, e in edges:
            if len(e) < 2 or any(b <= a for a, b in itertools.pairwise(e)):
                raise ParameterError(
                    f"the bins of {name} must be at least two increasing edges, not {list(e)}"
                )
        object.__setattr__(self, "bins", edges)
        if self.weight_range is not None:
            low, high = (float(v) for v in self.weight_range)
            if not 0 < low < high or not math.isfinite(high):
                given = list(self.weight_range)
                raise ParameterError(f"weight_range must be two weights 0 < low < high: {given}")
            object.__setattr__(self, "weight_range", (low, high))

    def describe(self) -> dict[str, Any]:
        """The public description: the budget, the plan's parameters, no value of the data."""
        return {
            "name": NAME,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "workload": [list(m) for m in self.workload],
            "max_model_mib": self.max_model_mib,
            "max_marginal_cells": self.max_marginal_cells,
            "weight_range": None if self.weight_range is None else list(self.weight_range),
            "weight_bins": self.weight_bins,
            "bins": {k: list(v) for k, v in self.bins},
            "iterations": self.iterations,
        }


def dp_marginals(epsilon: float, **options: Any) -> DPMarginals:
    """The ``dp-marginals`` mechanism: ``epsilon`` spent once (:class:`DPMarginals`)."""
    return DPMarginals(epsilon, **options)


# -- the model's attributes -----------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ColumnMap:
    """How the model holds one catalog column: one attribute, or a group and a position.

    Attributes:
        column: The microdata column.
        codes: Its codes, in catalog order.
        attrs: The model's attributes (one, or the group's and the position's).
        index: Per code (rows, catalog order), its value of each attribute.
    """

    column: str
    codes: tuple[Code, ...]
    attrs: tuple[str, ...]
    index: npt.NDArray[np.int64]

    def indicator(self, allowed: set[Code] | frozenset[Code]) -> npt.NDArray[np.float64]:
        """The 0/1 array over this column's attributes of the codes in ``allowed``."""
        shape = tuple(int(self.index[:, j].max()) + 1 for j in range(len(self.attrs)))
        out = np.zeros(shape)
        rows = [i for i, c in enumerate(self.codes) if c in allowed]
        out[tuple(self.index[rows].T)] = 1.0
        return out


@dataclass(frozen=True, eq=False)
class Bins:
    """A continuous value held in bins: the weight, or a magnitude.

    Attributes:
        attr: The model's attribute.
        source: The microdata column.
        edges: The bins' edges.
        values: Each bin's representative value (its midpoint).
    """

    attr: str
    source: str
    edges: npt.NDArray[np.float64]
    values: npt.NDArray[np.float64]

    def index(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """Each value's bin (values outside the edges in the nearest bin)."""
        at = np.searchsorted(self.edges, np.asarray(x, dtype=np.float64), side="right") - 1
        return np.clip(at, 0, self.values.size - 1).astype(np.int64)


@dataclass(frozen=True, eq=False)
class ModelDomain:
    """The model's attributes and how the catalog's columns and values map onto them.

    Attributes:
        attributes: (name, size) of each attribute, in order.
        columns: Each source column's :class:`ColumnMap`.
        weight: The weight's bins, or ``None`` (no weighted figures).
        magnitudes: Each binned magnitude's bins, by magnitude name.
    """

    attributes: tuple[tuple[str, int], ...]
    columns: Mapping[str, ColumnMap]
    weight: Bins | None
    magnitudes: Mapping[str, Bins]

    @property
    def sizes(self) -> dict[str, int]:
        """Each attribute's size."""
        return dict(self.attributes)

    def cells(self, clique: Sequence[str]) -> int:
        """How many cells a marginal over ``clique`` has."""
        sizes = self.sizes
        return math.prod(sizes[a] for a in clique)

    def primary(self, column: str) -> str:
        """The attribute a column is measured by in marginals of several variables (its group)."""
        return self.columns[column].attrs[0]


def _split(catalog: Catalog, column: str, codes: tuple[Code, ...]) -> list[list[Code]] | None:
    """The catalog grouping a large column is held by: the finest partition within the limit."""
    best: list[list[Code]] | None = None
    for var in catalog.variables.values():
        if var.column != column or var.members is None or len(var.members) > SPLIT_ABOVE:
            continue
        groups = [list(m) for m in var.members]
        flat = [c for g in groups for c in g]
        if sorted(map(str, flat)) != sorted(map(str, codes)) or len(set(flat)) != len(flat):
            continue  # not a partition of the column's codes
        if best is None or len(groups) > len(best):
            best = groups
    return best


def _column_map(catalog: Catalog, column: str, codes: tuple[Code, ...]) -> ColumnMap:
    groups = _split(catalog, column, codes) if len(codes) > SPLIT_ABOVE else None
    if groups is None:
        index = np.arange(len(codes), dtype=np.int64)[:, None]
        return ColumnMap(column, codes, (column,), index)
    where = {c: (g, p) for g, members in enumerate(groups) for p, c in enumerate(members)}
    index = np.array([where[c] for c in codes], dtype=np.int64)
    return ColumnMap(column, codes, (f"{column}#group", f"{column}#position"), index)


def _bins(attr: str, source: str, edges: npt.NDArray[np.float64]) -> Bins:
    return Bins(attr, source, edges, (edges[:-1] + edges[1:]) / 2)


def model_domain(catalog: Catalog, spec: DPMarginals) -> ModelDomain:
    """The model's attributes for ``catalog`` under ``spec``.

    Raises:
        ParameterError: for bins of a magnitude the catalog does not have.
    """
    columns = {
        v.column: _column_map(catalog, v.column, tuple(v.codes)) for v in catalog.source_variables
    }
    attributes: list[tuple[str, int]] = []
    for cm in columns.values():
        attributes += [(a, int(cm.index[:, j].max()) + 1) for j, a in enumerate(cm.attrs)]
    weight = None
    if catalog.weight is not None and spec.weight_range is not None:
        low, high = spec.weight_range
        weight = _bins("#weight", catalog.weight, np.geomspace(low, high, spec.weight_bins + 1))
        attributes.append((weight.attr, spec.weight_bins))
    magnitudes = {}
    for name, edges in spec.bins:
        if name not in catalog.magnitudes:
            raise ParameterError(
                f"bins of {name!r}: the catalog has no such magnitude; it has "
                f"{', '.join(catalog.magnitudes) or 'none'}"
            )
        mag = catalog.magnitudes[name]
        magnitudes[name] = _bins(f"#{name}", mag.column, np.asarray(edges, dtype=np.float64))
        attributes.append((magnitudes[name].attr, len(edges) - 1))
    return ModelDomain(tuple(attributes), columns, weight, magnitudes)


# -- which marginals are measured -------------------------------------------------------------


def _workload_clique(
    catalog: Catalog, domain: ModelDomain, names: Sequence[str]
) -> tuple[str, ...]:
    """The attributes of one marginal of the owner's workload (variables' groups)."""
    attrs: list[str] = []
    for name in names:
        if name in catalog.variables:
            attrs.append(domain.primary(catalog.variable(name).column))
        elif name in domain.magnitudes:
            attrs.append(domain.magnitudes[name].attr)
        elif name == "WEIGHT" and domain.weight is not None:
            attrs.append(domain.weight.attr)
        else:
            raise ParameterError(
                f"the workload names {name!r}: not a variable of the catalog, a binned "
                f"magnitude or WEIGHT; variables: {', '.join(catalog.variables)}"
            )
    return tuple(dict.fromkeys(attrs))


def load_mbi() -> Any:
    """The ``mbi`` package, with JAX in float64 and no persistent compilation cache.

    As ``mbi`` asks (it warns otherwise): float32 stalls its estimates past
    100,000 records, and its many small programs make the cache a cost.
    """
    try:
        import jax
    except ImportError:
        raise ConfigError(_NEEDS_DP) from None
    jax.config.update("jax_enable_x64", True)  # type: ignore[no-untyped-call]
    jax.config.update("jax_enable_compilation_cache", False)  # type: ignore[no-untyped-call]
    import mbi

    return mbi


def _model_mib(domain: ModelDomain, cliques: Sequence[tuple[str, ...]]) -> float:
    """The junction tree's size of a model over ``cliques`` in MiB (8 bytes a cell)."""
    load_mbi()
    from mbi import Domain
    from mbi.junction_tree import hypothetical_model_size

    names, sizes = zip(*domain.attributes, strict=True)
    return float(hypothetical_model_size(Domain(names, sizes), list(cliques)))


def measurement_plan(
    catalog: Catalog, domain: ModelDomain, spec: DPMarginals
) -> tuple[tuple[str, ...], ...]:
    """The marginals measured, chosen from the catalog and ``spec`` before any data is read.

    Every 1-way marginal (a split column's group and position together), the
    workload's, then every 2-way marginal of the columns' groups and the bins,
    fewest cells first (ties by name), each kept while the model's junction
    tree stays within ``max_model_mib`` and it has at most
    ``max_marginal_cells`` cells.

    Raises:
        ParameterError: for a workload naming what the model does not hold, or
            a workload whose model is larger than ``max_model_mib``.
    """
    cliques = [cm.attrs for cm in domain.columns.values()]
    cliques += [(b.attr,) for b in (domain.weight, *domain.magnitudes.values()) if b is not None]
    for names in spec.workload:
        clique = _workload_clique(catalog, domain, names)
        if clique not in cliques:
            cliques.append(clique)
    if _model_mib(domain, cliques) > spec.max_model_mib:
        raise ParameterError(
            f"the workload's model takes {_model_mib(domain, cliques):.1f} MiB, more than "
            f"max_model_mib = {spec.max_model_mib:g}: measure fewer or smaller marginals"
        )
    primary = [domain.primary(c) for c in domain.columns]
    primary += [b.attr for b in (domain.weight, *domain.magnitudes.values()) if b is not None]
    pairs = sorted(itertools.combinations(primary, 2), key=lambda p: (domain.cells(p), p))
    for pair in pairs:
        if pair in cliques or domain.cells(pair) > spec.max_marginal_cells:
            continue
        if _model_mib(domain, [*cliques, pair]) <= spec.max_model_mib:
            cliques.append(pair)
    return tuple(cliques)


# -- the accountant ---------------------------------------------------------------------------

#: The privacy loss distribution's discretisation (dp-accounting's pessimistic estimate).
_PLD_INTERVAL = 1e-3


def _pld_epsilon(sigma2: Fraction, marginals: int, delta: float) -> float:
    try:
        from dp_accounting.pld import privacy_loss_distribution as pld
    except ImportError:
        raise ConfigError(_NEEDS_DP) from None

    one = pld.from_discrete_gaussian_mechanism(
        math.sqrt(sigma2), value_discretization_interval=_PLD_INTERVAL
    )
    return float(one.self_compose(marginals).get_epsilon_for_delta(delta))


@functools.lru_cache(maxsize=64)
def calibrate(marginals: int, epsilon: float, delta: float) -> Fraction:
    """The least ``σ²`` (in thousandths) at which ``marginals`` measurements spend the budget.

    The budget is ``(epsilon, delta)``. Each measurement is a discrete
    Gaussian of sensitivity 1; their composition is accounted with the privacy loss distribution
    (``dp_accounting.pld``, pessimistic: an upper bound on the loss, for
    adding and for removing a record). The search halves an interval of
    ``σ`` and rounds ``σ²`` up, so the result spends at most ``(epsilon, delta)``.
    """
    low, high = 1e-3, 1.0
    while _pld_epsilon(Fraction(high**2), marginals, delta) > epsilon:
        low, high = high, high * 2
        if high > 1e7:
            raise ParameterError(f"epsilon {epsilon:g} and delta {delta:g} are too small")
    for _ in range(40):
        mid = (low + high) / 2
        if _pld_epsilon(Fraction(mid**2), marginals, delta) > epsilon:
            low = mid
        else:
            high = mid
    return Fraction(math.ceil(high**2 * 1000), 1000)


# -- the measurements -------------------------------------------------------------------------


def release_seed(secret: bytes, digest: bytes) -> bytes:
    """The key of a release's noise: the secret's keyed hash of the release's digest."""
    key = secret if len(secret) <= 64 else hashlib.blake2b(secret, digest_size=64).digest()
    return hashlib.blake2b(digest, key=key, digest_size=32, person=_PERSON).digest()


def _noise(seed: bytes, marginal: int, cells: int, sigma2: Fraction) -> npt.NDArray[np.int64]:
    """Discrete Gaussian noise of each cell of one marginal, from its own bit stream."""
    out = np.empty(cells, dtype=np.int64)
    for j in range(cells):
        stream = hashlib.blake2b(
            marginal.to_bytes(4, "big") + j.to_bytes(8, "big"),
            key=seed,
            digest_size=32,
            person=_PERSON,
        ).digest()
        out[j] = discrete_gaussian(KeyedBits(stream), sigma2)
    return out


def measure(
    records: Mapping[str, npt.NDArray[np.int64]],
    domain: ModelDomain,
    plan: Sequence[tuple[str, ...]],
    sigma2: Fraction,
    seed: bytes,
) -> list[npt.NDArray[np.int64]]:
    """Each planned marginal's counts plus discrete Gaussian noise of ``σ² = sigma2``.

    Args:
        records: Each record's value of each attribute (the data owner's, never published).
        domain: The model's attributes.
        plan: The marginals.
        sigma2: The noise's ``σ²`` (:func:`calibrate`).
        seed: The release's key (:func:`release_seed`): cell ``j`` of marginal
            ``i`` draws from the stream keyed by it and ``(i, j)``.

    Returns:
        The noisy counts of each marginal, shaped by its attributes.
    """
    sizes = domain.sizes
    out = []
    for i, clique in enumerate(plan):
        shape = tuple(sizes[a] for a in clique)
        flat = np.ravel_multi_index(tuple(records[a] for a in clique), shape)
        true = np.bincount(flat, minlength=math.prod(shape)).astype(np.int64)
        out.append((true + _noise(seed, i, true.size, sigma2)).reshape(shape))
    return out
