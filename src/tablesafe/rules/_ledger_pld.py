"""The ledger's accountant: privacy loss distributions, composed by counts (dp-accounting).

A record's privacy loss is the composition of the distinct figures whose
definition holds it. The figures of one mechanism are identical to the
accountant (the same privacy loss distribution, PLD), so a record's loss is
a function of how many figures of each mechanism it is in: the ledger finds
those counts (:mod:`tablesafe.rules._ledger_loss`) and this module composes
them with Google's ``dp-accounting`` (Doroshenko et al. 2022; Meiser &
Mohammadi 2018), the tight accountant for a fixed number of mechanisms, and
states ``epsilon`` at the site's ``delta`` (``privacy_budget_delta``): a
pair that is always a valid (epsilon, delta)-DP statement, with delta a
probability however many figures compose.

Each figure's PLD comes from what it publishes, as a *descriptor* (JSON
text, kept with the ledger's rows so that a restart composes the same):

* ``["ptable", name, parameters, fixing_zero, digest]``: a ptable tablesafe
  constructs (dp, q, pram, ckm), rebuilt from its parameters (the digest of
  its rows checks the rebuild); ``["profile", k, deltas]``: any other ptable
  (a file), its profile kept inline. The PLD is the pessimistic
  connect-the-dots PLD (``create_pmf_pessimistic_connect_dots``) of the
  ptable's **actual output distributions**: ``delta(epsilon)``, the largest
  hockey-stick divergence over every pair of neighbouring counts in both
  orders (:meth:`tablesafe.PTable.privacy_profile`), on a grid of
  :data:`DISCRETIZATION`. That worst-case profile belongs to a pair that
  dominates every pair of neighbours, and dominating pairs compose (Zhu,
  Dong & Wang 2022), so the composed epsilon is an upper bound, exact at the
  grid's points;
* ``["dlap", epsilon, units]``: a DP sum's discrete Laplace on its grid
  (``P(y) ∝ exp(-epsilon |y| / units)``, sensitivity ``units``), the PLD of
  ``from_discrete_laplace_mechanism``;
* ``["release", epsilon, delta, sigma2, k]``: a ``dp-marginals`` release,
  ``k`` discrete Gaussian measurements of ``sigma2`` (a fraction's text),
  each of sensitivity 1: the PLD of ``from_discrete_gaussian_mechanism``
  composed ``k`` times, and the release's stated (epsilon, delta) as its
  basic figures;
* ``["pure", epsilon]``: a pure epsilon-DP figure (the exponential mechanism
  of DP quantiles), and ``["approx", epsilon, delta]`` for a figure known
  only by its (epsilon, delta) (rows written before the accountant): the
  pessimistic PLD of ``from_privacy_parameters``.

A figure that states no epsilon (weighted figures, the cell-key method's
sums, record-level drop/add-up-to-q) has no descriptor: it is counted, not
composed.

**Cost.** A PLD is built once per descriptor, a power ``PLD^n`` once per
descriptor and count (an FFT self-composition), and a budget of one
mechanism becomes the largest count it allows (found once per budget by
bisection), so the check in the state store's transaction compares counts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tablesafe import mechanisms
from tablesafe.mechanisms._ptable_cache import cached_destatis

if TYPE_CHECKING:
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

    from tablesafe.ptable._ptable import PTable

__all__ = [
    "ACCOUNTANT",
    "DEFAULT_DELTA",
    "DISCRETIZATION",
    "allowed",
    "approx_descriptor",
    "basic",
    "dlap_descriptor",
    "epsilon_at",
    "pld",
    "ptable_descriptor",
    "pure_descriptor",
    "release_descriptor",
    "within",
]

#: The privacy losses' grid: every PLD is on it, so that any two compose.
DISCRETIZATION = 0.01
#: The delta at which the ledger states epsilon when the site says none.
DEFAULT_DELTA = 1e-6
#: Said wherever the ledger is shown.
ACCOUNTANT = (
    "privacy loss distributions (Google's dp-accounting, pessimistic estimates on a grid of "
    f"{DISCRETIZATION}): each figure's from its mechanism's actual output distributions, "
    "composed over the distinct figures of a record; epsilon is stated at the site's delta"
)
#: The largest count a budget search tries (each power is an FFT self-composition).
MAX_COUNT = 1 << 16


def _dumps(doc: list[Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def _rows_digest(table: PTable) -> str:
    h = hashlib.blake2b(digest_size=8)
    for v, p in list(table.rows) + list(table.residue_rows):
        h.update(np.asarray(v, dtype=np.int64).tobytes())
        h.update(np.asarray(p, dtype=np.float64).tobytes())
    return h.hexdigest()


#: The ptables tablesafe constructs, by name: rebuilt from their parameters.
def _build(name: str, params: Mapping[str, Any]) -> PTable:
    if name == "dp":
        return mechanisms.dp_geometric(params["epsilon"], params["sensitivity"], params["cap"])
    if name == "q":
        return mechanisms.drop_add_q(params["rate"], params["cap"])
    if name == "pram":
        return mechanisms.pram_shlomo_young(params["epsilon_design"], params["cap"])
    if name == "ckm" and set(params) <= {"D", "V", "js"}:
        return cached_destatis(params["D"], params["V"], params["js"])
    raise KeyError(name)


def ptable_descriptor(table: PTable) -> str:
    """The descriptor of a ptable's figures (see the module docstring)."""
    params = dict(table.parameters)
    fixing_zero = params.pop("zeros", None) is not None
    digest = _rows_digest(table)
    try:
        rebuilt = _build(table.name, params)
        if fixing_zero:
            rebuilt = rebuilt.fixing_zero()
        if _rows_digest(rebuilt) == digest:
            return _dumps(["ptable", table.name, params, fixing_zero, digest])
    except (KeyError, TypeError, ValueError):
        pass
    k, deltas = _profile(table)
    return _dumps(["profile", k, [float(f"{d:.15g}") for d in deltas]])


def dlap_descriptor(epsilon: float, units: int) -> str:
    """The descriptor of a DP sum: discrete Laplace of ``epsilon`` over ``units`` grid steps."""
    return _dumps(["dlap", repr(float(epsilon)), int(units)])


def release_descriptor(epsilon: float, delta: float, sigma2: str, marginals: int) -> str:
    """The descriptor of a ``dp-marginals`` release: ``marginals`` discrete Gaussians."""
    return _dumps(["release", float(epsilon), float(delta), str(sigma2), int(marginals)])


def pure_descriptor(epsilon: float) -> str:
    """The descriptor of a pure epsilon-DP figure."""
    return _dumps(["pure", float(epsilon)])


def approx_descriptor(epsilon: float, delta: float) -> str:
    """The descriptor of a figure known only by its (epsilon, delta)."""
    return _dumps(["approx", float(epsilon), float(delta)])


def _profile(table: PTable) -> tuple[int, list[float]]:
    """The ptable's profile on the grid: ``k`` (points ``-k .. k``) and ``delta`` at each."""
    reach = table.privacy().max_log_ratio
    k = max(1, math.ceil(reach / DISCRETIZATION - 1e-9))
    grid = np.arange(-k, k + 1) * DISCRETIZATION
    deltas = np.minimum.accumulate(np.clip(table.privacy_profile(grid), 0.0, 1.0))
    return k, deltas.tolist()


@functools.lru_cache(maxsize=64)
def pld(descriptor: str) -> PrivacyLossDistribution:
    """The privacy loss distribution of one figure of ``descriptor``."""
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as plds
    from dp_accounting.pld.common import DifferentialPrivacyParameters

    doc = json.loads(descriptor)
    kind = doc[0]
    if kind in ("ptable", "profile"):
        if kind == "ptable":
            table = _build(doc[1], doc[2])
            k, deltas = _profile(table.fixing_zero() if doc[3] else table)
        else:
            k, deltas = doc[1], doc[2]
        pmf = pld_pmf.create_pmf_pessimistic_connect_dots(
            DISCRETIZATION, np.arange(-k, k + 1), np.asarray(deltas)
        )
        return plds.PrivacyLossDistribution(pmf)
    if kind == "release":
        from fractions import Fraction

        one = plds.from_discrete_gaussian_mechanism(
            math.sqrt(Fraction(doc[3])), value_discretization_interval=DISCRETIZATION
        )
        return one.self_compose(int(doc[4])) if int(doc[4]) > 1 else one
    if kind == "dlap":
        eps, units = float(doc[1]), int(doc[2])
        return plds.from_discrete_laplace_mechanism(
            eps / units, sensitivity=units, value_discretization_interval=DISCRETIZATION
        )
    eps, delta = float(doc[1]), float(doc[2]) if kind == "approx" else 0.0
    return plds.from_privacy_parameters(
        DifferentialPrivacyParameters(eps, delta), value_discretization_interval=DISCRETIZATION
    )


@functools.lru_cache(maxsize=256)
def _power(descriptor: str, n: int) -> PrivacyLossDistribution:
    """``n`` figures of ``descriptor`` composed."""
    one = pld(descriptor)
    return one if n == 1 else one.self_compose(n)


@functools.lru_cache(maxsize=4096)
def _epsilon(counts: tuple[tuple[str, int], ...], delta: float) -> float:
    total = None
    for descriptor, n in counts:
        part = _power(descriptor, n)
        total = part if total is None else total.compose(part)
    if total is None:
        return 0.0
    composed = max(float(total.get_epsilon_for_delta(delta)), 0.0)
    # Both bounds hold; the distributions' grid can cost up to a step a figure over
    # basic composition where that is already tight (a few pure figures).
    return min(composed, _basic_epsilon(counts, delta))


def _basic_epsilon(counts: tuple[tuple[str, int], ...], delta: float) -> float:
    """Basic composition's epsilon where its deltas add up to at most ``delta``, else ``inf``."""
    eps = sum(n * basic(d)[0] for d, n in counts)
    spent = sum(n * basic(d)[1] for d, n in counts)
    return eps if spent <= delta else math.inf


def epsilon_at(counts: Mapping[str, int], delta: float) -> float:
    """The epsilon at ``delta`` of a record in ``counts[d]`` figures of each descriptor ``d``.

    ``inf`` where no epsilon holds at ``delta``: the figures' chance of an
    outcome only one of two neighbours can give (an infinite privacy loss)
    is above ``delta``.
    """
    kept = tuple(sorted((d, int(n)) for d, n in counts.items() if d and n > 0))
    return _epsilon(kept, float(delta))


@functools.lru_cache(maxsize=64)
def basic(descriptor: str) -> tuple[float, float]:
    """A per-figure (epsilon, delta) of ``descriptor``: its largest finite loss, the rest's chance.

    ``n`` figures are (n epsilon, n delta)-DP by basic composition, a bound
    the accountant's composition never exceeds.
    """
    doc = json.loads(descriptor)
    if doc[0] == "ptable":
        table = _build(doc[1], doc[2])
        k, deltas = _profile(table.fixing_zero() if doc[3] else table)
        return k * DISCRETIZATION, deltas[-1]
    if doc[0] == "profile":
        return doc[1] * DISCRETIZATION, doc[2][-1]
    if doc[0] in ("approx", "release"):
        return float(doc[1]), float(doc[2])
    return float(doc[1]), 0.0


def _basic_count(descriptor: str, budget: float, delta: float) -> int:
    """The most figures basic composition already keeps within ``budget`` at ``delta``."""
    eps, per = basic(descriptor)
    by_eps = math.floor(budget / eps * (1 + 1e-9) + 1e-9) if eps > 0 else MAX_COUNT
    by_delta = math.floor(delta / per * (1 + 1e-9)) if per > 0 else MAX_COUNT
    return max(0, min(by_eps, by_delta, MAX_COUNT))


@functools.lru_cache(maxsize=256)
def allowed(descriptor: str, budget: float, delta: float) -> int:
    """The most figures of ``descriptor`` one record may be in within ``budget`` at ``delta``.

    At least what basic composition allows (:func:`basic`); beyond it epsilon
    grows with the count, so a doubling then a bisection from there finds it
    (:data:`MAX_COUNT` at most).
    """
    start = _basic_count(descriptor, budget, delta)
    if start >= MAX_COUNT:
        return start
    if not _fits(epsilon_at({descriptor: start + 1}, delta), budget):
        return start
    low, high = start + 1, 2 * (start + 1)
    while high <= MAX_COUNT and _fits(epsilon_at({descriptor: high}, delta), budget):
        low, high = high, high * 2
    if high > MAX_COUNT:
        return MAX_COUNT
    while high - low > 1:
        mid = (low + high) // 2
        if _fits(epsilon_at({descriptor: mid}, delta), budget):
            low = mid
        else:
            high = mid
    return low


def _fits(value: float, budget: float) -> bool:
    """Within the budget, up to the tolerance that lets sums of 0.1 meet a budget of 0.3."""
    return value <= budget * (1 + 1e-9) + 1e-12


def within(counts: Mapping[str, int], budget: float, delta: float) -> bool:
    """Whether a record in ``counts`` figures of each descriptor stays within ``budget``.

    One mechanism: a comparison with :func:`allowed`; several: their composition.
    """
    kept = {d: n for d, n in counts.items() if d and n > 0}
    if not kept:
        return True
    if len(kept) == 1:
        ((d, n),) = kept.items()
        # Within what basic composition allows: no distribution composed at all.
        if n <= _basic_count(d, float(budget), float(delta)):
            return True
        return n <= allowed(d, float(budget), float(delta))
    return _fits(epsilon_at(kept, delta), budget)
