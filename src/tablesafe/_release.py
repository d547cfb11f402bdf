"""Tables answered from a ``dp-marginals`` release: post-processing of one DP measurement.

A site whose protection is :class:`~tablesafe.mechanisms._marginals.DPMarginals`
spends its whole budget once per microdata identity (:func:`open_release`):
it reads the records' attributes (:meth:`~tablesafe.engines.Engine.record_values`),
measures the planned marginals with exact discrete Gaussian noise keyed by
the secret, fits the model, and keeps all of it in the state store (a
:class:`ReleaseStore`), so every process and replica of the site serves the
same model, and a restart fits nothing. Every table is then a function of the
model (:func:`released_table`): its counts, weighted counts, sums, means and
percentages are read from the model's marginals; nothing reads the
microdata again, so no table spends anything: the privacy ledger shows the
release's one (epsilon, delta).
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from tablesafe._errors import RequestError
from tablesafe._protection import Protection
from tablesafe._request import Statistic, TableRequest
from tablesafe._rounding import Rounding
from tablesafe.catalog._magnitudes import magnitude_column
from tablesafe.cells._plan import DimensionPlan, MagnitudePlan, TabulationPlan
from tablesafe.mechanisms._marginal_model import MarginalModel, fit, zero_boxes
from tablesafe.mechanisms._marginals import (
    NAME,
    DPMarginals,
    ModelDomain,
    calibrate,
    measure,
    measurement_plan,
    model_domain,
    release_seed,
)
from tablesafe.output._table import ProtectedTable
from tablesafe.statistics import Source
from tablesafe.statistics._percentages import shares, shares_meta
from tablesafe.statistics._statistic import round_figures, roundings

if TYPE_CHECKING:
    from tablesafe.catalog._dataset import Dataset
    from tablesafe.engines._base import Engine
    from tablesafe.mechanisms._magnitudes import MagnitudeProtection

__all__ = [
    "Release",
    "ReleaseStore",
    "check_release_request",
    "open_release",
    "release_digest",
    "released_table",
]

#: The weighted figures' statement under ``dp-marginals``.
WEIGHTED_STATEMENT = (
    "the model's counts in bins of the weight times each bin's midpoint: post-processing of "
    "the release (no budget of its own); weights outside the site's weight_range count at "
    "its nearest end"
)


class TableBuilder(Protocol):
    """What a release reads of the :class:`~tablesafe.TableBuilder` that serves it."""

    dataset: Dataset
    protection: Protection
    engine: Engine
    magnitude_protection: MagnitudeProtection
    source: Source

    def release(self) -> Release | None:
        """The site's release."""
        ...


class ReleaseStore(Protocol):
    """Where a site keeps its releases (the state store): first writer wins."""

    def load_release(self, identity: str, digest: str) -> bytes | None:
        """The stored release, or ``None``."""
        ...

    def store_release(self, identity: str, digest: str, data: bytes) -> bytes:
        """Store ``data`` unless a release is stored already; the stored release."""
        ...


@dataclass(frozen=True, eq=False)
class Release:
    """One ``dp-marginals`` release: its plan, noise, measurements and fitted model.

    Attributes:
        spec: The owner's parameters.
        domain: The model's attributes.
        plan: The measured marginals.
        sigma2: The discrete Gaussian's ``σ²``.
        measured: The noisy counts of each marginal (DP, like every answer).
        model: The fitted model.
        digest: What identifies it: the microdata, the parameters, the secret.
    """

    spec: DPMarginals
    domain: ModelDomain
    plan: tuple[tuple[str, ...], ...]
    sigma2: Fraction
    measured: tuple[npt.NDArray[np.int64], ...]
    model: MarginalModel
    digest: str

    @property
    def sigma(self) -> float:
        """The noise's parameter ``σ`` (its standard deviation, to within 1e-6 relative)."""
        return float(np.sqrt(float(self.sigma2)))

    def describe(self) -> dict[str, Any]:
        """What a table states about the release: the budget, the noise, what was measured."""
        return {
            "method": NAME,
            "epsilon": self.spec.epsilon,
            "delta": self.spec.delta,
            "noise": "discrete Gaussian (Canonne, Kamath & Steinke 2020), from keyed bits",
            "sigma": round(self.sigma, 4),
            "accountant": "privacy loss distribution (dp-accounting), add or remove one record",
            "marginals": [list(c) for c in self.plan],
            "model": "Private-PGM (McKenna, Sheldon & Miklau 2019) over the marginals",
            "model_cells": int(sum(m.size for m in self.model.marginals)),
        }

    def to_bytes(self) -> bytes:
        """Everything but the parameters and the domain (rebuilt from the catalog)."""
        head = {
            "plan": [list(c) for c in self.plan],
            "sigma2": [self.sigma2.numerator, self.sigma2.denominator],
        }
        arrays: dict[str, Any] = {f"y{i}": y for i, y in enumerate(self.measured)}
        arrays["head"] = np.frombuffer(json.dumps(head).encode(), dtype=np.uint8)
        arrays["model"] = np.frombuffer(self.model.to_bytes(), dtype=np.uint8)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        return buf.getvalue()

    @classmethod
    def from_bytes(
        cls, data: bytes, spec: DPMarginals, domain: ModelDomain, digest: str
    ) -> Release:
        """The inverse of :meth:`to_bytes`."""
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            head = json.loads(z["head"].tobytes())
            plan = tuple(tuple(c) for c in head["plan"])
            return cls(
                spec,
                domain,
                plan,
                Fraction(*head["sigma2"]),
                tuple(np.asarray(z[f"y{i}"], dtype=np.int64) for i in range(len(plan))),
                MarginalModel.from_bytes(z["model"].tobytes()),
                digest,
            )


def release_digest(identity: str, spec: DPMarginals, domain: ModelDomain, secret: bytes) -> str:
    """The release's name: the microdata, the parameters, the model's attributes, the secret."""
    payload = json.dumps(
        {
            "identity": identity,
            "spec": spec.describe(),
            "attributes": [list(a) for a in domain.attributes],
            "secret": hashlib.blake2b(secret, digest_size=16).hexdigest(),
        },
        sort_keys=True,
    )
    return hashlib.blake2b(payload.encode(), digest_size=16, person=b"ts-release").hexdigest()


# -- making a release -----------------------------------------------------------------------


def _records(builder: TableBuilder, domain: ModelDomain) -> dict[str, npt.NDArray[np.int64]]:
    """Each record's value of each of the model's attributes (one query per value read)."""
    cat = builder.dataset.catalog
    plan = TabulationPlan(
        dimensions=tuple(DimensionPlan.from_variable(v) for v in cat.source_variables),
        universe=(),
        grouping_sets=(tuple(range(len(cat.source_variables))),),
        record_key=cat.record_key,
        weight=None,
    )
    bins = [b for b in (domain.weight, *domain.magnitudes.values()) if b is not None]
    reads = [(b.attr, b.source) for b in bins] or [("#key", cat.record_key)]
    out: dict[str, npt.NDArray[np.int64]] = {}
    for attr, column in reads:
        values = builder.engine.record_values(builder.dataset, plan, MagnitudePlan(attr, column))
        order = np.argsort(values.key, kind="stable")  # the same records in the same order
        if not out:
            shape = tuple(d.size for d in plan.dimensions)
            cells = np.unravel_index(values.cell[order], shape)
            for d, pos in zip(plan.dimensions, cells, strict=True):
                cm = domain.columns[d.column]
                for j, a in enumerate(cm.attrs):
                    out[a] = cm.index[pos, j]
        for b in bins:
            if b.attr == attr:
                out[attr] = b.index(values.x[order])
    return out


def make_release(builder: TableBuilder, digest: str) -> Release:
    """Measure the planned marginals and fit the model (the data owner's one spend)."""
    spec = builder.protection.mechanism
    assert isinstance(spec, DPMarginals) and builder.protection.secret is not None
    cat = builder.dataset.catalog
    domain = model_domain(cat, spec)
    plan = measurement_plan(cat, domain, spec)
    sigma2 = calibrate(len(plan), spec.epsilon, spec.delta)
    seed = release_seed(builder.protection.secret, digest.encode())
    measured = measure(_records(builder, domain), domain, plan, sigma2, seed)
    model = fit(
        domain, plan, measured, float(np.sqrt(float(sigma2))), zero_boxes(cat, domain),
        spec.iterations,
    )  # fmt: skip
    return Release(spec, domain, plan, sigma2, tuple(measured), model, digest)


_LOCK = threading.Lock()


def open_release(builder: TableBuilder, identity: str, store: ReleaseStore | None) -> Release:
    """The dataset's release: read from ``store``, or made once and stored (first writer wins).

    Two processes that make it at once store one of the two and both serve
    the stored one, so every process answers with the same model.
    """
    spec = builder.protection.mechanism
    assert isinstance(spec, DPMarginals) and builder.protection.secret is not None
    domain = model_domain(builder.dataset.catalog, spec)
    digest = release_digest(identity, spec, domain, builder.protection.secret)
    with _LOCK:
        data = None if store is None else store.load_release(identity, digest)
        if data is None:
            data = make_release(builder, digest).to_bytes()
            if store is not None:
                data = store.store_release(identity, digest, data)
    return Release.from_bytes(data, spec, domain, digest)


# -- what a release answers -----------------------------------------------------------------


def check_release_request(request: TableRequest, builder: TableBuilder) -> None:
    """Refuse what a ``dp-marginals`` site does not publish, naming what it does.

    Raises:
        RequestError: for standard errors, quantiles, another unit, weighted
            figures without the weight's bins, sums or means of a magnitude
            without bins.
    """
    spec = builder.protection.mechanism
    assert isinstance(spec, DPMarginals)
    cat = builder.dataset.catalog
    binned = [name for name, _ in spec.bins]
    supported = (
        "this site answers every table from one differentially private release "
        "(dp-marginals): counts"
        + (", weighted counts" if spec.weight_range and cat.weight else "")
        + ", percentages"
        + (f", sums and means of {', '.join(binned)}" if binned else "")
    )
    if request.replicates:
        raise RequestError(f"{supported}; it publishes no standard errors (se)")
    if request.quantiles:
        raise RequestError(f"{supported}; it publishes no medians or quantiles")
    if request.unit is not None and str(request.unit) != str(cat.unit):
        raise RequestError(f"{supported}; of the records' own unit ({cat.unit}) only")
    weighted = request.statistic != Statistic.COUNT and cat.weight is not None
    if weighted and not (spec.weight_range and cat.weight):
        raise RequestError(f"{supported}; ask for statistic count")
    for item in request.magnitudes:
        name = cat.magnitude(item.variable).name
        if name not in binned:
            raise RequestError(f"{supported}; not {item}")


def _indicator(builder: TableBuilder, column: str, slots: list[set[Any]]) -> np.ndarray:
    """0/1 over a column's model attributes, one trailing axis per slot (none for one slot)."""
    cm = _release_of(builder).domain.columns[column]
    arrays = [cm.indicator(s) for s in slots]
    return arrays[0] if len(arrays) == 1 else np.stack(arrays, axis=-1)


def _release_of(builder: TableBuilder) -> Release:
    release = builder.release()
    assert release is not None
    return release


def model_figures(
    builder: TableBuilder, plan: TabulationPlan, extra: tuple[str, ...] = ()
) -> npt.NDArray[np.float64]:
    """The model's counts of every cell of ``plan`` (extended shape), then an axis per ``extra``.

    Each dimension's category (and its total, the union of its categories)
    and each universe condition is a 0/1 array over its column's attributes;
    one ``einsum`` contracts them with the model's marginal over every
    attribute they read.
    """
    release = _release_of(builder)
    columns = [d.column for d in plan.dimensions] + [c for c, _ in plan.universe]
    attrs = [a for c in dict.fromkeys(columns) for a in release.domain.columns[c].attrs]
    attrs += list(extra)
    label = {a: i for i, a in enumerate(attrs)}
    operands: list[Any] = [release.model.marginal(attrs), [label[a] for a in attrs]]
    out = []
    for i, d in enumerate(plan.dimensions):
        slots = [set(m) for m in d.members] + [{c for m in d.members for c in m}]
        own = [label[a] for a in release.domain.columns[d.column].attrs]
        operands += [_indicator(builder, d.column, slots), [*own, len(attrs) + i]]
        out.append(len(attrs) + i)
    for column, codes in plan.universe:
        own = [label[a] for a in release.domain.columns[column].attrs]
        operands += [_indicator(builder, column, [set(codes)]), own]
    out += [label[a] for a in extra]
    return np.asarray(np.einsum(*operands, out, optimize="greedy"), dtype=np.float64)


def _magnitudes(
    builder: TableBuilder,
    request: TableRequest,
    plan: TabulationPlan,
    denominators: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64] | None],
    computed: npt.NDArray[np.bool_],
) -> dict[str, npt.NDArray[np.float64]] | None:
    """Sums and means: the model's counts by the magnitude's bins, at each bin's midpoint."""
    if not request.magnitudes:
        return None
    release = _release_of(builder)
    cat = builder.dataset.catalog
    weighted = request.statistic != Statistic.COUNT and cat.weight is not None
    prot = builder.magnitude_protection
    out: dict[str, npt.NDArray[np.float64]] = {}
    for item in request.magnitudes:
        kind, name = item.kind, cat.magnitude(item.variable).name
        bins = release.domain.magnitudes[name]
        if weighted:
            assert release.domain.weight is not None
            by = model_figures(builder, plan, (release.domain.weight.attr, bins.attr))
            total = np.einsum("...wb,w,b->...", by, release.domain.weight.values, bins.values)
        else:
            by = model_figures(builder, plan, (bins.attr,))
            total = by @ bins.values
        den = denominators[1] if weighted else denominators[0]
        assert den is not None
        value = total if kind == "sum" else np.divide(
            total, den, out=np.full(total.shape, np.nan), where=den > 0
        )  # fmt: skip
        rounding = Rounding.parse(prot.rounding if kind == "sum" else prot.mean_rounding)
        column = magnitude_column(kind, name, weighted=weighted)
        out[column] = np.where(computed, rounding.apply(value), np.nan)
    return out


#: What ``meta.release.count_margin_of_error`` is, in words (docs/dp-marginals.md).
MARGIN_STATEMENT = (
    "95% margin of error of each count from the measurement noise: 1.96 sigma sqrt(m), m the "
    "cells of the smallest measured marginal that holds every variable the count is defined "
    "by (the count's direct measurement); null where no measured marginal holds them: the "
    "count then rests on the model's assumption that those variables are independent given "
    "the others it measured, an error no interval states"
)


def _column_need(
    release: Release, column: str, allowed: frozenset[Any]
) -> tuple[tuple[str, ...], int]:
    """The attributes a column's condition reads, and how many of their cells it allows."""
    cm = release.domain.columns[column]
    if allowed >= set(cm.codes):
        return (), 1
    mask = cm.indicator(allowed)
    if len(cm.attrs) == 2:
        held = mask.sum(axis=1)
        size = cm.indicator(set(cm.codes)).sum(axis=1)
        if np.all((held == 0) | (held == size)):
            return cm.attrs[:1], int((held > 0).sum())
    return cm.attrs, int(mask.sum())


def count_margins(
    release: Release, plan: TabulationPlan, computed: npt.NDArray[np.bool_]
) -> list[Any]:
    """Each count's 95% margin of error (:data:`MARGIN_STATEMENT`), nested like the table's arrays.

    A function of the plan and the release's parameters only (never of a
    count), so publishing it tells nothing more.
    """
    sizes = release.domain.sizes
    slots = [
        [frozenset(m) for m in d.members] + [frozenset(c for m in d.members for c in m)]
        for d in plan.dimensions
    ]
    universe = {c: frozenset(v) for c, v in plan.universe}
    best: dict[frozenset[str], float | None] = {}
    out = np.full(plan.shape, np.nan)
    for cell in zip(*np.nonzero(computed), strict=True):
        allowed = dict(universe)
        for i, d in enumerate(plan.dimensions):
            here = slots[i][cell[i]]
            allowed[d.column] = allowed[d.column] & here if d.column in allowed else here
        needs = [_column_need(release, c, v) for c, v in allowed.items()]
        need = frozenset(a for attrs, _ in needs for a in attrs)
        if need not in best:
            free = [
                float(np.prod([sizes[a] for a in c if a not in need]))
                for c in release.plan
                if need <= set(c)
            ]
            best[need] = min(free) if free else None
        rest = best[need]
        if rest is not None:
            m = rest * float(np.prod([n for _, n in needs]))
            out[cell] = float(np.ceil(1.96 * release.sigma * np.sqrt(m)))
    return _nested(out)


def _nested(values: npt.NDArray[np.float64]) -> list[Any]:
    """``values`` as nested lists of ints, ``None`` for NaN."""
    if values.ndim == 1:
        return [None if np.isnan(x) else int(x) for x in values]
    return [_nested(v) for v in values]


def released_table(
    builder: TableBuilder,
    request: TableRequest,
    plan: TabulationPlan,
    computed: npt.NDArray[np.bool_],
    sz: npt.NDArray[np.bool_],
) -> ProtectedTable:
    """The table of ``plan`` read from the site's release (post-processing only).

    Every figure is the model's, rounded once: counts to whole numbers,
    weighted figures, sums and means as the site rounds them; percentages
    divide the model's figures before rounding. A figure is the same in every
    table that publishes it (one model), so tables agree with each other; a
    margin is the model's own figure, rounded, not the sum of rounded cells.

    Args:
        builder: The builder serving the site.
        request: The checked request.
        plan: Its plan.
        computed: The cells the table computes.
        sz: Its structural zeros (published as 0).
    """
    release = _release_of(builder)
    cat = builder.dataset.catalog
    raw = np.where(sz, 0.0, model_figures(builder, plan))
    counts = np.where(computed, np.rint(np.maximum(raw, 0.0)), 0).astype(np.int64)
    meta = builder.source.metadata(request, plan)
    meta["additivity"] = "none: every figure read from one model (dp-marginals)"
    meta["release"] = release.describe()
    meta["release"]["margin_of_error"] = MARGIN_STATEMENT
    meta["release"]["count_margin_of_error"] = count_margins(release, plan, computed)
    weighted = raw_w = None
    if request.statistic != Statistic.COUNT and cat.weight is not None:
        assert release.domain.weight is not None
        by = model_figures(builder, plan, (release.domain.weight.attr,))
        raw_w = np.where(sz, 0.0, by @ release.domain.weight.values)
        steps = roundings(builder.protection.round, request)
        weighted = round_figures(raw_w, steps, computed, additive=False)
        meta["weighted"] = {"method": WEIGHTED_STATEMENT, "rounding": str(builder.protection.round)}
    percentages = None
    if request.percentages:
        values = raw_w if raw_w is not None else counts.astype(np.float64)
        shared = shares(values, request, computed)
        percentages = {k.column_name: v for k, v in zip(request.percentages, shared, strict=True)}
        meta["percentages"] = shares_meta(of_weighted=weighted is not None)
    return ProtectedTable(
        request=request,
        dimensions=plan.dimensions,
        computed=computed,
        counts=None if request.statistic == Statistic.WEIGHTED else counts,
        weighted=weighted,
        perturbed=np.zeros(plan.shape, dtype=bool),
        adjusted=np.zeros(plan.shape, dtype=bool),
        structural_zero=sz,
        mechanism=builder.protection.describe(),
        metadata=meta,
        roundings=roundings(builder.protection.round, request),
        percentages=percentages,
        magnitudes=_magnitudes(builder, request, plan, (raw, raw_w), computed),
        base_counts=counts,
        catalog=cat,
        protected=True,
    )
