"""The admission of a table's figures: decided and written in one transaction.

DESIGN decision 10: one admission checks a new table's figures against the
account of every figure published from its microdata
(:mod:`tablesafe.rules._account`), decides which cells it withholds, refuses
it whole past the site's share, and records what it publishes, inside one
transaction of the state store (:meth:`tablesafe.state.StateStore.transaction`),
so no timing of requests, keys or replicas gets past a rule that holds for
requests one at a time.

A table answered once is answered again the same way: its decision (which
cells it withholds) is stored under a digest of its figures, and read back
for every later request with the same figures, whatever was published since.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from tablesafe._protection import Protection
from tablesafe._protection_limits import Additivity, SliverScope
from tablesafe.catalog._definitions import Definition, DefinitionSpace, definition_text
from tablesafe.catalog._variables import Code
from tablesafe.cells._aggregates import CellAggregates
from tablesafe.cells._plan import DimensionPlan, TabulationPlan
from tablesafe.output._withheld import margins_over
from tablesafe.rules._account import (
    Account,
    AccountRules,
    Figure,
    PublishedRow,
    table_figures,
    unsafe_figures,
    withheld_cells,
)

if TYPE_CHECKING:
    from tablesafe._settings import RuleSettings
    from tablesafe.catalog._dataset import Dataset
    from tablesafe.engines._base import Engine

__all__ = ["Accounts", "Admitted", "admit", "dataset_identity", "table_digest"]

#: A published figure as the state store keeps it: (digest, text); never a count.
Publication = tuple[int, str]


class Transaction(Protocol):
    """What the admission needs of the state store's transaction."""

    def publications(self, scope: str, after: int) -> list[tuple[int, Publication]]:
        """Published figures of ``scope`` after id ``after``."""
        ...

    def publish(self, scope: str, key_id: str, rows: Sequence[Publication]) -> None:
        """Record rows as published when the transaction commits."""
        ...

    def decision(self, scope: str, digest: int) -> bytes | None:
        """A table's stored decision."""
        ...

    def decide(self, scope: str, digest: int, withheld: bytes) -> None:
        """Store a table's decision when the transaction commits."""
        ...

    def on_commit(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` once the writes are committed, still under the process's lock."""
        ...


@dataclass
class Accounts:
    """This process's mirror of the account, per scope (the dataset, or an API key)."""

    by_scope: dict[str, Account] = field(default_factory=dict)

    def caught_up(self, tx: Transaction, scope: str) -> Account:
        """The account of ``scope`` with every row committed so far (read in the transaction)."""
        account = self.by_scope.setdefault(scope, Account())
        rows = tx.publications(scope, account.last_id)
        account.add((i, PublishedRow(*row)) for i, row in rows)
        return account


@dataclass(frozen=True)
class Admitted:
    """A table's admission: the cells it withholds (extended shape), and whether it was new.

    ``undecided``: a dry run that may not read protected counts met a table
    with no stored decision (:func:`tablesafe.rules._dry_run.reads_protected_figures`).
    ``refusal``: the refusal's message where the table is refused whole (the
    caller raises it once the transaction has kept the decision).
    """

    withheld: npt.NDArray[np.bool_]
    decided_now: bool
    undecided: bool = False
    refusal: str | None = None


def table_digest(figures: Sequence[Figure], shape: tuple[int, ...]) -> int:
    """A table's key among stored decisions: its shape and its figures, cell by cell."""
    h = hashlib.blake2b(digest_size=8, person=b"tablesafe-table")
    h.update(repr(shape).encode())
    # Each figure's index and digest as two little-endian 64-bit integers, in one
    # buffer (the bytes of one update per number, which stored decisions were keyed by).
    pairs = np.array([(f.index, f.digest) for f in figures], dtype="<i8").reshape(-1, 2)
    h.update(pairs.tobytes())
    return int.from_bytes(h.digest(), "little", signed=True)


def admit(
    tx: Transaction,
    accounts: Accounts,
    *,
    key_id: str,
    plan: TabulationPlan,
    agg: CellAggregates,
    cells: npt.NDArray[np.bool_],
    protection: Protection,
    space: DefinitionSpace,
    rules: RuleSettings,
    counted: Any,
    dry_run: bool = False,
    read_counts: bool = True,
) -> Admitted:
    """Decide which cells of a table are withheld, and record what it publishes.

    A dry run (the pre-flight check, the nearest passing alternatives) takes
    the same decision on the same reads and writes nothing: no publication, no
    stored decision (docs/decisions.md, "A dry run of the admission").

    Args:
        tx: The state store's transaction for the table's microdata.
        accounts: This process's mirror of the account.
        key_id: The API key asking (the account's scope under ``sliver_scope = "key"``).
        plan: The table's plan.
        agg: Its exact aggregates (every grouping set).
        cells: The cells it publishes (computed, not structural zeros).
        protection: The site's protection (a block's protected count).
        space: The catalog's definition space.
        rules: The site's rules for the dataset.
        counted: The true counts of a family's codes (:class:`EngineCounts`).
        dry_run: Decide only: record nothing.
        read_counts: Whether a dry run may read blocks' protected counts (else a
            table without a stored decision is left undecided).

    A table with more than ``max_withheld_share`` of its cells withheld is
    refused: the refusal is a decision stored like the others (a repeat is
    refused with the same words whatever was published since), and its
    message is the result's ``refusal``.
    """
    shape = agg.shape
    if rules.sliver_min_difference <= 0:
        return Admitted(np.zeros(shape, dtype=bool), False)
    scope = "*" if rules.sliver_scope == SliverScope.DATASET else f"key:{key_id}"
    account = accounts.caught_up(tx, scope)
    figures = table_figures(plan, agg, space, cells)
    digest = table_digest(figures, shape)
    stored = tx.decision(scope, digest)
    if stored is not None:
        return _stored_decision(stored, shape)
    if dry_run and not read_counts:
        return Admitted(np.zeros(shape, dtype=bool), False, undecided=True)
    additive = protection.record_level or protection.additivity == Additivity.AGGREGATE
    # Small: a protected count that some count below m could have been given.
    m = rules.sliver_min_difference
    account_rules = AccountRules(m + protection.reach_above(m), fresh_margins=not additive)
    protected = _protected_count(protection)
    unsafe = unsafe_figures(account, figures, space, account_rules, protected, counted)
    withheld = withheld_cells(figures, unsafe, shape, additive=additive) & cells
    total = int(cells.sum())
    if total and withheld.sum() > rules.max_withheld_share * total:
        refusal = _refusal(plan, figures, unsafe, withheld, total, rules)
        if not dry_run:
            # Kept as a decision: what is published later does not turn it into an answer.
            tx.decide(scope, digest, _pack(withheld) + _REFUSED + refusal.encode())
        return Admitted(withheld, not dry_run, refusal=refusal)
    if dry_run:
        return Admitted(withheld, False)

    left_out = withheld | (margins_over(withheld) if additive else withheld)
    published = [f for f in figures if not left_out.flat[f.index]]
    tx.publish(scope, key_id, [(f.digest, f.text) for f in published])
    tx.decide(scope, digest, _pack(withheld))
    # Once committed, the figures join this process's account as written: the
    # next catch-up reads them again and skips them without parsing their text.
    tx.on_commit(lambda: account.add_published(published))
    return Admitted(withheld, True)


def _refusal(
    plan: TabulationPlan,
    figures: Sequence[Figure],
    unsafe: set[int],
    withheld: npt.NDArray[np.bool_],
    total: int,
    rules: RuleSettings,
) -> str:
    """A refusal's words: how many cells, two of the request's own, never a count but m."""
    shape = withheld.shape
    examples = " and ".join(_label(plan, shape, figures[p].index) for p in sorted(unsafe)[:2])
    return (
        f"{int(withheld.sum())} of this table's {total} cells would have to be withheld "
        f"(this site publishes a table with at most {rules.max_withheld_share:.0%} of its "
        f"cells withheld): with figures already published from this dataset, {examples} "
        f"would let differences isolate fewer than {rules.sliver_min_difference} records. "
        "Ask for coarser categories, a wider universe or fewer dimensions"
    )


def _protected_count(protection: Protection) -> Any:
    """A block's protected count: what the site would publish for it as an inner cell."""

    def protected(domain: str, definition: Definition, n: int, key: int) -> int:
        text = (domain + definition_text(definition)).encode()
        counts = protection.inner_counts(
            np.array([n], dtype=np.int64), np.array([key], dtype=np.uint32), lambda _: [text]
        )
        return int(counts[0])

    return protected


def _label(plan: TabulationPlan, shape: tuple[int, ...], index: int) -> str:
    """A cell of the request's own table in words (never a count, never another request)."""
    at = np.unravel_index(index, shape)
    parts = [
        f"{d.name} = {d.codes[int(j)]}"
        for d, j in zip(plan.dimensions, at, strict=True)
        if int(j) < d.size
    ]
    if not parts:
        return "this table's universe"
    return f"the records with {' and '.join(parts)} in this table's universe"


#: After a refused table's mask (whose length the table's shape fixes), its message.
_REFUSED = b"\x00refused\x00"


def _stored_decision(stored: bytes, shape: tuple[int, ...]) -> Admitted:
    """A stored decision: the cells withheld, and the refusal's words where it was one."""
    mask = (int(np.prod(shape)) + 7) // 8
    refusal = stored[mask + len(_REFUSED) :].decode() if len(stored) > mask else None
    return Admitted(_unpack(stored[:mask], shape), False, refusal=refusal)


def _pack(withheld: npt.NDArray[np.bool_]) -> bytes:
    return np.packbits(withheld.reshape(-1)).tobytes()


def _unpack(stored: bytes, shape: tuple[int, ...]) -> npt.NDArray[np.bool_]:
    size = int(np.prod(shape))
    bits = np.unpackbits(np.frombuffer(stored, dtype=np.uint8), count=size)
    return bits.astype(bool).reshape(shape)


@dataclass
class EngineCounts:
    """The true counts of a family's codes from the engine (one query each, remembered).

    Args:
        engine: The dataset's engine.
        dataset: The dataset.
        plan: The table's plan (its unit: a household table counts households).
        space: The catalog's definition space (every code of each column).
    """

    engine: Engine
    dataset: Dataset
    plan: TabulationPlan
    space: DefinitionSpace
    _memo: dict[Any, dict[Code, tuple[int, int]]] = field(default_factory=dict)

    def along(self, domain: str, context: Definition, column: str) -> dict[Code, tuple[int, int]]:
        """Each code of ``column``: its true count and cell key within ``context``.

        One tabulation of the context's records by the column's codes; a block
        of the family (a set of codes) counts the sum of its codes'.
        """
        key = (domain, context, column)
        found = self._memo.get(key)
        if found is None:
            codes = tuple(self.space.all_codes[column])
            dimension = DimensionPlan(
                name=column,
                label=column,
                column=column,
                codes=codes,
                labels=tuple(str(c) for c in codes),
                members=tuple((c,) for c in codes),
            )
            plan = replace(
                self.plan,
                dimensions=(dimension,),
                universe=context,
                grouping_sets=((0,), ()),
                weight=None,
                replicates=(),
                magnitudes=(),
                present=(),
            )
            agg = self.engine.tabulate(self.dataset, plan)
            found = {
                c: (int(n), int(k))
                for c, n, k in zip(codes, agg.n.tolist(), agg.cell_key.tolist(), strict=False)
                if n
            }
            self._memo[key] = found
        return found


def dataset_identity(engine: Engine, dataset: Dataset) -> str:
    """The microdata's identity: a hash of its record count and record-key sum (any engine).

    It depends on the records alone, not on the dataset's name or catalog:
    every dataset that serves the same records shares the account.
    """
    cat = dataset.catalog
    plan = TabulationPlan(
        dimensions=(DimensionPlan.from_variable(cat.source_variables[0]),),
        universe=(),
        grouping_sets=((0,), ()),
        record_key=cat.record_key,
        weight=None,
    )
    agg = engine.tabulate(dataset, plan)
    payload = f"{int(agg.n[-1])}:{int(agg.cell_key[-1])}".encode()
    return hashlib.blake2b(payload, digest_size=16, person=b"tablesafe-data").hexdigest()
