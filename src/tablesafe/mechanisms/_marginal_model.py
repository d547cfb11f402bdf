"""The model fitted to a ``dp-marginals`` release, and every marginal read from it.

:func:`fit` estimates a graphical model from the noisy marginals with
Private-PGM's mirror descent (McKenna, Sheldon & Miklau 2019; the ``mbi``
package, on JAX): the maximum-entropy distribution whose marginals fit the
measurements best in least squares, over the junction tree of the measured
marginals. Structural zeros of the catalog are measured as zeros too (public
facts, no budget).

What is kept is :class:`MarginalModel`: the junction tree's cliques and each
clique's calibrated marginal (numpy arrays, counts adding up to the model's
total). Every table is read from it by :meth:`MarginalModel.marginal`, in
numpy (no JAX, no compilation): the product of the cliques' marginals over
their separators on the smallest subtree holding the wanted attributes,
every other attribute summed out as soon as the factors holding it are
multiplied (variable elimination). Every
answer is a function of the model alone: post-processing of the
measurements, which spends nothing.
"""

from __future__ import annotations

import io
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe.catalog._catalog import Catalog
from tablesafe.mechanisms._marginals import ModelDomain, load_mbi

__all__ = ["MarginalModel", "fit", "zero_boxes"]

# One factor: its attributes and its array (one axis per attribute, in that order).
_Factor = tuple[tuple[str, ...], npt.NDArray[np.float64]]


@dataclass(frozen=True, eq=False)
class MarginalModel:
    """A fitted model: its junction tree's cliques and their calibrated marginals.

    Attributes:
        cliques: The junction tree's maximal cliques (attribute names).
        marginals: Each clique's marginal (counts; one axis per attribute).
        edges: The tree's edges (positions in ``cliques``).
        total: The model's total (its estimate of the number of records).
    """

    cliques: tuple[tuple[str, ...], ...]
    marginals: tuple[npt.NDArray[np.float64], ...]
    edges: tuple[tuple[int, int], ...]
    total: float

    def marginal(self, attrs: Sequence[str]) -> npt.NDArray[np.float64]:
        """The model's marginal over ``attrs`` (counts; one axis per attribute, in order).

        Raises:
            KeyError: for an attribute the model does not hold.
        """
        want = tuple(attrs)
        if not want:
            return np.asarray(float(self.marginals[0].sum()))
        for clique, arr in zip(self.cliques, self.marginals, strict=True):
            if set(want) <= set(clique):
                return _project((clique, arr), want)
        nodes, parent, root = self._subtree(want)
        # Every attribute that another node of the subtree or the answer needs; the
        # others are each in one clique only (the running intersection) and summed there.
        shared = Counter(a for n in nodes for a in self.cliques[n])
        factors: list[_Factor] = []
        for node in nodes:
            clique, arr = self.cliques[node], self.marginals[node]
            keep = tuple(a for a in clique if a in want or shared[a] > 1)
            factor: _Factor = (keep, _project((clique, arr), keep))
            if node != root:  # the clique given its separator with its parent
                sep = tuple(a for a in clique if a in self.cliques[parent[node]])
                factor = (keep, _divide(factor, (sep, _project((clique, arr), sep))))
            factors.append(factor)
        return _eliminate(factors, want)

    def _subtree(self, want: tuple[str, ...]) -> tuple[list[int], dict[int, int], int]:
        """The smallest subtree holding ``want``: its nodes deepest first, parents and root."""
        holds = [len(set(want) & set(c)) for c in self.cliques]
        root = int(np.argmax(holds))
        adjacent: dict[int, list[int]] = {i: [] for i in range(len(self.cliques))}
        for one, two in self.edges:
            adjacent[one].append(two)
            adjacent[two].append(one)
        parent, depth, order = {root: -1}, {root: 0}, [root]
        for node in order:  # breadth first from the root
            for nxt in sorted(adjacent[node]):
                if nxt not in depth:
                    parent[nxt], depth[nxt] = node, depth[node] + 1
                    order.append(nxt)
        nodes = {root}
        for a in want:
            if a in self.cliques[root]:
                continue
            at = min((n for n in order if a in self.cliques[n]), key=lambda n: (depth[n], n))
            while at not in nodes:
                nodes.add(at)
                at = parent[at]
        kept = sorted(nodes, key=lambda n: (-depth[n], n))
        return kept, {n: parent[n] for n in kept if n != root}, root

    # -- storage -------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The model as one ``.npz`` file's bytes (its arrays exactly)."""
        head = {"cliques": [list(c) for c in self.cliques], "edges": [list(e) for e in self.edges]}
        arrays: dict[str, Any] = {f"m{i}": m for i, m in enumerate(self.marginals)}
        arrays["head"] = np.frombuffer(json.dumps(head).encode(), dtype=np.uint8)
        arrays["total"] = np.float64(self.total)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> MarginalModel:
        """The inverse of :meth:`to_bytes`."""
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            head = json.loads(z["head"].tobytes())
            cliques = tuple(tuple(c) for c in head["cliques"])
            return cls(
                cliques,
                tuple(np.asarray(z[f"m{i}"], dtype=np.float64) for i in range(len(cliques))),
                tuple((int(a), int(b)) for a, b in head["edges"]),
                float(z["total"]),
            )


def _project(factor: _Factor, want: tuple[str, ...]) -> npt.NDArray[np.float64]:
    """The factor summed over the attributes not in ``want``, axes in ``want``'s order."""
    attrs, arr = factor
    gone = tuple(i for i, a in enumerate(attrs) if a not in want)
    summed = arr.sum(axis=gone) if gone else arr
    left = [a for a in attrs if a in want]
    return np.ascontiguousarray(np.transpose(summed, [left.index(a) for a in want]))


def _aligned(factor: _Factor, attrs: tuple[str, ...]) -> npt.NDArray[np.float64]:
    """The factor's array with an axis for each of ``attrs`` (length 1 where it has none)."""
    own, arr = factor
    arr = np.transpose(arr, [own.index(a) for a in attrs if a in own])
    return arr.reshape([arr.shape[[a for a in attrs if a in own].index(a)] if a in own else 1
                        for a in attrs])  # fmt: skip


def _multiply(f: _Factor, g: _Factor) -> _Factor:
    attrs = f[0] + tuple(a for a in g[0] if a not in f[0])
    return attrs, _aligned(f, attrs) * _aligned(g, attrs)


def _eliminate(factors: list[_Factor], want: tuple[str, ...]) -> npt.NDArray[np.float64]:
    """The product of ``factors`` summed over every attribute not in ``want``.

    Variable elimination: each attribute is summed out as soon as the factors
    holding it are multiplied, the one whose product is smallest first (ties
    by name), so no array is much larger than a clique with the wanted
    attributes. Elementwise products and numpy sums only: the same bytes on
    every machine and thread count.
    """
    sizes = {a: n for attrs, arr in factors for a, n in zip(attrs, arr.shape, strict=True)}

    def cost(attr: str) -> int:
        return math.prod(sizes[b] for b in {b for f in factors if attr in f[0] for b in f[0]})

    while gone := sorted({a for f in factors for a in f[0]} - set(want)):
        attr = min(gone, key=lambda a: (cost(a), a))
        product: _Factor = ((), np.ones(()))
        for f in [f for f in factors if attr in f[0]]:
            product = _multiply(product, f)
        factors = [f for f in factors if attr not in f[0]]
        left = tuple(a for a in product[0] if a != attr)
        factors.append((left, _project(product, left)))
    result: _Factor = ((), np.ones(()))
    for f in factors:
        result = _multiply(result, f)
    return _project(result, want)


def _divide(f: _Factor, g: _Factor) -> npt.NDArray[np.float64]:
    """``f / g`` (``g``'s attributes among ``f``'s), 0 where ``g`` is 0."""
    den = np.broadcast_to(_aligned(g, f[0]), f[1].shape)
    return np.divide(f[1], den, out=np.zeros_like(f[1]), where=den > 0)


# -- structural zeros -------------------------------------------------------------------------


def zero_boxes(catalog: Catalog, domain: ModelDomain) -> list[_Factor]:
    """The catalog's structural zeros as 0/1 masks over the model's attributes.

    A column's codes are read by its group alone when they are whole groups.
    """
    out: list[_Factor] = []
    for zero in catalog.structural_zeros:
        factor: _Factor = ((), np.ones(()))
        for name, codes in zero.codes.items():
            var = catalog.variable(name)
            cm = domain.columns[var.column]
            allowed = {s for c in codes for s in var.source_codes(c)}
            mask, attrs = cm.indicator(allowed), cm.attrs
            if len(attrs) == 2:
                held = mask.sum(axis=1)
                size = cm.indicator(set(cm.codes)).sum(axis=1)
                if np.all((held == 0) | (held == size)):
                    attrs, mask = attrs[:1], (held > 0).astype(np.float64)
            factor = _multiply(factor, (attrs, mask))
        out.append(factor)
    return out


# -- the fit ----------------------------------------------------------------------------------


def fit(
    domain: ModelDomain,
    plan: Sequence[tuple[str, ...]],
    measured: Sequence[npt.NDArray[np.int64]],
    sigma: float,
    zeros: Sequence[_Factor],
    iterations: int,
) -> MarginalModel:
    """The graphical model fitted to the measurements (Private-PGM's mirror descent).

    Args:
        domain: The model's attributes.
        plan: The measured marginals.
        measured: Their noisy counts.
        sigma: The noise's standard deviation (each measurement's weight).
        zeros: Structural zeros (:func:`zero_boxes`), measured as exact zeros
            with the same weight as a measurement.
        iterations: Mirror descent's iterations.
    """
    load_mbi()
    from mbi import Domain, LinearMeasurement, estimation, marginal_oracles
    from mbi.junction_tree import make_junction_tree
    from mbi.marginal_loss import WeightedQuery

    names, sizes = zip(*domain.attributes, strict=True)
    dom = Domain(names, sizes)
    measurements = [
        LinearMeasurement(np.asarray(y, dtype=np.float64).ravel(), tuple(c), stddev=sigma)
        for c, y in zip(plan, measured, strict=True)
    ]
    for attrs, mask in zeros:
        measurements.append(
            LinearMeasurement(
                np.zeros(mask.size), attrs, stddev=sigma, query=WeightedQuery(mask.ravel())
            )
        )
    model = estimation.MirrorDescent().estimate(dom, measurements, iters=iterations)
    cliques = [m.clique for m in measurements]
    tree, _ = make_junction_tree(dom, cliques)
    nodes = list(tree.nodes)
    calibrated = marginal_oracles.message_passing_hugin(
        model.potentials.expand(nodes), float(model.total)
    )
    out = [calibrated.project(c) for c in nodes]
    return MarginalModel(
        tuple(tuple(f.domain.attributes) for f in out),
        tuple(np.asarray(f.datavector(flatten=False), dtype=np.float64) for f in out),
        tuple(sorted((nodes.index(a), nodes.index(b)) for a, b in tree.edges)),
        float(model.total),
    )


def describe_model(model: MarginalModel) -> Mapping[str, Any]:
    """The model's size, for the release's public description."""
    return {
        "cliques": len(model.cliques),
        "cells": int(sum(m.size for m in model.marginals)),
    }
