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

**Loss of a record.** Basic composition: the sum of the epsilons (and of
the deltas) of the distinct figures whose definition holds the record. The
ledger also sums ``epsilon^2 / 2`` (zCDP's rho) and reports the
(epsilon, delta) it converts to, which is tighter when a record is in many
figures. A figure with no epsilon (weighted figures and their standard
errors, sums under the cell-key method, drop/add-up-to-q of records) is
counted but not composed. For mechanisms that are not DP (ckm, q, PRAM, a
ptable file) the per-figure (epsilon, delta) are the ptable's figures for
neighbouring counts (:meth:`tablesafe.ptable.PTable.privacy`): a bound on a
mechanism that is not DP, said so wherever the ledger is shown.

**Which records.** The largest loss is taken over every record that could
exist (every combination of codes), from the published definitions alone
(:mod:`tablesafe.rules._ledger_loss`): it is the add-one-record bound, and
a budget refusal depends on what was published, never on which records
the microdata hold. The distribution over the microdata's own records is
the owner's report (:mod:`tablesafe.server._ledger`).

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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import BudgetExhausted
from tablesafe._protection import CellwiseMechanism, Protection
from tablesafe._protection_limits import Additivity
from tablesafe._request import TabulationPlan
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._variables import Code
from tablesafe.output._table import ProtectedTable
from tablesafe.rules._guard import _code_key, definition_text
from tablesafe.rules._ledger_loss import QUANTITIES, Family, Loss, make_family, max_loss

__all__ = [
    "BudgetExhausted",
    "Budgets",
    "FigureGroup",
    "Kind",
    "LedgerIndex",
    "TableFigures",
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
    """

    name: str
    epsilon: float | None
    delta: float | None
    dp: bool
    key: int

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
                "kinds": [[k.name, k.epsilon, k.delta, k.dp, k.key] for k in self.kinds],
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
            kinds=tuple(Kind(str(n), e, d, bool(p), int(k)) for n, e, d, p, k in doc["kinds"]),
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
) -> Kind:
    secret_hash = "" if not secret else hashlib.blake2b(secret, digest_size=8).hexdigest()
    payload = json.dumps([name, protection, secret_hash], sort_keys=True, default=str)
    if epsilon is not None and not math.isfinite(epsilon):
        epsilon, delta = None, None
    return Kind(name, epsilon, delta, dp, _hash64(payload.encode()))


def _count_kind(protection: Protection, unit: str | None = None) -> Kind:
    """The counts' kind: the ptable's figures; a table of another unit counts other things."""
    mech = protection.effective_mechanism()
    eps = delta = None
    dp = False
    privacy = getattr(mech, "privacy", None)
    if isinstance(mech, CellwiseMechanism) and privacy is not None:
        fig = privacy()
        eps, delta = float(fig.epsilon), float(fig.delta)
        dp = isinstance(getattr(mech, "parameters", {}).get("epsilon"), int | float)
    name = "count" if unit is None else f"count:{unit}"
    return _kind(name, protection.describe(), eps, delta, dp, protection.secret)


def _noisy_masks(
    table: ProtectedTable,
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
    inner = np.zeros_like(computed)
    inner[tuple(slice(0, s - 1) for s in computed.shape)] = True
    sz = table.structural_zero
    mech = protection.mechanism
    additive = protection.record_level or protection.additivity == Additivity.AGGREGATE
    count = computed if mech is None else (inner if additive else computed) & ~sz
    out = [(_count_kind(protection, unit), count)]
    if table.weighted is not None:
        indep = protection.additivity == Additivity.INDEPENDENT and not protection.record_level
        cells = computed if mech is None else ((computed if indep else inner) & ~sz)
        desc = {"protection": protection.describe(), "weight_noise": protection.weight_noise}
        name = "weighted" if unit is None else f"weighted:{unit}"
        out.append((_kind(name, desc, None, None, False, protection.secret), cells))
    return out + _magnitude_masks(table, protection, magnitudes, catalog)


def _magnitude_masks(
    table: ProtectedTable, protection: Protection, magnitudes: Any, catalog: Catalog
) -> list[tuple[Kind, npt.NDArray[np.bool_]]]:
    """Sums (means are sums over counts) and quantiles: a figure per cell computed each.

    Under DP for magnitudes each spends the site's epsilon for magnitudes;
    otherwise none is stated.
    """
    method = str(getattr(magnitudes, "method", "none"))
    eps = float(magnitudes.epsilon) if method == "dp" else None
    desc = magnitudes.describe() if magnitudes is not None else {"method": "none"}
    cells = table.computed if method == "none" else table.computed & ~table.structural_zero
    request = table.request
    names = [f"sum:{catalog.magnitude(m.split(':', 1)[1]).name}" for m in request.magnitudes]
    names += list(request.quantiles)
    return [
        (_kind(name, desc, eps, 0.0 if eps else None, eps is not None, protection.secret), cells)
        for name in dict.fromkeys(names)
    ]


def table_figures(
    plan: TabulationPlan,
    table: ProtectedTable,
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
    masks = _noisy_masks(table, protection, magnitudes, catalog, unit)
    return _figures(plan, catalog, masks)


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
    return _hash64(definition_text(((column, tuple(sorted(codes, key=_code_key))),)).encode())


def _order(code: Code) -> tuple[int, int, str]:
    return (0, code, "") if isinstance(code, int) else (1, 0, str(code))


# -- the account --------------------------------------------------------------------------

#: The delta zCDP's conversion to (epsilon, delta) adds (Bun & Steinke 2016, Prop. 1.3).
ZCDP_DELTA = 1e-6


@dataclass(frozen=True)
class Budgets:
    """A dataset's privacy budgets (``[datasets.rules]``): epsilon, for all keys and per key."""

    epsilon: float | None = None
    epsilon_per_key: float | None = None


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


@dataclass
class Account:
    """What one microdata identity (or one API key on it) has been given.

    Attributes:
        families: The figures, as families (:mod:`tablesafe.rules._ledger_loss`).
        bound: An upper bound on the largest epsilon of any possible record
            (each table adds the most it can give one record); it only
            decides when the exact search is needed.
        tables: Tables that brought new figures.
        figures: Distinct figures.
        kinds: Distinct figures per kind (name, epsilon, delta, dp).
    """

    families: list[Family] = field(default_factory=list)
    seen: _Digests = field(default_factory=_Digests)
    bound: float = 0.0
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
            fam = make_family(
                figures.kinds[g.kind].weights(),
                box,
                [figures.dims[i] for i in g.dims],
                counts,
                new=new,
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
        self.bound += sum(f.top(0) for f in fams)
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
        loss = max_loss(self.families, q)
        if q == 0 and loss.exact:
            self.bound = loss.value
        return loss


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
            _gate(self.dataset, figures, self.dataset.fresh(figures), budgets.epsilon, None)
        if budgets.epsilon_per_key is not None:
            _gate(self.key(key_id), figures, fresh_key, budgets.epsilon_per_key, key_id)
        return True


def _within(loss: float, budget: float) -> bool:
    return loss <= budget * (1 + 1e-9) + 1e-12


def _gate(
    account: Account,
    figures: TableFigures,
    fresh: npt.NDArray[np.bool_],
    budget: float,
    key_id: str | None,
) -> None:
    """Refuse the table if its fresh figures take any possible record past ``budget``."""
    new = account.families_for(figures, fresh, new=True)
    adds = sum(f.top(0) for f in new)
    if adds == 0 or _within(account.bound + adds, budget):
        return  # cheap: even the most loaded record stays within
    reach = max_loss(account.families + new, 0, touched_only=True)
    if _within(reach.value, budget):
        return
    spent = account.largest(0)
    raise BudgetExhausted(_refusal(reach, spent, budget, key_id))


def _refusal(reach: Loss, spent: Loss, budget: float, key_id: str | None) -> str:
    whose = "the dataset's privacy budget" if key_id is None else "this API key's privacy budget"
    given = "already published" if key_id is None else "this key was already given"
    up_to = "" if reach.exact else "up to "
    at_most = "" if spent.exact else "at most "
    left = max(budget - spent.value, 0.0)
    return (
        f"this table is refused: its new figures would raise the privacy loss of some records "
        f"to {up_to}epsilon {reach.value:.4g}, above {whose} of epsilon {budget:g} (each "
        f"distinct figure counted once; {at_most}{spent.value:.4g} spent, "
        f"{'at least ' if not spent.exact else ''}{left:.4g} left). Tables {given} are still "
        "answered at no cost; a table of other records, or of fewer new figures, may fit"
    )


def summary(account: Account) -> dict[str, Any]:
    """The account's figures over every possible record: what ``audit ledger`` prints."""
    losses = {name: account.largest(q) for q, name in enumerate(QUANTITIES)}
    rho, delta = losses["rho"].value, losses["delta"].value
    zcdp_eps = rho + 2 * math.sqrt(rho * math.log(1 / ZCDP_DELTA)) if rho > 0 else 0.0
    return {
        "epsilon_spent": losses["epsilon"].value,
        "delta_spent": delta,
        "figures_per_record": round(losses["figures"].value),
        "figures_without_epsilon_per_record": round(losses["uncovered"].value),
        "zcdp": {"rho": rho, "epsilon": zcdp_eps, "delta": delta + ZCDP_DELTA if rho else 0.0},
        "exact": all(v.exact for v in losses.values()),
        "tables": account.tables,
        "figures": account.figures,
        "kinds": [
            {"kind": n, "epsilon": e, "delta": d, "dp": p, "figures": c}
            for (n, e, d, p), c in sorted(account.kinds.items(), key=lambda i: str(i[0]))
        ],
    }
