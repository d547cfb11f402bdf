"""The ledger's accountant: privacy loss distributions composed by counts (issue 38, item 6).

Basic composition summed each figure's delta: "Delta spent 2.52". The accountant composes
each figure's privacy loss distribution (from its mechanism's actual output distributions)
and states epsilon at the site's delta, a probability however many figures compose. Its
numbers are checked against what does not use dp-accounting: the exact optimal composition
of pure epsilon-DP (Kairouz, Oh & Viswanath 2015), brute-force hockey-stick divergences of
composed ptable distributions, and basic composition as an upper bound.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import special

from tablesafe.mechanisms import dp_geometric, drop_add_q
from tablesafe.rules._ledger import Account, Budgets, Kind, LedgerIndex, TableFigures, summary
from tablesafe.rules._ledger_loss import make_family
from tablesafe.rules._ledger_pld import (
    DEFAULT_DELTA,
    allowed,
    approx_descriptor,
    basic,
    dlap_descriptor,
    epsilon_at,
    ptable_descriptor,
    pure_descriptor,
    within,
)


def _bisect(delta_of, delta: float, high: float = 200.0) -> float:
    """The smallest epsilon whose ``delta_of(epsilon)`` is at most ``delta`` (a decreasing curve)."""
    low = 0.0
    if delta_of(low) <= delta:
        return 0.0
    for _ in range(80):
        mid = (low + high) / 2
        low, high = (low, mid) if delta_of(mid) <= delta else (mid, high)
    return high


def _optimal_pure(eps: float, k: int, delta: float) -> float:
    """k-fold composition of eps-DP, exactly: k-fold randomized response (KOV 2015, Thm 3.3)."""
    p = math.exp(eps) / (1 + math.exp(eps))
    i = np.arange(k + 1)
    logc = special.gammaln(k + 1) - special.gammaln(i + 1) - special.gammaln(k - i + 1)
    a = np.exp(logc + (k - i) * math.log(p) + i * math.log(1 - p))
    b = np.exp(logc + i * math.log(p) + (k - i) * math.log(1 - p))
    return _bisect(lambda e: float(np.maximum(a - math.exp(e) * b, 0).sum()), delta, k * eps + 1)


@pytest.mark.parametrize(("eps", "k"), [(0.1, 100), (0.5, 20), (1.0, 3), (0.3, 400)])
def test_pure_dp_composes_to_the_exact_optimum(eps, k):
    got = epsilon_at({pure_descriptor(eps): k}, DEFAULT_DELTA)
    exact = _optimal_pure(eps, k, DEFAULT_DELTA)
    # Pessimistic (never below the truth) and tight (within the grid's steps).
    assert exact - 1e-6 <= got <= exact + 0.01
    assert got <= k * eps + 1e-9  # never above basic composition
    if (eps, k) == (0.1, 100):
        assert round(got, 2) == 4.77  # the figure docs/attacks.md quotes


def _composed(dist: list[dict[int, float]], n: int) -> dict[int, float]:
    out = {0: 1.0}
    for _ in range(n):
        nxt: dict[int, float] = {}
        for (x, p), (y, q) in itertools.product(out.items(), dist[0].items()):
            nxt[x + y] = nxt.get(x + y, 0.0) + p * q
        out = nxt
    return out


def _brute_epsilon(table, n: int, delta: float) -> float:
    """Epsilon at ``delta`` of ``n`` composed figures of a ptable, by brute force.

    Every pair of neighbouring counts (both orders) of one figure; ``n`` figures of one pair
    composed by enumeration (the worst pair of the composition is a composition of worst
    pairs only when one pair dominates, so this is a lower bound the accountant must meet).
    """
    pairs = [(table.distribution(i), table.distribution(i + 1)) for i in range(60)]

    def delta_of(e: float) -> float:
        worst = 0.0
        for a, b in pairs:
            ca, cb = _composed([a], n), _composed([b], n)
            for x, y in ((ca, cb), (cb, ca)):
                worst = max(
                    worst, sum(max(0.0, p - math.exp(e) * y.get(j, 0.0)) for j, p in x.items())
                )
        return worst

    return _bisect(delta_of, delta, high=30.0)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_ptables_figures_compose_at_least_as_its_worst_pair_does(n):
    # dp at epsilon 1 and a cap of 12: an outcome only one neighbour gives has a chance of
    # about e^-12 = 6e-6 a figure, so epsilon at 1e-3 is finite and near n.
    table = dp_geometric(1.0, cap=12)
    got = epsilon_at({ptable_descriptor(table): n}, 1e-3)
    brute = _brute_epsilon(table, n, 1e-3)
    assert brute - 1e-6 <= got <= brute + 0.02 * n
    assert got <= n * 1.0 + 1e-9


def test_delta_stays_a_probability_and_epsilon_is_infinite_where_no_epsilon_holds():
    # Drop/add-up-to-q with rate 0.1 and cap 3: each figure has a chance of an outcome
    # only one neighbouring count gives (delta ~ 0.67 between counts 0 and 1).
    q = drop_add_q(0.1, 3)
    d = ptable_descriptor(q)
    kind = Kind("count", q.privacy().epsilon, q.privacy().delta, False, 1, d)
    account = Account(families=[make_family(kind.weights(), {}, [], np.ones(()), privacy=d)] * 4)
    got = summary(account)
    assert 4 * q.privacy().delta > 2  # what basic composition called the delta spent
    assert got["delta"] == DEFAULT_DELTA and math.isinf(got["epsilon_spent"])
    # At a delta above the composed chance of such an outcome, a finite epsilon holds.
    assert math.isfinite(summary(account, 0.999)["epsilon_spent"])


def test_a_dp_sum_is_its_discrete_laplace():
    # epsilon 1 over 99 * 16 grid steps: one figure is 1-DP exactly, pure.
    d = dlap_descriptor(1.0, 99 * 16)
    one = epsilon_at({d: 1}, DEFAULT_DELTA)
    assert 1.0 - 0.02 <= one <= 1.0 + 1e-9
    assert basic(d) == (1.0, 0.0)
    # Many of them compose below basic composition, and at most as any 1-DP figures do (the
    # discrete Laplace is dominated by randomized response, whose composition is exact here).
    many = epsilon_at({d: 400}, DEFAULT_DELTA)
    assert many < 0.6 * 400
    assert many <= _optimal_pure(1.0, 400, DEFAULT_DELTA) + 0.01


@pytest.mark.parametrize("budget", [0.5, 1, 2.5, 3, 7.5, 20])
def test_the_allowed_count_is_the_largest_within_the_budget(budget):
    d = ptable_descriptor(dp_geometric(1.0, cap=40))
    n = allowed(d, float(budget), DEFAULT_DELTA)
    assert n >= 0
    if n:
        assert epsilon_at({d: n}, DEFAULT_DELTA) <= budget * (1 + 1e-9) + 1e-12
    assert epsilon_at({d: n + 1}, DEFAULT_DELTA) > budget
    assert within({d: n}, budget, DEFAULT_DELTA) and not within({d: n + 1}, budget, DEFAULT_DELTA)


def test_two_mechanisms_compose_together():
    counts = ptable_descriptor(dp_geometric(1.0, cap=40))
    sums = dlap_descriptor(0.5, 1584)
    both = epsilon_at({counts: 2, sums: 2}, DEFAULT_DELTA)
    assert both > epsilon_at({counts: 2}, DEFAULT_DELTA) + 0.9
    assert both <= 2 * 1.0 + 2 * 0.5 + 1e-9
    kinds = (
        Kind("count", 1.0, 0.0, True, 1, counts),
        Kind("sum:HOURS", 0.5, 0.0, True, 2, sums),
    )
    # A record in two counts and two sums (one family each, disjoint boxes elsewhere).
    fams = [
        make_family(k.weights(), {"x": frozenset({1})}, [], np.full((), 2), privacy=k.privacy)
        for k in kinds
    ]
    fams.append(
        make_family(kinds[1].weights(), {"x": frozenset({2})}, [], np.full((), 5), privacy=sums)
    )
    got = summary(Account(families=fams))
    # The most loaded record in each mechanism is not one record: an upper bound, said so.
    assert not got["exact"]
    assert got["epsilon_spent"] == epsilon_at({counts: 2, sums: 5}, DEFAULT_DELTA)


def test_a_row_written_before_the_accountant_composes_its_epsilon_and_delta():
    from tablesafe.rules._ledger import FigureGroup

    figures = TableFigures(
        kinds=(Kind("count", 1.0, 1e-9, True, 7),),
        box=(),
        dims=(("x", ((1,), (2,))),),
        groups=(FigureGroup(0, (0,), np.ones(2, dtype=bool)),),
        digests=np.array([1, 2], dtype=np.uint64),
    )
    spec = json.loads(figures.spec())
    spec["kinds"] = [k[:5] for k in spec["kinds"]]  # the old row: no descriptor
    back = TableFigures.from_row(json.dumps(spec), figures.digests.astype("<u8").tobytes())
    assert back.kinds[0].privacy == "" and back.kinds[0].descriptor() == approx_descriptor(
        1.0, 1e-9
    )
    ledger = LedgerIndex()
    ledger.add("k", back)
    assert summary(ledger.dataset)["epsilon_spent"] == pytest.approx(1.0, abs=0.01)
    assert ledger.check("k2", back, Budgets(epsilon=1.0)) is True


def test_a_site_with_budgets_prepares_the_accountant_before_any_table(tmp_path, monkeypatch):
    import tablesafe as ts
    from tablesafe.rules import _ledger_pld
    from tablesafe.rules._ledger import warm
    from tsdata import random_frame, write_dataset

    data = write_dataset(tmp_path / "d", random_frame(50, 4))
    prot = ts.Protection(dp_geometric(1.0, cap=40), seeds="keyed", secret=b"warm-secret-0123456789")
    budgets = Budgets(epsilon=7.5, epsilon_per_key=2.5)
    (d,) = warm(prot, None, data.catalog, budgets)
    assert d == ptable_descriptor(dp_geometric(1.0, cap=40))

    def composed(*args, **kwargs):
        raise AssertionError("composed in a check")

    # The checks that follow compare counts with what warm found: nothing is composed.
    monkeypatch.setattr(_ledger_pld, "_power", composed)
    for budget, n in ((7.5, 7), (2.5, 2)):
        assert within({d: n}, budget, DEFAULT_DELTA) and not within(
            {d: n + 1}, budget, DEFAULT_DELTA
        )
    assert warm(prot, None, data.catalog, Budgets()) == []
