"""Protected medians and quantiles of continuous variables.

A quantile of a cell is one record's value (:mod:`tablesafe.cells._quantiles`:
the record at rank ``r``, where the cell's cumulative weight reaches ``p``),
so it is never published as it is. Two protections, as the site protects
magnitudes (docs/quantiles.md gives the equations and the attacks):

* **Local-spread noise from the keys** (``method = "ckm"``), after the
  cell-key method (Fraser & Wooton 2005; Thompson, Broadfoot & Elazar
  2013): the quantile moves towards one of its neighbours by a share of the
  distance to the ``h``-th record on that side::

      q' = x_(r) + g * (x_(r+h) - x_(r))     (up)
      q' = x_(r) - g * (x_(r) - x_(r-h))     (down)

  with ``g`` uniform in ``[g_lo, g_hi]`` (``quantile_move``), drawn from the
  key sum of the *window*, the ``2 h + 1`` records of ranks ``r - h .. r + h``,
  and the direction drawn from the record key of the record at rank ``r``.
  The published value is a function of the window's records alone (their
  values and keys, and the secret): the same records around the quantile
  give the same value in every table, so averaging tables whose window is
  the same gains nothing, and the direction of a record's quantile never
  changes. ``q'`` lies between the values of the ``h``-th records below and
  above, and differs from ``x_(r)`` unless ``h + 1`` records share it.
  Published only where the window fits in the cell and the protected count
  reaches ``quantile_min_count``.
* **Differential privacy** (``method = "dp"``): the exponential mechanism
  (McSherry & Talwar 2007) over the owner's bounds, as Smith (2011) and
  Gillenwater, Joseph & Kulesza (2021, eq. 1): the sorted values, clipped
  to ``[lower, upper]``, cut the bounds into ``n + 1`` intervals
  ``I_i = [e_i, e_(i+1)]``, and interval ``i`` is drawn with probability
  proportional to ``|I_i| exp(-epsilon |i - p n| / 2)``, then a point of it
  uniformly; both uniforms from the cell's keys (consistent, as DP sums).
  Unweighted tables only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import RequestError
from tablesafe._request import Item
from tablesafe._rounding import Rounding
from tablesafe._seeds import SeedScheme, definition_words, keyed_words
from tablesafe.catalog._catalog import ReplicateDesign
from tablesafe.catalog._magnitudes import Magnitude, quantile_column
from tablesafe.cells._quantiles import (
    QuantileRanks,
    SortedCells,
    quantile_ranks,
    ranks_at,
    shares_at_or_below,
)
from tablesafe.cells._selection import mix32
from tablesafe.mechanisms._magnitudes import MagnitudeMethod
from tablesafe.mechanisms._variance import replicate_se

if TYPE_CHECKING:
    from tablesafe.mechanisms._magnitudes import MagnitudeProtection

__all__ = [
    "ProtectedQuantiles",
    "QuantileIntervals",
    "dp_quantile",
    "protect_quantiles",
    "window_quantiles",
    "woodruff_shares",
]

#: ``definitions(mask)``: the canonical definitions of the cells of ``mask``.
Definitions = Callable[[npt.NDArray[np.bool_]], list[bytes]]

_KEY_MODULUS = 2**32


@dataclass(frozen=True)
class ProtectedQuantiles:
    """What a table publishes about its quantiles.

    Attributes:
        columns: Column name (``median_VAR``, ``p90_VAR``, ``_weighted`` added
            when over the weights) -> extended array (NaN blank).
        meta: The public statement (``meta.quantiles``).
    """

    columns: dict[str, npt.NDArray[np.float64]]
    meta: dict[str, Any]


def _stream(salt: str, i: int) -> int:
    digest = hashlib.blake2b(f"{salt}:{i}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


def key_uniforms(
    key_sum: npt.NDArray[np.uint32],
    n: npt.NDArray[np.int64],
    salt: str,
    seeds: SeedScheme,
    secret: bytes | None,
    count: int = 1,
) -> list[npt.NDArray[np.float64]]:
    """``count`` uniforms per record set given by its key sum and size.

    Without a secret (cell-key seeds): an integer mix of the key sum with a
    constant per stream; with one (keyed and dynamic seeds): the keyed hash
    of the key sum and the size (:func:`tablesafe._seeds.keyed_words`): the
    draw of a record set, the same in every table (dynamic seeds, which
    give a record set a fresh draw per table, do not reach quantiles).
    """
    if seeds == SeedScheme.CELLKEY or secret is None:
        keys = key_sum.astype(np.int64)
        return [
            (mix32(keys, _stream(salt, i)).astype(np.float64) + 0.5) / float(_KEY_MODULUS)
            for i in range(count)
        ]

    return keyed_words(key_sum.astype(np.uint32), n, secret, salt.encode(), count)


def window_quantiles(
    cells: SortedCells,
    ranks: QuantileRanks,
    move: tuple[float, float],
    cap: float,
    name: str,
    seeds: SeedScheme,
    secret: bytes | None,
) -> npt.NDArray[np.float64]:
    """Local-spread noise from the keys (module docstring); NaN where the window does not fit.

    Args:
        cells: Every cell's records, sorted.
        ranks: The quantile's record and window in every cell.
        move: ``(g_lo, g_hi)``: the share of the spread the quantile moves,
            drawn uniformly between them.
        cap: The largest spread as a share of the quantile's value.
        name: The variable (names the draws' streams).
        seeds: The protection's seed scheme.
        secret: The data owner's secret, or ``None``.

    Returns:
        The unrounded protected quantiles, of the table's extended shape.
    """
    out = np.full(cells.start.shape, np.nan)
    at = np.nonzero(ranks.fits)[0]
    if at.size == 0:
        return out.reshape(cells.shape)
    h = ranks.window
    r = ranks.position[at]
    x, low, high = cells.x[r], cells.x[r - h], cells.x[r + h]
    # The window's key sum: keys summed exactly (int64 holds them), reduced mod 2**32.
    keys = np.concatenate([[0], np.cumsum(cells.key, dtype=np.int64)])
    window_key = ((keys[r + h + 1] - keys[r - h]) % _KEY_MODULUS).astype(np.uint32)
    size = np.full(at.size, 2 * h + 1, dtype=np.int64)
    (u_move,) = key_uniforms(window_key, size, f"quantile:{name}:move", seeds, secret)
    own = (cells.key[r] % _KEY_MODULUS).astype(np.uint32)
    (u_side,) = key_uniforms(
        own, np.ones(at.size, dtype=np.int64), f"quantile:{name}:side", seeds, secret
    )
    # The smaller of the two distances: at least h + 1 records (the quantile's and
    # the h on the nearer side) lie within it of the quantile's value; at most a
    # share of that value (a sparse neighbourhood does not swamp the figure), but
    # never 0 for a value of 0, which has no scale of its own.
    spread = np.minimum(high - x, x - low)
    spread = np.where(x != 0, np.minimum(spread, cap * np.abs(x)), spread)
    g = move[0] + (move[1] - move[0]) * u_move
    out[at] = x + np.where(u_side >= 0.5, 1.0, -1.0) * g * spread
    return out.reshape(cells.shape)


def dp_quantile(
    values: npt.NDArray[np.float64],
    percent: int,
    epsilon: float,
    bounds: tuple[float, float],
    u: tuple[float, float],
) -> float:
    """One cell's quantile by the exponential mechanism (Gillenwater et al. 2021, eq. 1).

    Args:
        values: The cell's values, sorted.
        percent: The quantile in hundredths.
        epsilon: The privacy-loss parameter of this figure.
        bounds: The owner's ``(lower, upper)``: the public range.
        u: Two uniforms in (0, 1): the interval's, then the point's in it.
    """
    lower, upper = bounds
    edges = np.concatenate([[lower], np.clip(values, lower, upper), [upper]])
    length = np.diff(edges)
    n = values.size
    score = -np.abs(np.arange(n + 1, dtype=np.float64) - percent * n / 100.0)
    with np.errstate(divide="ignore"):
        log_weight = np.log(length) + epsilon * score / 2.0
    if not np.isfinite(log_weight).any():
        # Every value at one point that fills the range: nothing else to choose.
        return float(edges[0])
    weight = np.exp(log_weight - log_weight.max())
    cumulative = np.cumsum(weight)
    i = int(np.searchsorted(cumulative, u[0] * cumulative[-1], side="right"))
    i = min(i, n)
    return float(edges[i] + u[1] * (edges[i + 1] - edges[i]))


@dataclass(frozen=True)
class _Context:
    """What every quantile of one table shares."""

    counts: npt.NDArray[np.int64]
    computed: npt.NDArray[np.bool_]
    n: npt.NDArray[np.int64]
    cell_key: npt.NDArray[np.uint32]
    seeds: SeedScheme
    secret: bytes | None
    definitions: Definitions | None


@dataclass(frozen=True)
class QuantileIntervals:
    """What standard errors and intervals of quantiles need beyond the quantiles.

    Attributes:
        design: The catalog's replicate design (its coefficient).
        se_min_count: The smallest protected count with a published standard error.
        level: The confidence level (0.95).
    """

    design: ReplicateDesign
    se_min_count: int
    level: float = 0.95

    def statement(self, *, protected: bool) -> str:
        """What the footnotes and ``meta.quantiles.intervals`` say of the intervals."""
        ends = (
            "each end protected as a quantile is (moved out to the quantile where that left "
            "it outside)"
            if protected
            else "each end the exact quantile there"
        )
        return (
            "A quantile's 95% interval is Woodruff's: the quantiles at the share of the "
            "weight at or below it, minus and plus 1.96 standard errors of that share from "
            f"the replicate weights, {ends}; its standard error is the interval's length "
            "over 2 x 1.96, shown where the protected count is at least "
            f"{self.se_min_count}, rounded as the quantile."
        )


def woodruff_shares(
    cells: SortedCells, ranks: QuantileRanks, design: ReplicateDesign, z: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Woodruff's shares ``F(q) -/+ z se(F(q))`` per cell (flat), NaN outside [0, 1].

    ``F(q)`` is the share of the cell's weight on records at most the
    quantile ``q`` (the exact one, the value of the record at its rank) and
    ``se(F(q))`` its replicate standard error, ``q`` held fixed, as R
    ``survey``'s ``svyquantile`` (``interval.type = "mean"``, its
    ``woodruffCI``) with a normal quantile ``z``; an end whose share falls
    outside [0, 1] is NaN there too.
    """
    share, reps = shares_at_or_below(cells, ranks.position)
    if reps is None:
        raise RequestError("standard errors of quantiles need the records' replicate weights")
    ok = ~np.isnan(share) & ~np.isnan(reps).any(axis=0)
    se = replicate_se(np.nan_to_num(share), np.nan_to_num(reps), design)
    low, high = share - z * se, share + z * se
    low = np.where(ok & (low >= 0), low, np.nan)
    high = np.where(ok & (high <= 1), high, np.nan)
    return low, high


def _dp_cells(
    cells: SortedCells,
    percent: int,
    variable: Magnitude,
    prot: MagnitudeProtection,
    ctx: _Context,
    shown: npt.NDArray[np.bool_],
) -> npt.NDArray[np.float64]:
    """DP quantiles of the cells of ``shown``, uniforms from their keys (empty: definitions)."""
    out = np.full(shown.shape, np.nan)
    if not shown.any():
        return out
    salt = f"quantile:{variable.name}:{percent}:dp"
    flat = np.flatnonzero(shown)
    keys, n = ctx.cell_key.reshape(-1)[flat], ctx.n.reshape(-1)[flat]
    u = key_uniforms(keys, n, salt, ctx.seeds, ctx.secret, 2)
    empty = n == 0
    if empty.any() and ctx.secret is not None and ctx.definitions is not None:
        mask = np.zeros(shown.shape, dtype=bool)
        mask.reshape(-1)[flat[empty]] = True
        words = definition_words(ctx.definitions(mask), ctx.secret, salt.encode(), 2)
        for i in range(2):
            u[i][empty] = words[:, i]
    bounds = (variable.lower, variable.upper)
    for j, (c, values) in enumerate(zip(flat, cells.cells(flat), strict=True)):
        out.reshape(-1)[c] = dp_quantile(
            values, percent, prot.epsilon, bounds, (float(u[0][j]), float(u[1][j]))
        )
    return out


def _one_quantile(
    cells: SortedCells,
    percent: int,
    variable: Magnitude,
    prot: MagnitudeProtection,
    ctx: _Context,
) -> tuple[npt.NDArray[np.float64], QuantileRanks]:
    """One quantile of one variable in every cell, protected and ruled (NaN blank), unrounded.

    Returns:
        The quantiles (the table's extended shape) and their exact ranks.
    """
    ranks = quantile_ranks(cells, percent, prot.quantile_window)
    if prot.method == MagnitudeMethod.DP:
        enough = ctx.computed & (ctx.counts >= prot.quantile_min_count)
        return _dp_cells(cells, percent, variable, prot, ctx, enough), ranks
    return _at_ranks(cells, ranks, variable, prot, ctx), ranks


def _at_ranks(
    cells: SortedCells,
    ranks: QuantileRanks,
    variable: Magnitude,
    prot: MagnitudeProtection,
    ctx: _Context,
) -> npt.NDArray[np.float64]:
    """The values at ``ranks``, protected as quantiles are (no protection, or the window noise)."""
    shape = cells.shape
    if prot.method == MagnitudeMethod.NONE:
        exact = np.where(ranks.position >= 0, cells.x[np.maximum(ranks.position, 0)], np.nan)
        return np.where(ctx.computed, exact.reshape(shape), np.nan)
    enough = ctx.computed & (ctx.counts >= prot.quantile_min_count)
    noisy = window_quantiles(
        cells,
        ranks,
        prot.quantile_move,
        prot.quantile_cap,
        variable.name,
        ctx.seeds,
        ctx.secret,
    )
    return np.where(enough, noisy, np.nan)


def _interval(
    cells: SortedCells,
    ranks: QuantileRanks,
    values: npt.NDArray[np.float64],
    variable: Magnitude,
    prot: MagnitudeProtection,
    ctx: _Context,
    intervals: QuantileIntervals,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Woodruff's interval of a quantile and its standard error, unrounded (NaN blank).

    The ends are the quantiles at the shares :func:`woodruff_shares` gives,
    each protected as a quantile is (the value at its rank moved by the
    noise of its own window), moved out to the quantile where the protection
    left it outside; the standard error is the interval's length over
    ``2 z``, as R ``survey``'s ``svyquantile`` states it.
    """
    from scipy import stats  # imported when needed: a slow import

    z = float(stats.norm.ppf(0.5 + intervals.level / 2))
    low_share, high_share = woodruff_shares(cells, ranks, intervals.design, z)
    h = prot.quantile_window
    low = _at_ranks(cells, ranks_at(cells, low_share, h), variable, prot, ctx)
    high = _at_ranks(cells, ranks_at(cells, high_share, h), variable, prot, ctx)
    low, high = np.minimum(low, values), np.maximum(high, values)
    se = (high - low) / (2.0 * z)
    shown = ~np.isnan(se) & (ctx.counts >= intervals.se_min_count)
    return tuple(np.where(shown, a, np.nan) for a in (se, low, high))  # type: ignore[return-value]


def protect_quantiles(
    items: Sequence[Item],
    cells: Mapping[str, SortedCells],
    counts: npt.NDArray[np.int64],
    computed: npt.NDArray[np.bool_],
    aggregates: tuple[npt.NDArray[np.int64], npt.NDArray[np.uint32]],
    variables: Mapping[str, Magnitude],
    prot: MagnitudeProtection,
    seeds: SeedScheme,
    secret: bytes | None,
    definitions: Definitions | None = None,
    *,
    weighted: bool,
    intervals: QuantileIntervals | None = None,
) -> ProtectedQuantiles:
    """Protected, ruled and rounded quantiles of one table, with their intervals if asked.

    Args:
        items: The request's quantiles (``"median:VAR"``, ``"quantile:VAR:0.9"``).
        cells: Per variable, its records sorted in every cell.
        counts: The protected counts the rule reads.
        computed: Cells of the table.
        aggregates: The true counts and cell keys (the draws of DP quantiles).
        variables: The catalog's magnitudes.
        prot: The site's protection of magnitudes (its quantile parameters).
        seeds: The protection's seed scheme.
        secret: The data owner's secret, or ``None``.
        definitions: The canonical definitions of cells (DP draws of empty cells).
        weighted: Whether the quantiles are over the survey weights.
        intervals: For standard errors and 95% intervals (``VAR_se``,
            ``VAR_ci_low``, ``VAR_ci_high`` beside each quantile's column):
            the replicate design and threshold; the cells must carry the
            records' replicate weights. ``None``: none.

    Raises:
        RequestError: for a DP quantile of a weighted table.
    """
    if weighted and prot.method == MagnitudeMethod.DP:
        raise RequestError(
            "this site protects magnitudes with differential privacy, which covers "
            "unweighted quantiles only; ask for statistic count with median:VAR or quantile:VAR:P"
        )
    rounding = Rounding.parse(prot.quantile_rounding)
    ctx = _Context(counts, computed, aggregates[0], aggregates[1], seeds, secret, definitions)
    columns: dict[str, npt.NDArray[np.float64]] = {}
    for item in items:
        name, percent = item.variable, item.percent
        assert percent is not None
        values, ranks = _one_quantile(cells[name], percent, variables[name], prot, ctx)
        shown = ~np.isnan(values)
        column = quantile_column(percent, name, weighted=weighted)
        published = np.where(shown, rounding.apply(np.nan_to_num(values)), np.nan)
        columns[column] = published
        if intervals is None:
            continue
        se, low, high = _interval(cells[name], ranks, values, variables[name], prot, ctx, intervals)
        # Rounded as the quantile, then moved out to it: it lies inside its own interval.
        columns[f"{column}_se"] = rounding.apply(se)
        columns[f"{column}_ci_low"] = np.minimum(rounding.apply(low), published)
        columns[f"{column}_ci_high"] = np.maximum(rounding.apply(high), published)
    meta = prot.describe_quantiles(weighted=weighted)
    if intervals is not None:
        meta["intervals"] = intervals.statement(protected=prot.method != MagnitudeMethod.NONE)
    return ProtectedQuantiles(columns, meta)
