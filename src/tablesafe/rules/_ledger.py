"""The privacy ledger: the formal privacy loss of everything served from one microdata.

DESIGN decision 11: formal privacy loss is composed over the distinct noisy
figures each record is in. Under record-set consistency (decision 2) a
figure published again carries the same noise, so it spends nothing; a
figure is identified by what is published (its kind: the count, the
weighted count, the sum of a variable, under one protection) and by its
canonical definition in microdata columns and codes (the cell's box), never
by the table around it. The same records asked under another definition
are another figure (docs/attacks.md, "Asking a cell under several
definitions").

**Loss of a record.** The composition of the distinct figures whose
definition holds it, by a real accountant: each figure's privacy loss
distribution (from its mechanism's actual output distributions) composed
over the record's figures, epsilon stated at the site's delta
(``privacy_budget_delta``, :mod:`tablesafe.rules._ledger_pld`). Figures of
one mechanism are alike to the accountant, so the loss is a function of how
many figures of each mechanism the record is in. A figure with no epsilon
(weighted figures and their standard errors, sums under the cell-key
method, drop/add-up-to-q of records) is counted but not composed. For
mechanisms that are not DP (ckm, q, PRAM, a ptable file) the distributions
are still the ptable's, between neighbouring counts: the figures are those
of a mechanism that is not DP, said so wherever the ledger is shown (their
epsilon is infinite at a small delta when an outcome only one neighbour can
give has a larger chance).

**Which records.** The largest loss is taken over every record that could
exist (every combination of codes), from the published definitions alone
(:mod:`tablesafe.rules._ledger_loss`): it is the add-one-record bound, and
a budget refusal depends on what was published, never on which records
the microdata hold. The distribution over the microdata's own records is
the owner's report (:mod:`tablesafe.service._ledger`).

**Representation.** Per microdata identity, a set of 8-byte digests of the
published figures (dataset-wide and per API key) to tell new figures from
published ones, and per grouping set and kind of each table that spent
something, one :class:`~tablesafe.rules._ledger_loss.Family`. Nothing grows
with the number of records; the state store keeps one row per table that
spent something (its definitions and digests), replayed in order.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import BudgetExhausted
from tablesafe._protection import CellwiseMechanism, Protection
from tablesafe._protection_limits import Additivity
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._definitions import code_order, definition_text
from tablesafe.catalog._magnitudes import MAGNITUDE_SCALE
from tablesafe.catalog._variables import Code
from tablesafe.cells._plan import TabulationPlan
from tablesafe.output._table import ProtectedTable
from tablesafe.ptable._ptable import PTable
from tablesafe.rules._ledger_loss import Family, Loss, make_family, max_loss
from tablesafe.rules._ledger_pld import (
    ACCOUNTANT,
    DEFAULT_DELTA,
    allowed,
    approx_descriptor,
    dlap_descriptor,
    epsilon_at,
    ptable_descriptor,
    pure_descriptor,
    release_descriptor,
    within,
)
from tablesafe.state._store import register_ledger

__all__ = [
    "BudgetExhausted",
    "Budgets",
    "FigureGroup",
    "Kind",
    "LedgerIndex",
    "TableFigures",
    "TableShape",
    "release_figures",
    "table_figures",
]


# -- what a table publishes ------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """What a family of figures publishes about its record sets, and what each spends.

    Attributes:
        name: ``count``, ``weighted`` or ``sum:VAR``.
        epsilon: Per figure, between neighbouring data (one record more or
            less); ``None`` where the mechanism states none.
        delta: Per figure, at that epsilon.
        dp: Whether the mechanism is designed to be DP (else the figures are
            a bound on a mechanism that is not).
        key: A digest of the protection that draws the noise (mechanism,
            parameters, seeds, a hash of the secret): another protection's
            figure of the same cell has other noise.
        privacy: What one figure spends, as the accountant composes it
            (:mod:`tablesafe.rules._ledger_pld`'s descriptor); empty where the
            mechanism states no epsilon.
    """

    name: str
    epsilon: float | None
    delta: float | None
    dp: bool
    key: int
    privacy: str = ""

    def descriptor(self) -> str:
        """:attr:`privacy`, or for a figure known only by (epsilon, delta) their PLD's."""
        if self.privacy or self.epsilon is None:
            return self.privacy
        return approx_descriptor(self.epsilon, self.delta or 0.0)

    def weights(self) -> tuple[float, ...]:
        """Per figure, each of :data:`~tablesafe.rules._ledger_loss.QUANTITIES`."""
        if self.epsilon is None:
            return (0.0, 0.0, 0.0, 1.0, 1.0)
        return (self.epsilon, self.delta or 0.0, self.epsilon**2 / 2, 1.0, 0.0)


@dataclass(frozen=True, eq=False)
class FigureGroup:
    """The noisy figures of one grouping set of a table, of one kind.

    Attributes:
        kind: Position in :attr:`TableFigures.kinds`.
        dims: Positions of the grouping set's dimensions.
        mask: Which cells of the grouping set's grid are figures.
    """

    kind: int
    dims: tuple[int, ...]
    mask: npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class TableFigures:
    """Every noisy figure a table publishes, with a digest each.

    Attributes:
        kinds: What is published.
        box: The table's universe, per restricted column (a dimension's
            column too when its categories leave codes out).
        dims: Per dimension, its column and each category's codes in ``box``.
        groups: The figures, grouping set by grouping set.
        digests: One per figure (groups in order, cells in C order): a hash
            of the kind and the canonical definition.
    """

    kinds: tuple[Kind, ...]
    box: tuple[tuple[str, tuple[Code, ...]], ...]
    dims: tuple[tuple[str, tuple[tuple[Code, ...], ...]], ...]
    groups: tuple[FigureGroup, ...]
    digests: npt.NDArray[np.uint64]

    def spec(self) -> str:
        """Everything but the digests as JSON: the state store's row."""
        return json.dumps(
            {
                "kinds": [[k.name, k.epsilon, k.delta, k.dp, k.key, k.privacy] for k in self.kinds],
                "box": [[c, list(v)] for c, v in self.box],
                "dims": [[c, [list(m) for m in ms]] for c, ms in self.dims],
                "groups": [
                    [
                        g.kind,
                        list(g.dims),
                        list(g.mask.shape),
                        np.packbits(g.mask.ravel()).tobytes().hex(),
                    ]
                    for g in self.groups
                ],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_row(cls, spec: str, digests: bytes) -> TableFigures:
        """The inverse of :meth:`spec` and ``digests.tobytes()``."""
        doc = json.loads(spec)
        groups = []
        for kind, dims, shape, bits in doc["groups"]:
            size = int(np.prod(shape))
            flat = np.unpackbits(np.frombuffer(bytes.fromhex(bits), dtype=np.uint8))[:size]
            groups.append(FigureGroup(int(kind), tuple(dims), flat.astype(bool).reshape(shape)))
        return cls(
            # Rows written before the accountant have no descriptor: their (epsilon, delta)'s.
            kinds=tuple(
                Kind(str(n), e, d, bool(p), int(k), str(rest[0]) if rest else "")
                for n, e, d, p, k, *rest in doc["kinds"]
            ),
            box=tuple((str(c), tuple(v)) for c, v in doc["box"]),
            dims=tuple((str(c), tuple(tuple(m) for m in ms)) for c, ms in doc["dims"]),
            groups=tuple(groups),
            digests=np.frombuffer(digests, dtype="<u8").astype(np.uint64),
        )

    def group_digests(self) -> list[npt.NDArray[np.uint64]]:
        """The digests of each group, in order."""
        ends = np.cumsum([int(g.mask.sum()) for g in self.groups])
        return np.split(self.digests, ends[:-1]) if len(ends) else []

    @property
    def repeat_free(self) -> bool:
        """Whether the table has no figure at all."""
        return self.digests.size == 0


def _hash64(payload: bytes) -> int:
    return int.from_bytes(
        hashlib.blake2b(payload, digest_size=8, person=b"ts-ledger").digest(), "little"
    )


def _kind(
    name: str,
    protection: Any,
    epsilon: float | None,
    delta: float | None,
    dp: bool,
    secret: bytes | None,
    privacy: str = "",
) -> Kind:
    secret_hash = "" if not secret else hashlib.blake2b(secret, digest_size=8).hexdigest()
    payload = json.dumps([name, protection, secret_hash], sort_keys=True, default=str)
    if epsilon is not None and not math.isfinite(epsilon):
        epsilon, delta, privacy = None, None, ""
    return Kind(name, epsilon, delta, dp, _hash64(payload.encode()), privacy if epsilon else "")


def _count_kind(protection: Protection, unit: str | None = None) -> Kind:
    """The counts' kind: the ptable's figures; a table of another unit counts other things."""
    mech = protection.effective_mechanism()
    eps = delta = None
    dp = False
    descriptor = ""
    privacy = getattr(mech, "privacy", None)
    if isinstance(mech, CellwiseMechanism) and privacy is not None:
        fig = privacy()
        eps, delta = float(fig.epsilon), float(fig.delta)
        dp = isinstance(getattr(mech, "parameters", {}).get("epsilon"), int | float)
        if isinstance(mech, PTable):
            descriptor = _ptable_privacy(mech)
    name = "count" if unit is None else f"count:{unit}"
    return _kind(name, protection.describe(), eps, delta, dp, protection.secret, descriptor)


def _ptable_privacy(table: PTable) -> str:
    """The accountant's descriptor of a ptable, computed once per ptable object."""
    known: str | None = table.__dict__.get("_ledger_privacy")
    if known is None:
        known = ptable_descriptor(table)
        object.__setattr__(table, "_ledger_privacy", known)
    return known


@dataclass(frozen=True)
class TableShape:
    """What the ledger reads of a table: which cells it publishes and what statistics.

    Attributes:
        request: The request (its statistic, sums and quantiles).
        computed: The cells of the table.
        structural_zero: Its structural zeros.
        weighted: Whether it publishes weighted figures.
        withheld: Cells withheld (not published), or None.
    """

    request: Any
    computed: npt.NDArray[np.bool_]
    structural_zero: npt.NDArray[np.bool_]
    weighted: bool
    withheld: npt.NDArray[np.bool_] | None = None

    @classmethod
    def of(cls, table: ProtectedTable) -> TableShape:
        """The shape of a protected table."""
        return cls(
            table.request,
            table.computed,
            table.structural_zero,
            table.weighted is not None,
            table.withheld,
        )


def _noisy_masks(
    table: TableShape,
    protection: Protection,
    magnitudes: Any,
    catalog: Catalog,
    unit: str | None = None,
) -> list[tuple[Kind, npt.NDArray[np.bool_]]]:
    """Per kind, the cells whose figures carry noise of their own (extended arrays).

    Additive tables (aggregate, IPF's weighted figures, record-level) draw
    noise for their inner cells only: their margins are sums of published
    figures. The universe-size rule decides on the table's protected total,
    a function of these figures (:func:`tablesafe.rules._rules.table_universe_size`),
    so it adds none. A table of another unit (households) counts figures of
    another kind.
    """
    computed = table.computed
    if table.withheld is not None:
        computed = computed & ~table.withheld
    inner = np.zeros_like(computed)
    inner[tuple(slice(0, s - 1) for s in computed.shape)] = True
    sz = table.structural_zero
    mech = protection.mechanism
    additive = protection.record_level or protection.additivity == Additivity.AGGREGATE
    count = computed if mech is None else (inner if additive else computed) & ~sz
    out = [(_count_kind(protection, unit), count)]
    if table.weighted:
        indep = protection.additivity == Additivity.INDEPENDENT and not protection.record_level
        cells = computed if mech is None else ((computed if indep else inner) & ~sz)
        desc = {"protection": protection.describe(), "weight_noise": protection.weight_noise}
        name = "weighted" if unit is None else f"weighted:{unit}"
        out.append((_kind(name, desc, None, None, False, protection.secret), cells))
    return out + _magnitude_masks(table, protection, magnitudes, catalog)


def _magnitude_masks(
    table: TableShape, protection: Protection, magnitudes: Any, catalog: Catalog
) -> list[tuple[Kind, npt.NDArray[np.bool_]]]:
    """Sums (means are sums over counts) and quantiles: a figure per cell computed each.

    Under DP for magnitudes each spends the site's epsilon for magnitudes;
    otherwise none is stated.
    """
    method = str(getattr(magnitudes, "method", "none"))
    eps = float(magnitudes.epsilon) if method == "dp" else None
    desc = magnitudes.describe() if magnitudes is not None else {"method": "none"}
    computed = table.computed if table.withheld is None else table.computed & ~table.withheld
    cells = computed if method == "none" else computed & ~table.structural_zero
    request = table.request
    names: dict[str, float | None] = {
        f"sum:{(m := catalog.magnitude(item.split(':', 1)[1])).name}": m.bound
        for item in request.magnitudes
    }
    names.update(dict.fromkeys(request.quantiles))
    out = []
    for name, bound in names.items():
        privacy = ""
        if eps is not None:
            # A DP sum's discrete Laplace on its grid; a DP quantile's exponential mechanism.
            units = math.ceil(bound * MAGNITUDE_SCALE) if bound is not None else 0
            privacy = dlap_descriptor(eps, units) if units else pure_descriptor(eps)
        kind = _kind(name, desc, eps, 0.0 if eps else None, eps is not None, protection.secret)
        out.append((replace(kind, privacy=privacy), cells))
    return out


def table_figures(
    plan: TabulationPlan,
    table: ProtectedTable | TableShape,
    protection: Protection,
    catalog: Catalog,
    *,
    magnitudes: Any = None,
) -> TableFigures:
    """Every noisy figure of a table, with its digest (the ledger's unit).

    Args:
        plan: The table's plan (its dimensions, universe and grouping sets).
        table: The protected table (which cells it computed, structural zeros).
        protection: The protection that drew it.
        catalog: The dataset's catalog (every code of each column).
        magnitudes: The protection of sums and means, if the table has any.
    """
    unit = None if plan.unit is None else str(plan.unit[0])
    shape = table if isinstance(table, TableShape) else TableShape.of(table)
    masks = _noisy_masks(shape, protection, magnitudes, catalog, unit)
    return _figures(plan, catalog, masks)


def release_figures(protection: Protection, release: Any) -> TableFigures:
    """The one figure of a ``dp-marginals`` release, which every table of the site publishes.

    The release (its measurements, hence its model and every table read from
    it) holds every record, and spends the site's whole (epsilon, delta) once:
    one figure over every record (no universe, no dimension), whose digest is
    its kind's, composed by the accountant as the release's discrete Gaussian
    measurements (:func:`~tablesafe.rules._ledger_pld.release_descriptor`).
    Every table of the site brings this figure: the first spends it, every
    other is a repeat and spends nothing.

    Args:
        protection: The site's protection (``dp-marginals``).
        release: Its release (:class:`tablesafe._release.Release`: ``spec``,
            ``sigma2``, ``plan``).
    """
    spec = release.spec
    privacy = release_descriptor(spec.epsilon, spec.delta, str(release.sigma2), len(release.plan))
    kind = _kind(
        "release", protection.describe(), spec.epsilon, spec.delta, True, protection.secret, privacy
    )
    group = FigureGroup(0, (), np.ones((), dtype=bool))
    return TableFigures((kind,), (), (), (group,), np.array([kind.key], dtype=np.uint64))


def _figures(
    plan: TabulationPlan,
    catalog: Catalog,
    masks: list[tuple[Kind, npt.NDArray[np.bool_]]],
) -> TableFigures:
    """The figures of ``masks`` (per kind, its noisy cells), digested from their definitions."""
    all_codes = {v.column: v.codes for v in catalog.source_variables}
    universe = {c: frozenset(v) for c, v in plan.universe}
    allowed = dict(universe)
    for d in plan.dimensions:
        union = frozenset(c for m in d.members for c in m)
        allowed[d.column] = union & universe.get(d.column, union)
    box = {c: v for c, v in allowed.items() if not v >= frozenset(all_codes.get(c, ()))}
    dims = tuple(
        (d.column, tuple(tuple(c for c in m if c in allowed[d.column]) for m in d.members))
        for d in plan.dimensions
    )

    full = {c: frozenset(v) for c, v in all_codes.items()}

    def piece(column: str, codes: frozenset[Code]) -> int:
        return _piece(column, codes, full.get(column, frozenset()))

    fixed = sum(piece(c, v) for c, v in allowed.items() if c not in {d for d, _ in dims})
    totals = [piece(c, allowed[c]) for c, _ in dims]
    slots = [np.array([piece(c, frozenset(m)) for m in ms], dtype=np.uint64) for c, ms in dims]
    kinds, groups, digests = [], [], []
    shape = plan.shape
    sets = dict.fromkeys((*plan.grouping_sets, ()))
    for k, (kind, noisy) in enumerate(masks):
        kinds.append(kind)
        for gs in sets:
            at = tuple(slice(0, s - 1) if i in gs else s - 1 for i, s in enumerate(shape))
            mask = np.asarray(noisy[at], dtype=bool).copy()
            for axis, i in enumerate(gs):  # a category that holds no possible record
                empty = np.array([not m for m in dims[i][1]])
                mask[(slice(None),) * axis + (empty,)] = False
            if not mask.any():
                continue
            base = np.uint64(
                (kind.key + fixed + sum(totals[i] for i in range(len(dims)) if i not in gs)) % 2**64
            )
            grid = np.full(mask.shape, base, dtype=np.uint64)
            for axis, i in enumerate(gs):
                grid = grid + slots[i].reshape([-1 if a == axis else 1 for a in range(len(gs))])
            groups.append(FigureGroup(k, tuple(gs), mask))
            digests.append(grid[mask])
    return TableFigures(
        tuple(kinds),
        tuple((c, tuple(sorted(v, key=_order))) for c, v in sorted(box.items())),
        dims,
        tuple(groups),
        np.concatenate(digests) if digests else np.zeros(0, dtype=np.uint64),
    )


@functools.lru_cache(maxsize=1 << 16)
def _piece(column: str, codes: frozenset[Code], full: frozenset[Code]) -> int:
    """One column's condition, digested as the guard's canonical form writes it (0: all codes)."""
    if codes >= full:
        return 0
    return _hash64(definition_text(((column, tuple(sorted(codes, key=code_order))),)).encode())


def _order(code: Code) -> tuple[int, int, str]:
    return (0, code, "") if isinstance(code, int) else (1, 0, str(code))


# -- the account --------------------------------------------------------------------------


@dataclass(frozen=True)
class Budgets:
    """A dataset's privacy budgets (``[datasets.rules]``): epsilon, for all keys and per key.

    Attributes:
        epsilon: The dataset's budget on epsilon, or ``None``.
        epsilon_per_key: Each API key's, or ``None``.
        delta: The delta at which epsilon is measured (``privacy_budget_delta``).
    """

    epsilon: float | None = None
    epsilon_per_key: float | None = None
    delta: float = DEFAULT_DELTA


class _Digests:
    """A set of figure digests: sorted arrays whose sizes at least halve from one to the next.

    8 bytes a figure (a Python set took about 60); a lookup is a binary search
    in each of O(log n) arrays; an addition merges the last arrays while the
    one before is at most twice as large (sorting two sorted runs is one merge).
    """

    def __init__(self) -> None:
        self.chunks: list[npt.NDArray[np.uint64]] = []

    def __len__(self) -> int:
        return sum(int(c.size) for c in self.chunks)

    def contains(self, queries: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
        """Which of ``queries`` (sorted: each search starts near the last one's end) are in."""
        found = np.zeros(queries.size, dtype=bool)
        for chunk in self.chunks:
            pos = np.minimum(np.searchsorted(chunk, queries), chunk.size - 1)
            found |= chunk[pos] == queries
        return found

    def add(self, digests: npt.NDArray[np.uint64]) -> None:
        """Add digests not yet in the set."""
        if digests.size == 0:
            return
        self.chunks.append(np.sort(digests))
        while len(self.chunks) > 1 and self.chunks[-2].size <= 2 * self.chunks[-1].size:
            last = self.chunks.pop()
            self.chunks[-1] = np.sort(np.concatenate([self.chunks[-1], last]), kind="stable")


@dataclass(frozen=True)
class Worst:
    """The figures of each mechanism the most loaded possible record is in.

    Attributes:
        counts: Per descriptor (:mod:`tablesafe.rules._ledger_pld`), how many.
        exact: Whether one record is in all these counts at once, and every
            search finished (else each count is the most of some record: the
            epsilon they compose to is an upper bound).
    """

    counts: dict[str, int]
    exact: bool

    def epsilon(self, delta: float) -> float:
        """The epsilon these figures compose to at ``delta``."""
        return epsilon_at(self.counts, delta)


@dataclass
class Account:
    """What one microdata identity (or one API key on it) has been given.

    Attributes:
        families: The figures, as families (:mod:`tablesafe.rules._ledger_loss`).
        bound: Per descriptor, an upper bound on the figures of that mechanism
            any possible record is in (each table adds the most it can give
            one record); it only decides when the exact search is needed.
        tables: Tables that brought new figures.
        figures: Distinct figures.
        kinds: Distinct figures per kind (name, epsilon, delta, dp).
    """

    families: list[Family] = field(default_factory=list)
    seen: _Digests = field(default_factory=_Digests)
    bound: dict[str, float] = field(default_factory=dict)
    tables: int = 0
    figures: int = 0
    kinds: dict[tuple[str, float | None, float | None, bool], int] = field(default_factory=dict)

    def fresh(self, figures: TableFigures) -> npt.NDArray[np.bool_]:
        """Which of the table's figures this account has not been given (a repeat once)."""
        fresh = np.zeros(figures.digests.size, dtype=bool)
        if figures.digests.size:
            # Sorted and unique: a digest twice in one table (a total that is its only
            # category) counts once.
            unique, first = np.unique(figures.digests, return_index=True)
            fresh[first[~self.seen.contains(unique)]] = True
        return fresh

    def families_for(
        self, figures: TableFigures, fresh: npt.NDArray[np.bool_], *, new: bool
    ) -> list[Family]:
        """The families of the table's ``fresh`` figures."""
        out = []
        box = {c: frozenset(v) for c, v in figures.box}
        ends = np.cumsum([int(g.mask.sum()) for g in figures.groups])
        for g, end in zip(figures.groups, ends, strict=True):
            counts = np.zeros(g.mask.shape, dtype=np.int64)
            counts[g.mask] = fresh[end - int(g.mask.sum()) : end]
            kind = figures.kinds[g.kind]
            fam = make_family(
                kind.weights(),
                box,
                [figures.dims[i] for i in g.dims],
                counts,
                new=new,
                privacy=kind.descriptor(),
            )
            if fam is not None:
                out.append(fam)
        return out

    def add(self, figures: TableFigures, fresh: npt.NDArray[np.bool_]) -> None:
        """Take the table's ``fresh`` figures into the account."""
        if not fresh.any():
            return
        fams = self.families_for(figures, fresh, new=False)
        self.families.extend(fams)
        for d, n in _tops(fams).items():
            self.bound[d] = self.bound.get(d, 0.0) + n
        self.seen.add(figures.digests[fresh])
        self.tables += 1
        self.figures += int(fresh.sum())
        ends = np.cumsum([int(g.mask.sum()) for g in figures.groups])
        for g, end in zip(figures.groups, ends, strict=True):
            k = figures.kinds[g.kind]
            n = int(fresh[end - int(g.mask.sum()) : end].sum())
            if n:
                key = (k.name, k.epsilon, k.delta, k.dp)
                self.kinds[key] = self.kinds.get(key, 0) + n

    def largest(self, q: int = 0) -> Loss:
        """The largest quantity ``q`` (:data:`QUANTITIES`) of any possible record."""
        return max_loss(self.families, q)

    def worst(self) -> Worst:
        """The figures of each mechanism of the most loaded possible record."""
        worst = worst_counts(self.families)
        if worst.exact:
            self.bound = {d: float(n) for d, n in worst.counts.items()}
        return worst


def _tops(families: list[Family]) -> dict[str, float]:
    """Per descriptor, the most figures one record can take from ``families`` (a bound)."""
    out: dict[str, float] = {}
    for f in families:
        if f.privacy:
            out[f.privacy] = out.get(f.privacy, 0.0) + f.top_count()
    return out


def _of(descriptor: str) -> Callable[[Family], float]:
    """A weight counting the figures of one descriptor."""
    return lambda f: float(f.privacy == descriptor)


def worst_counts(families: list[Family], *, touched_only: bool = False) -> Worst:
    """Per descriptor, the most figures of it any possible record is in.

    One search per mechanism; with several, one more (every figure weighing
    1) tells whether one record is in all those counts at once, else the
    counts are each some record's most and compose to an upper bound.

    Args:
        families: The figures.
        touched_only: Only records a ``new`` family holds (a table being checked).
    """
    descriptors = sorted({f.privacy for f in families if f.privacy})
    counts: dict[str, int] = {}
    exact = True
    for d in descriptors:
        loss = max_loss(families, weight=_of(d), touched_only=touched_only)
        counts[d] = round(loss.value)
        exact = exact and loss.exact
    if len(descriptors) > 1 and exact:
        together = max_loss(
            families, weight=lambda f: float(bool(f.privacy)), touched_only=touched_only
        )
        exact = together.exact and round(together.value) == sum(counts.values())
    return Worst({d: n for d, n in counts.items() if n}, exact)


@dataclass
class LedgerIndex:
    """The ledger of one microdata identity, in memory: the dataset's account and each key's.

    The state store replays its rows into it in id order (:meth:`add`) and
    checks a table against it inside the identity's transaction (:meth:`check`).
    A key's account is made from its tables when it is first needed (a
    restart replays the dataset's account only).
    """

    last_id: int = 0
    dataset: Account = field(default_factory=Account)
    keys: dict[str, Account] = field(default_factory=dict)
    pending: dict[str, list[TableFigures]] = field(default_factory=dict)

    def key(self, key_id: str) -> Account:
        """The account of one API key (empty if it was given nothing)."""
        tables = self.pending.pop(key_id, None)
        if tables:
            account = self.keys.setdefault(key_id, Account())
            for figures in tables:
                account.add(figures, account.fresh(figures))
        return self.keys.get(key_id) or Account()

    def key_ids(self) -> list[str]:
        """The keys given something, sorted."""
        return sorted({*self.keys, *self.pending})

    def add_row(self, key_id: str, spec: str, digests: bytes) -> None:
        """Take a table given to ``key_id`` into the ledger, as the state store keeps it."""
        self.add(key_id, TableFigures.from_row(spec, digests))

    def add(self, key_id: str, figures: TableFigures) -> None:
        """Take a table given to ``key_id`` into the ledger."""
        self.dataset.add(figures, self.dataset.fresh(figures))
        self.pending.setdefault(key_id, []).append(figures)

    def check(self, key_id: str, figures: TableFigures, budgets: Budgets) -> bool:
        """Refuse a table that takes a record past a budget; whether it brings anything new.

        A table whose figures the key was already given spends nothing, and
        one given to another key spends nothing of the dataset's budget.

        Raises:
            BudgetExhausted: saying which budget, what the table would reach,
                what is spent and what is left.
        """
        fresh_key = self.key(key_id).fresh(figures)
        if not fresh_key.any():
            return False
        if budgets.epsilon is not None:
            _gate(self.dataset, figures, self.dataset.fresh(figures), budgets, None)
        if budgets.epsilon_per_key is not None:
            _gate(self.key(key_id), figures, fresh_key, budgets, key_id)
        return True


def warm(protection: Protection, magnitudes: Any, catalog: Catalog, budgets: Budgets) -> list[str]:
    """Prepare what a site's budgets need of the accountant, before its first table.

    Imports ``dp-accounting`` and finds, per budget, the most figures of each
    of the site's mechanisms a record may be in, so that no table's
    transaction waits for either. Returns the descriptors prepared.
    """
    limits = [b for b in (budgets.epsilon, budgets.epsilon_per_key) if b is not None]
    if not limits:
        return []
    out = [_count_kind(protection).descriptor()]
    if str(getattr(magnitudes, "method", "none")) == "dp":
        eps = float(magnitudes.epsilon)
        out += [
            dlap_descriptor(eps, math.ceil(m.bound * MAGNITUDE_SCALE))
            for m in catalog.magnitudes.values()
        ]
        out.append(pure_descriptor(eps))
    out = [d for d in dict.fromkeys(out) if d]
    for d in out:
        for budget in limits:
            allowed(d, float(budget), budgets.delta)
    return out


def _gate(
    account: Account,
    figures: TableFigures,
    fresh: npt.NDArray[np.bool_],
    budgets: Budgets,
    key_id: str | None,
) -> None:
    """Refuse the table if its fresh figures take any possible record past the budget."""
    budget = budgets.epsilon if key_id is None else budgets.epsilon_per_key
    assert budget is not None
    new = account.families_for(figures, fresh, new=True)
    adds = _tops(new)
    if not adds:
        return  # nothing the accountant composes
    bound = {d: account.bound.get(d, 0.0) + n for d, n in adds.items()}
    bound.update({d: n for d, n in account.bound.items() if d not in bound})
    if within({d: math.floor(n + 1e-9) for d, n in bound.items()}, budget, budgets.delta):
        return  # cheap: even the most loaded record stays within
    reach = worst_counts(account.families + new, touched_only=True)
    if within(reach.counts, budget, budgets.delta):
        return
    spent = account.worst()
    raise BudgetExhausted(_refusal(reach, spent, budget, budgets.delta, key_id))


def _refusal(reach: Worst, spent: Worst, budget: float, delta: float, key_id: str | None) -> str:
    whose = "the dataset's privacy budget" if key_id is None else "this API key's privacy budget"
    given = "already published" if key_id is None else "this key was already given"
    up_to = "" if reach.exact else "up to "
    at_most = "" if spent.exact else "at most "
    reached, used = reach.epsilon(delta), spent.epsilon(delta)
    left = max(budget - used, 0.0)
    why = (
        " (infinite: the figures' chance of an outcome only one of two neighbouring counts can "
        "give is above delta)"
        if math.isinf(reached)
        else ""
    )
    return (
        f"this table is refused: its new figures would raise the privacy loss of some records "
        f"to {up_to}epsilon {reached:.4g} at delta {delta:g}{why}, above {whose} of epsilon "
        f"{budget:g} (each distinct figure counted once; {at_most}{used:.4g} spent, "
        f"{'at least ' if not spent.exact else ''}{left:.4g} left). Tables {given} are still "
        "answered at no cost; a table of other records, or of fewer new figures, may fit"
    )


def summary(account: Account, delta: float = DEFAULT_DELTA) -> dict[str, Any]:
    """The account's figures over every possible record: what ``audit ledger`` prints.

    ``epsilon_spent`` is the epsilon at ``delta`` of the most loaded possible
    record, composed by the accountant (:data:`ACCOUNTANT`); ``delta`` is the
    delta it holds at (a probability, whatever the number of figures).
    """
    worst = account.worst()
    figures, uncovered = account.largest(3), account.largest(4)
    return {
        "epsilon_spent": worst.epsilon(delta),
        "delta": delta,
        "accountant": ACCOUNTANT,
        "figures_per_record": round(figures.value),
        "figures_without_epsilon_per_record": round(uncovered.value),
        "exact": worst.exact and figures.exact and uncovered.exact,
        "tables": account.tables,
        "figures": account.figures,
        "kinds": [
            {"kind": n, "epsilon": e, "delta": d, "dp": p, "figures": c}
            for (n, e, d, p), c in sorted(account.kinds.items(), key=lambda i: str(i[0]))
        ],
    }


# The state store keeps the ledger's rows; the rules read them (the store sits below).
register_ledger(LedgerIndex, TableFigures.from_row)
