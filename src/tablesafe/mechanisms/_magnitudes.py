"""Protected sums and means of continuous variables (magnitude tables).

Every cell of a magnitude table is protected from the cell's record keys,
so the same cell gives the same value in every table, for every user, in
every engine (see docs/magnitudes.md for the equations):

* **Cell-key method for magnitudes** (ABS; R packages ``cellKey`` and
  ``ptable``): the perturbation is proportional to the cell's largest
  contributions ``x_(1) >= x_(2) >= ...``::

      X' = X + sign(X) * s * sum_j  m * eps_j * x_(j) * (mu + |v_j|)

  where ``v_j`` is drawn from a numeric ptable
  (:func:`tablesafe.mechanisms._num_ptable.num_ptable`, the construction of
  ``ptable::create_num_ptable``) by a uniform from the cell
  key (a separate stream per variable and per ``j``), ``s`` is the sign of
  ``v_1`` (of a second draw where ``v_1 = 0``): away from 0 or towards it,
  relative to the sign of ``X`` as in ``cellKey``, and away from 0 when
  the move towards it would reach 0; ``m`` the share of a contribution
  that one unit of ``v`` moves, ``eps_j`` the weights of the contributions
  and ``mu`` a floor. All terms take one direction, so none cancels
  another: before rounding, every sum moves by at least ``m * mu * x_(1)``
  (differencing two published cells does not give the largest contributor
  away) and keeps its sign (:func:`ckm_noise`).
* **Differential privacy**: ``X' = X + Laplace(b)`` with ``b = Delta / epsilon``
  and ``Delta = max(|lower|, |upper|)`` from the owner's bounds (a record
  changes a sum by at most ``Delta``); the Laplace draw is the inverse CDF of
  a uniform from the cell key (consistent, as the counts).
* **Means** are the protected sum over the protected count (weighted: over
  the protected weighted count), never a separately computed mean.
* **Sensitivity rules** (tau-Argus): the dominance ``(n, k)`` rule and the
  ``p%`` rule, evaluated on the true largest contributions; a sensitive
  cell is flagged or suppressed, as the site says.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import InternalError, ParameterError, RequestError, choice
from tablesafe._protection_limits import check_number
from tablesafe._request import Item
from tablesafe._rounding import Rounding
from tablesafe._seeds import SeedScheme, definition_words, dynamic_words, keyed_words
from tablesafe.catalog._magnitudes import MAGNITUDE_SCALE, Magnitude, magnitude_column
from tablesafe.cells._selection import mix32
from tablesafe.mechanisms._discrete import KeyedBits, discrete_laplace, rational
from tablesafe.mechanisms._num_ptable import NumPTable
from tablesafe.mechanisms._num_ptable_cache import cached_num_ptable
from tablesafe.mechanisms._weighted import enclosing_means

if TYPE_CHECKING:
    from tablesafe.cells._aggregates import CellAggregates

#: ``uniforms(j, what)``: the uniforms of every cell for draw ``what`` (``"v"``,
#: ``"sign"``, ``"laplace"``) of contribution ``j``.
Uniforms = Callable[[int, str], npt.NDArray[np.float64]]
#: ``definitions(mask)``: the canonical definitions of the cells of ``mask``.
Definitions = Callable[[npt.NDArray[np.bool_]], list[bytes]]

__all__ = [
    "MagnitudeMethod",
    "MagnitudeProtection",
    "SensitiveAction",
    "dominance_rule",
    "p_percent_rule",
    "protect_magnitudes",
]


def dominance_rule(
    total: npt.ArrayLike, top: npt.ArrayLike, n: int, k: float
) -> npt.NDArray[np.bool_]:
    """The ``(n, k)`` dominance rule: the ``n`` largest contributions exceed ``k``% of the total.

    Args:
        total: Cell totals (absolute values are used).
        top: Largest absolute contributions, shape ``(K, ...)`` with ``K >= n``.
        n: How many contributors may dominate.
        k: The share in percent.
    """
    t = np.abs(np.asarray(total, dtype=np.float64))
    largest = np.asarray(top, dtype=np.float64)[:n].sum(axis=0)
    return np.asarray((t > 0) & (largest > k / 100.0 * t))


def p_percent_rule(total: npt.ArrayLike, top: npt.ArrayLike, p: float) -> npt.NDArray[np.bool_]:
    """The p% rule: the second-largest contributor can estimate the largest within ``p``%.

    A cell is sensitive when ``X - x_(1) - x_(2) < p/100 * x_(1)``: what the
    others contribute is too small to hide the largest contribution.
    """
    t = np.abs(np.asarray(total, dtype=np.float64))
    top_ = np.asarray(top, dtype=np.float64)
    rest = t - top_[0] - top_[1]
    return np.asarray((top_[0] > 0) & (rest < p / 100.0 * top_[0]))


# -- the site's choice ------------------------------------------------------------------

#: What DP sums say of their noise (``meta.magnitudes.noise``).
DP_NOISE = (
    "discrete Laplace on the grid of the exact sums (Canonne, Kamath & Steinke 2020), "
    "sampled with integers from keyed bits: the same figure always gets the same noise"
)
#: What DP sums say of clamping (``meta.magnitudes.clamping``).
DP_CLAMPING = (
    "none of the inputs: validation refuses a value outside [lower, upper], so every "
    "contribution is within the bounds that set the sensitivity; a published sum below 0 "
    "of a variable without negative values is set to 0 (post-processing)"
)


def _scale_of(s: int, t: int) -> float:
    """The discrete Laplace's scale ``t / s`` grid steps, in the variable's unit."""
    return float(t / (s * MAGNITUDE_SCALE))


class MagnitudeMethod(StrEnum):
    """The protection of sums and means (a member equals its text)."""

    CKM = "ckm"
    DP = "dp"
    NONE = "none"


class SensitiveAction(StrEnum):
    """What a cell the sensitivity rules find gets (a member equals its text)."""

    FLAG = "flag"
    SUPPRESS = "suppress"


@dataclass(frozen=True)
class MagnitudeProtection:
    """The data owner's protection of magnitudes (never the user's choice).

    Args:
        method: ``"ckm"`` (cell-key method for magnitudes), ``"dp"``
            (Laplace noise on bounded sums) or ``"none"`` (exact, the owner's use).
        D: Maximum deviation of the numeric ptable.
        V: Variance of the numeric ptable.
        step: Steps per unit of the numeric ptable.
        icat: Row values of the numeric ptable (default ``(1, D)``).
        share: ``m``: the share of a contribution one unit of ``v`` moves.
        top_k: How many of the largest contributions are perturbed (1 to 3).
        eps: Weights of the contributions ``j = 1 .. top_k`` (the first is 1).
        mu: The floor added to ``|v|``: before rounding, every sum moves by
            at least ``share * mu * x_(1)``.
        epsilon: Privacy-loss budget per cell for ``"dp"``.
        rounding: Rounding of the published sums (``"1"``, ``"1000"``, ``"3sf"``).
        mean_rounding: Rounding of the published means.
        quantile_rounding: Rounding of the published medians and quantiles, their
            standard errors and intervals (significant figures by default: a
            quantile has the scale of its variable, which one base cannot fit).
        dominance: The ``(n, k)`` of the dominance rule, or ``None``.
        p_percent: The ``p`` of the p% rule, or ``None``.
        action: What a sensitive cell gets: ``"flag"`` (a public flag beside
            its perturbed values) or ``"suppress"`` (sum and mean blank).
        quantile_window: ``h``: a quantile's window holds the ``h`` records
            below and above its own (:mod:`tablesafe.mechanisms._quantiles`).
        quantile_move: ``(g_lo, g_hi)``: the share of its spread a quantile
            moves (the cell-key method): the spread is the distance to the
            ``h``-th neighbour on the nearer side, at most ``quantile_cap``
            times the quantile's value.
        quantile_cap: The largest spread, as a share of the quantile's value.
        quantile_min_count: The smallest protected count of a cell whose
            quantiles are published (at least ``2 h + 1``).

    Raises:
        ParameterError: for an unknown option or an impossible value.
    """

    method: MagnitudeMethod = MagnitudeMethod.CKM
    D: int = 3
    V: float = 1.0
    step: int = 4
    icat: tuple[int, ...] | None = None
    share: float = 0.1
    top_k: int = 2
    eps: tuple[float, ...] = (1.0, 0.5, 0.25)
    mu: float = 0.5
    epsilon: float = 1.0
    rounding: str = "1"
    mean_rounding: str = "0.01"
    quantile_rounding: str = "3sf"
    dominance: tuple[int, float] | None = (1, 85.0)
    p_percent: float | None = 10.0
    action: SensitiveAction = SensitiveAction.FLAG
    quantile_window: int = 5
    quantile_move: tuple[float, float] = (0.1, 0.5)
    quantile_cap: float = 0.08
    quantile_min_count: int = 20

    def __post_init__(self) -> None:
        # Texts are accepted for both options and held as members from here on.
        object.__setattr__(self, "method", choice(MagnitudeMethod, self.method, "magnitude method"))
        object.__setattr__(self, "action", choice(SensitiveAction, self.action, "action"))
        # The site configuration's ranges (docs/site-config.md), checked for the Python API too.
        for name in ("share", "mu", "epsilon", "top_k", "quantile_window"):
            check_number(f"magnitudes.{name}", getattr(self, name))
        object.__setattr__(self, "eps", tuple(float(e) for e in self.eps))
        if len(self.eps) < self.top_k or self.eps[0] != 1.0 or any(e < 0 for e in self.eps):
            raise ParameterError(
                f"eps needs at least top_k = {self.top_k} non-negative weights, the first 1"
            )
        if self.dominance is not None:
            n, k = self.dominance
            if not (isinstance(n, int) and 1 <= n <= 3 and 0 < float(k) <= 100):
                raise ParameterError(
                    f"dominance must be (n, k) with n in 1..3 and k in (0, 100], not "
                    f"{self.dominance!r}"
                )
            object.__setattr__(self, "dominance", (int(n), float(k)))
        if self.p_percent is not None and not 0 < float(self.p_percent) <= 100:
            raise ParameterError(f"p_percent must lie in (0, 100], not {self.p_percent!r}")
        for label in ("rounding", "mean_rounding", "quantile_rounding"):
            Rounding.parse(getattr(self, label)).check_owner(label)
        self._check_quantiles()

    def _check_quantiles(self) -> None:
        """The quantile parameters: a window of 1 to 50 records a side, a move within it."""
        move = tuple(self.quantile_move)
        ok = len(move) == 2 and all(
            isinstance(g, int | float) and not isinstance(g, bool) for g in move
        )
        if not ok or not 0 < float(move[0]) <= float(move[1]) <= 1:
            raise ParameterError(
                f"quantile_move must be two shares 0 < low <= high <= 1, not {self.quantile_move!r}"
            )
        object.__setattr__(self, "quantile_move", (float(move[0]), float(move[1])))
        cap = self.quantile_cap
        if isinstance(cap, bool) or not isinstance(cap, int | float) or not 0 < cap <= 1:
            raise ParameterError(f"quantile_cap must be a share in (0, 1], not {cap!r}")
        h, least = self.quantile_window, self.quantile_min_count
        if isinstance(least, bool) or not isinstance(least, int) or least < 2 * h + 1:
            raise ParameterError(
                f"quantile_min_count must be an integer of at least 2 * quantile_window + 1 = "
                f"{2 * h + 1}, not {least!r}"
            )

    @property
    def protects(self) -> bool:
        """Whether sums, means and quantiles are protected (``False`` for ``"none"``: exact)."""
        return self.method != MagnitudeMethod.NONE

    def top_needed(self) -> int:
        """How many largest contributions per cell the protection and the rules use.

        The cell-key method perturbs by the ``top_k`` largest, the dominance
        ``(n, k)`` rule sums the ``n`` largest and the p% rule needs two; at
        least one (the largest, for cells without records). Engines compute
        no more than this (each further one costs a top-k aggregate per record).
        """
        k = self.top_k if self.method == MagnitudeMethod.CKM else 1
        if self.dominance is not None:
            k = max(k, self.dominance[0])
        if self.p_percent is not None:
            k = max(k, 2)
        return k

    def ptable(self) -> NumPTable:
        """The numeric ptable (built once per parameters)."""
        return _cached_ptable(self.D, float(self.V), self.step, self.icat)

    def describe(self, bounds: Mapping[str, float] | None = None) -> dict[str, Any]:
        """The public statement of the protection of magnitudes."""
        out: dict[str, Any] = {"method": str(self.method)}
        if self.method == MagnitudeMethod.CKM:
            out.update(
                ptable=self.ptable().describe(),
                share=self.share,
                top_k=self.top_k,
                eps=list(self.eps[: self.top_k]),
                mu=self.mu,
                statement=(
                    "cell-key method for magnitudes: each sum moves by "
                    f"{self.share:g} x (mu + |v|) of each of its {self.top_k} largest "
                    "contributions (weighted by eps), all in one direction, v from the numeric "
                    "ptable by the cell key; before rounding, every sum moves by at least "
                    f"{self.share * self.mu:g} of its largest contribution and never changes "
                    "its sign (a move towards 0 that would reach it goes away from 0 instead)"
                ),
            )
        elif self.method == MagnitudeMethod.DP:
            out.update(
                epsilon=self.epsilon,
                noise=DP_NOISE,
                grid=1 / MAGNITUDE_SCALE,
                clamping=DP_CLAMPING,
                statement=(
                    f"discrete Laplace noise of scale max(|lower|, |upper|) / {self.epsilon:g} "
                    f"on every sum, in steps of 1/{MAGNITUDE_SCALE} (epsilon {self.epsilon:g} "
                    "per cell and variable; a record is in one cell per grouping set, so a "
                    "table spends epsilon times the number of its grouping sets); values lie "
                    "within the owner's bounds, so nothing is clipped; means are protected "
                    "sums over protected counts"
                ),
            )
            if bounds:
                # The scale the sampler uses, in the variable's unit (t / s grid steps).
                out["laplace_scale"] = {
                    k: _scale_of(*dp_grid_scale(v, self.epsilon)) for k, v in bounds.items()
                }
        rules = []
        if self.dominance is not None:
            rules.append(f"dominance ({self.dominance[0]}, {self.dominance[1]:g})")
        if self.p_percent is not None:
            rules.append(f"p% with p = {self.p_percent:g}")
        out["rules"] = rules
        out["sensitive_cells"] = str(self.action)
        out["rounding"] = {"sum": self.rounding, "mean": self.mean_rounding}
        return out

    def describe_quantiles(self, *, weighted: bool) -> dict[str, Any]:
        """The public statement of the protection of medians and quantiles (``meta.quantiles``)."""
        out: dict[str, Any] = {"method": str(self.method), "weighted": weighted}
        h, (low, high) = self.quantile_window, self.quantile_move
        if self.method == MagnitudeMethod.CKM:
            out.update(
                window=h,
                move=[low, high],
                min_count=self.quantile_min_count,
                cap=self.quantile_cap,
                statement=(
                    f"each quantile moves up or down from the value of the record at its rank by "
                    f"a share from {low:g} to {high:g} of its spread (the distance to the {h}th "
                    f"record on the nearer side, at most {self.quantile_cap:g} of the value), "
                    f"drawn from the keys of the {2 * h + 1} records around it; published where "
                    f"{h} records lie on each side of it and the protected count is at least "
                    f"{self.quantile_min_count}"
                ),
            )
        elif self.method == MagnitudeMethod.DP:
            out.update(
                epsilon=self.epsilon,
                min_count=self.quantile_min_count,
                statement=(
                    f"exponential mechanism over the owner's bounds (epsilon {self.epsilon:g} per "
                    f"cell and quantile); published where the protected count is at least "
                    f"{self.quantile_min_count}"
                ),
            )
        out["rounding"] = self.quantile_rounding
        return out


@functools.lru_cache(maxsize=16)
def _cached_ptable(D: int, V: float, step: int, icat: tuple[int, ...] | None) -> NumPTable:
    return cached_num_ptable(D, V, step, icat)


# -- uniforms from the keys -----------------------------------------------------------------


def _stream(name: str, j: int, what: str) -> int:
    digest = hashlib.blake2b(f"magnitude:{name}:{what}:{j}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


#: Under dynamic seeds, the word of a magnitude's digest that each draw takes.
_WORDS = {
    ("v", 0): 0,
    ("sign", 0): 1,
    ("v", 1): 2,
    ("sign", 1): 3,
    ("v", 2): 4,
    ("sign", 2): 5,
    ("laplace", 0): 6,
}


def dynamic_magnitude_words(
    cell_key: npt.NDArray[np.uint32], name: str, secret: bytes | str
) -> list[npt.NDArray[np.float64]]:
    """Every dynamic-seed draw of magnitude ``name`` for every cell, from one keyed hash per cell.

    One BLAKE2b digest per cell (:func:`tablesafe._seeds.dynamic_words`,
    salt ``magnitude:NAME``) split into seven 64-bit words: ``v`` and the
    sign coin of contributions 1 to 3, then the Laplace draw (see
    ``_WORDS``). Words of one keyed digest are jointly pseudorandom, so the
    draws are as independent as with one hash per draw, at the cost of one hash per cell.
    """
    return dynamic_words(cell_key, secret, f"magnitude:{name}".encode(), len(_WORDS))


def magnitude_uniforms(
    cell_key: npt.NDArray[np.uint32],
    name: str,
    j: int,
    what: str,
    seeds: SeedScheme,
    secret: bytes | None,
) -> npt.NDArray[np.float64]:
    """Uniforms in (0, 1) for draw ``what`` of contribution ``j`` of magnitude ``name``.

    Cell-key seeds: an integer mix of the cell key with a constant of the
    stream (a bijection, independent of the count's draw); dynamic seeds: the
    word of the draw in the cell's keyed digest (:func:`dynamic_magnitude_words`).
    """
    if seeds == SeedScheme.DYNAMIC:
        assert secret is not None
        return dynamic_magnitude_words(cell_key, name, secret)[_WORDS[(what, j)]]

    mixed = mix32(cell_key.astype(np.int64), _stream(name, j, what))
    return (mixed.astype(np.float64) + 0.5) / 2.0**32


def _magnitude_draws(
    agg: CellAggregates,
    name: str,
    seeds: SeedScheme,
    secret: bytes | None,
    definitions: Definitions | None,
) -> Uniforms:
    """``uniforms(j, what)`` for magnitude ``name``: each draw of every cell, computed once.

    Cell-key seeds mix the cell key per draw (:func:`magnitude_uniforms`);
    keyed and dynamic seeds split one keyed hash per cell into the seven
    words of ``_WORDS``. With a secret, a cell without records takes its
    words from a keyed hash of its definition instead.
    """
    salt = f"magnitude:{name}".encode()
    words: list[npt.NDArray[np.float64]] = []
    empty = agg.n == 0
    override = secret is not None and definitions is not None and seeds != SeedScheme.DYNAMIC
    empty_words: list[npt.NDArray[np.float64]] = []

    def uniforms(j: int, what: str) -> npt.NDArray[np.float64]:
        if seeds == SeedScheme.CELLKEY:
            u = magnitude_uniforms(agg.cell_key, name, j, what, seeds, secret)
        else:
            if not words:  # one keyed hash per cell gives every draw of the variable
                assert secret is not None
                if seeds == SeedScheme.KEYED:
                    words.extend(keyed_words(agg.cell_key, agg.n, secret, salt, len(_WORDS)))
                else:
                    words.extend(dynamic_magnitude_words(agg.cell_key, name, secret))
            u = words[_WORDS[(what, j)]].copy()
        if override and empty.any():
            if not empty_words:
                assert secret is not None and definitions is not None
                table = definition_words(definitions(empty), secret, salt, len(_WORDS))
                empty_words.extend(table[:, i] for i in range(len(_WORDS)))
            u[empty] = empty_words[_WORDS[(what, j)]]
        return u

    return uniforms


# -- protection of one table ------------------------------------------------------------------


@dataclass(frozen=True)
class ProtectedMagnitudes:
    """What a table publishes about its magnitudes.

    Attributes:
        columns: Column name (``sum_VAR``, ``mean_VAR``, ``_weighted`` added when over the
            weights) -> extended array (NaN blank).
        sensitive: Magnitude name -> cells flagged by the rules.
        meta: The public statement (``meta.magnitudes``).
        sums: Magnitude name -> the protected sums before rounding (for their
            standard errors; never published as such).
        items: Each item asked for -> its column.
    """

    columns: dict[str, npt.NDArray[np.float64]]
    sensitive: dict[str, npt.NDArray[np.bool_]]
    meta: dict[str, Any]
    sums: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)
    items: dict[Item, str] = field(default_factory=dict)


def ckm_noise(
    total: npt.NDArray[np.float64],
    top: npt.NDArray[np.float64],
    prot: MagnitudeProtection,
    uniforms: Uniforms,
) -> npt.NDArray[np.float64]:
    """The cell-key perturbation of magnitude sums (see the module docstring).

    Each of the ``top_k`` largest contributions gives a move
    ``t_j = m * eps_j * x_(j) * (mu + |v_j|)``, with ``v_j`` from the row of
    ``a_j = |X| / (m eps_j x_(j))``. As in R's ``cellKey``, the direction is
    relative to the sign of ``X``: the sign of ``v_1`` (a coin where ``v_1 = 0``)
    says away from 0 (+) or towards it (-). All moves take that one direction,
    so they add up and never cancel: ``|X' - X| = sum_j t_j >= m * mu * x_(1)``.
    A move towards 0 that would reach or pass 0 goes away from it instead, so
    ``X'`` keeps the sign of ``X`` (``X = 0`` moves by the coin's sign).

    Args:
        total: True sums.
        top: Largest absolute contributions ``(K, ...)``.
        prot: The site's parameters.
        uniforms: ``uniforms(j, what)`` -> uniforms of the cells for draw ``what``
            (``"v"`` or ``"sign"``) of contribution ``j``.
    """
    table = prot.ptable()
    size = np.zeros(total.shape, dtype=np.float64)
    away = np.ones(total.shape, dtype=bool)
    for j in range(prot.top_k):
        delta = prot.share * prot.eps[j] * top[j]
        live = delta > 0
        a = np.divide(np.abs(total), delta, out=np.full(total.shape, np.inf), where=live)
        v = table.lookup(table.row_for(np.minimum(a, table.D)), uniforms(j, "v"))
        size += np.where(live, delta * (prot.mu + np.abs(v)), 0.0)
        if j == 0:
            coin = uniforms(0, "sign") >= 0.5
            away = np.where(v != 0, v > 0, coin)
    # A sum of 0 has no side: the drawn direction is the sign of the move.
    sign_x = np.where(total > 0, 1.0, np.where(total < 0, -1.0, np.where(away, 1.0, -1.0)))
    # Towards 0 only while the whole move stays short of 0: never past it, never onto it.
    away |= size >= np.abs(total)
    return np.where(away, sign_x, -sign_x) * size


def dp_grid_scale(bound: float, epsilon: float) -> tuple[int, int]:
    """The discrete Laplace of a DP sum as CKS's integers ``(s, t)``: scale ``t / s`` grid units.

    On the grid of ``1 / MAGNITUDE_SCALE`` (the exact sums' fixed point) a
    record moves a sum by at most ``delta = ceil(bound * MAGNITUDE_SCALE)``
    units (its contribution is ``round(x * 16)`` with ``|x| <= bound``), so
    noise with ``P(y) ∝ exp(-epsilon |y| / delta)`` is epsilon-DP: with
    ``epsilon = p / q`` as written (:func:`~tablesafe.mechanisms._discrete.rational`),
    ``s = p`` and ``t = delta q``.
    """
    delta = math.ceil(bound * MAGNITUDE_SCALE)
    eps = rational(epsilon)
    return eps.numerator, delta * eps.denominator


def dp_noise(
    base: npt.NDArray[np.float64],
    live: npt.NDArray[np.bool_],
    bound: float,
    epsilon: float,
    uniforms: Uniforms,
) -> npt.NDArray[np.float64]:
    """DP sums: ``base`` on the grid plus exact discrete Laplace noise, for the cells of ``live``.

    Each cell's noise is sampled with integers only (Canonne, Kamath &
    Steinke 2020) from :class:`~tablesafe.mechanisms._discrete.KeyedBits`
    seeded with the cell's seven keyed draws of the variable (the 64-bit
    patterns of every ``uniforms(j, what)``), so the noise is a deterministic
    function of the secret and the figure's key, and the result is a multiple
    of ``1 / MAGNITUDE_SCALE``, exact in a double: no floating-point artifact
    tells the true sum. Cells outside ``live`` are 0.
    """
    s, t = dp_grid_scale(bound, epsilon)
    draws = np.stack([uniforms(j, what) for what, j in _WORDS]).reshape(len(_WORDS), -1)
    seeds = np.ascontiguousarray(draws.T).view(np.uint8).reshape(-1, 8 * len(_WORDS))
    units = np.rint(np.asarray(base, dtype=np.float64) * MAGNITUDE_SCALE).reshape(-1)
    out = np.zeros(units.shape, dtype=np.float64)
    for i in np.flatnonzero(np.asarray(live).reshape(-1)):
        y = discrete_laplace(KeyedBits(seeds[i].tobytes()), s, t)
        out[i] = (int(units[i]) + y) / MAGNITUDE_SCALE
    return out.reshape(np.shape(base))


def protect_magnitudes(
    magnitudes: Sequence[Item],
    agg: CellAggregates,
    counts: npt.NDArray[np.int64],
    weighted: npt.NDArray[np.float64] | None,
    computed: npt.NDArray[np.bool_],
    variables: Mapping[str, Magnitude],
    prot: MagnitudeProtection,
    seeds: SeedScheme,
    secret: bytes | None,
    definitions: Definitions | None = None,
    empty_mean: Callable[[str], float] | None = None,
) -> ProtectedMagnitudes:
    """Protected sums, means and rule flags of one table.

    Args:
        magnitudes: The request's items (``"sum:VAR"``, ``"mean:VAR"``).
        agg: The table's :class:`~tablesafe.CellAggregates` (every grouping set).
        counts: Protected counts (the means' denominators when unweighted).
        weighted: Protected weighted counts before rounding (the denominators
            when weighted: a mean is rounded once, as itself), or ``None`` for
            an unweighted table.
        computed: Cells of the table.
        variables: The catalog's magnitudes (bounds, whether negative values occur).
        prot: The site's protection of magnitudes.
        seeds: ``"cellkey"``, ``"keyed"`` or ``"dynamic"``.
        secret: The data owner's secret (keyed and dynamic seeds; empty cells).
        definitions: ``definitions(mask) -> list[bytes]``, the canonical
            definitions of the cells of a mask; with a secret, the draws of a
            cell without records come from its definition.
        empty_mean: ``empty_mean(name) -> float``, the dataset's mean of the
            variable per record (a public constant): the value per record of
            a cell without records that the count mechanism publishes as
            non-zero. Default: the mean of its nearest enclosing margin,
            which depends on the table around the cell.

    Raises:
        RequestError: for ``mean:VAR`` where the universe's protected
            denominator is zero (nothing to average over).
    """
    denominators = weighted if weighted is not None else counts.astype(np.float64)
    r_sum, r_mean = Rounding.parse(prot.rounding), Rounding.parse(prot.mean_rounding)
    protected: dict[str, npt.NDArray[np.float64]] = {}
    sensitive: dict[str, npt.NDArray[np.bool_]] = {}
    names = list(dict.fromkeys(item.variable for item in magnitudes))
    bounds = {n: variables[n].bound for n in names}
    for name in names:
        sensitive[name] = _sensitive_cells(name, agg, computed, prot)
        if prot.method == MagnitudeMethod.NONE:
            protected[name] = agg.magnitudes[name].total.copy()
        else:
            keys = (seeds, secret, definitions, empty_mean)
            protected[name] = _perturbed_sums(
                name, agg, counts, weighted, variables[name], prot, *keys
            )
    columns: dict[str, npt.NDArray[np.float64]] = {}
    items: dict[Item, str] = {}
    for item in magnitudes:
        kind, name = item.kind, item.variable
        value = protected[name]
        hide = ~computed | (sensitive[name] if prot.action == SensitiveAction.SUPPRESS else False)
        column = items[item] = magnitude_column(kind, name, weighted=weighted is not None)
        if kind == "sum":
            columns[column] = np.where(hide, np.nan, r_sum.apply(value))
        else:
            mean = _mean(name, value, denominators, computed, weighted is not None)
            columns[column] = np.where(hide, np.nan, r_mean.apply(mean))
    meta = prot.describe({n: bounds[n] for n in names})
    meta["variables"] = names
    meta["weighted"] = weighted is not None
    return ProtectedMagnitudes(columns, sensitive, meta, protected, items)


def _sensitive_cells(
    name: str, agg: CellAggregates, computed: npt.NDArray[np.bool_], prot: MagnitudeProtection
) -> npt.NDArray[np.bool_]:
    """Step 1 of protect_magnitudes: the cells the sensitivity rules find, for one variable.

    Raises:
        InternalError: if the engine computed fewer largest contributions
            than the protection and the rules need.
    """
    sums = agg.magnitudes[name]
    total, top = sums.total, sums.top
    if top.shape[0] < prot.top_needed():
        raise InternalError(
            f"magnitude {name} comes with {top.shape[0]} largest contributions per cell; "
            f"the protection needs {prot.top_needed()}"
        )
    flags = np.zeros(total.shape, dtype=bool)
    if prot.dominance is not None:
        flags |= dominance_rule(total, top, *prot.dominance)
    if prot.p_percent is not None:
        flags |= p_percent_rule(total, top, prot.p_percent)
    flags &= computed
    return flags


def _perturbed_sums(
    name: str,
    agg: CellAggregates,
    counts: npt.NDArray[np.int64],
    weighted: npt.NDArray[np.float64] | None,
    variable: Magnitude,
    prot: MagnitudeProtection,
    seeds: SeedScheme,
    secret: bytes | None,
    definitions: Definitions | None,
    empty_mean: Callable[[str], float] | None,
) -> npt.NDArray[np.float64]:
    """Step 2 of protect_magnitudes: one variable's sums, perturbed by the site's method.

    Raises:
        RequestError: for differential privacy on a weighted table.
    """
    sums = agg.magnitudes[name]
    total, top = sums.total, sums.top
    # A cell without records that the count mechanism publishes as non-zero
    # gets the sum of n' records at the mean of its nearest enclosing margin,
    # so a published sum does not tell a true zero from a real cell.
    per = enclosing_means(total, agg.n, 0.0)
    if empty_mean is not None:
        # A function of the cell's definition alone, as its count is: the
        # margins' means change with the table around the cell.
        per = np.where(agg.n == 0, empty_mean(name), per)
    empty = (agg.n == 0) & (counts > 0)
    base = np.where(empty, per * counts, total)
    top_eff = top.copy()
    top_eff[0] = np.where(empty, np.abs(per), top[0])

    uniforms = _magnitude_draws(agg, name, seeds, secret, definitions)
    if prot.method == MagnitudeMethod.CKM:
        value = base + ckm_noise(base, top_eff, prot, uniforms)
    else:
        if weighted is not None:
            raise RequestError(
                "this site protects magnitudes with differential privacy, which "
                "covers unweighted sums only; ask for statistic count with sum:VAR "
                "or mean:VAR"
            )
        value = dp_noise(base, counts > 0, variable.bound, prot.epsilon, uniforms)
    if not variable.negative:
        value = np.maximum(value, 0.0)
    out: npt.NDArray[np.float64] = np.where(counts > 0, value, 0.0)
    return out


def _mean(
    name: str,
    value: npt.NDArray[np.float64],
    denominators: npt.NDArray[np.float64],
    computed: npt.NDArray[np.bool_],
    weighted: bool,
) -> npt.NDArray[np.float64]:
    """Step 3 of protect_magnitudes: protected sums over protected counts (NaN over 0).

    A mean needs something to average over: the universe's protected count
    where the table has it; without it (margins "none", or chosen margins),
    any cell shown with a protected count.

    Raises:
        RequestError: where there is nothing to average over.
    """
    total_at = (-1,) * denominators.ndim
    if bool(computed[total_at]):
        nothing = float(denominators[total_at]) <= 0
        where = "of the universe is"
    else:
        nothing = not bool(np.any(denominators[computed] > 0))
        where = "of every cell shown is"
    if nothing:
        raise RequestError(
            f"mean:{name} has nothing to average over: the protected "
            f"{'weighted ' if weighted else ''}count {where} 0"
        )
    mean: npt.NDArray[np.float64] = np.divide(
        value, denominators, out=np.full(value.shape, np.nan), where=denominators > 0
    )
    return mean
