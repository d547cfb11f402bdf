"""The guard's families against an independent computation over random families.

An atom (codes that belong to the same published sets) is derivable when its
indicator is a combination of the sets' indicators: here decided by the
rank of integer matrices (numpy's matrix_rank, an SVD of the whole stack),
apart from the guard's incremental bases and projections; its records are the
sum of its codes' records.
"""

from __future__ import annotations

import numpy as np

from tablesafe.rules._guard_families import Family, derive


def _indicator(codes: range, s: frozenset[int]) -> np.ndarray:
    return np.array([1.0 if c in s else 0.0 for c in codes])


def _expected(codes: range, old: list[frozenset[int]], new: list[frozenset[int]]) -> set:
    every = old + new
    signature: dict[tuple[bool, ...], set[int]] = {}
    for c in codes:
        sig = tuple(c in s for s in every)
        if any(sig):
            signature.setdefault(sig, set()).add(c)
    published = set(every)

    def in_span(sets: list[frozenset[int]], atom: frozenset[int]) -> bool:
        if not sets:
            return False
        m = np.array([_indicator(codes, s) for s in sets])
        stacked = np.vstack([m, _indicator(codes, atom)])
        return bool(np.linalg.matrix_rank(stacked) == np.linalg.matrix_rank(m))

    out = set()
    for members in signature.values():
        atom = frozenset(members)
        if atom in published or not old:
            continue
        if in_span(every, atom) and not in_span(old, atom):
            out.add(atom)
    return out


def _random_set(rng: np.random.Generator, n: int) -> frozenset[int]:
    s = frozenset(np.flatnonzero(rng.random(n) < rng.uniform(0.2, 0.9)).tolist())
    return s or frozenset({int(rng.integers(n))})


def test_newly_derivable_atoms_and_their_records_match_brute_force():
    rng = np.random.default_rng(2511)
    derivable = 0
    for _ in range(400):
        n = int(rng.integers(2, 14))
        codes = range(n)
        records = rng.integers(0, 30, size=n)

        old = list(dict.fromkeys(_random_set(rng, n) for _ in range(int(rng.integers(0, 7)))))
        new = [_random_set(rng, n) for _ in range(int(rng.integers(1, 4)))]
        spare = sorted(set(codes) - set().union(*old)) if old else []
        if spare and rng.random() < 0.4:  # new sets apart from every published code
            new = [
                frozenset(rng.choice(spare, size=int(rng.integers(1, len(spare) + 1))).tolist())
                for _ in range(int(rng.integers(1, 4)))
            ]
        new = [s for s in dict.fromkeys(new) if s not in old]
        family = Family(tuple(codes))
        # Published in two batches: the family folds sets in as they come.
        half = len(old) // 2
        family.add_many(old[:half], [int(records[list(s)].sum()) for s in old[:half]])
        family.newly_derivable([frozenset({0})])
        family.add_many(old[half:], [int(records[list(s)].sum()) for s in old[half:]])
        got = family.newly_derivable(new)
        assert set(got) == _expected(codes, old, new)
        sizes = {s: int(records[list(s)].sum()) for s in new}
        assert family.counts(got, sizes) == [int(records[list(a)].sum()) for a in got]
        derivable += len(got)
    assert derivable > 50  # the families do make atoms derivable, not only none


def test_families_derived_together_match_each_alone_and_brute_force():
    """derive() stacks families by their number of codes: nothing leaks between them."""
    rng = np.random.default_rng(2512)
    tasks, expected, records_of = [], [], []
    for _ in range(300):
        n = int(rng.integers(2, 12))
        codes = range(n)
        records = rng.integers(0, 30, size=n)
        old = list(dict.fromkeys(_random_set(rng, n) for _ in range(int(rng.integers(1, 8)))))
        new = [_random_set(rng, n) for _ in range(int(rng.integers(1, 4)))]
        new = [s for s in dict.fromkeys(new) if s not in old]
        family = Family(tuple(codes))
        family.add_many(old, [int(records[list(s)].sum()) for s in old])
        if rng.random() < 0.5:  # some built before, some folded in by derive itself
            family.newly_derivable([frozenset({0})])
        tasks.append((family, new, {s: int(records[list(s)].sum()) for s in new}))
        expected.append(_expected(codes, old, new))
        records_of.append(records)
    together = derive(tasks)
    derivable = 0
    for (family, new, sizes), (atoms, counts), want, records in zip(
        tasks, together, expected, records_of, strict=True
    ):
        assert set(atoms) == want
        assert counts == [int(records[list(a)].sum()) for a in atoms]
        assert derive([(family, new, sizes)]) == [(atoms, counts)]  # the same alone
        derivable += len(atoms)
    assert derivable > 50
