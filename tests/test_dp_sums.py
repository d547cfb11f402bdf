"""DP sums draw exact discrete Laplace noise from keyed bits (issue 38, item 7).

The floating-point Laplace (inverse CDF of a double) leaves gaps and patterns that
depend on the value it is added to (Mironov 2012). The sampler of Canonne, Kamath &
Steinke (2020) works in integers on the exact sums' grid: its distribution is checked
with chi-square tests on draws from a fixed Generator's seeds (as Tumult Core tests its
samplers), and published sums are checked to lie on the grid.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tablesafe import Dataset, TableBuilder, TableRequest
from tablesafe._cli._methods import protection_from_options
from tablesafe._protection import Protection
from tablesafe.catalog._magnitudes import MAGNITUDE_SCALE
from tablesafe.mechanisms._discrete import (
    KeyedBits,
    bernoulli_exp,
    discrete_laplace,
    laplace_pmf,
    rational,
)
from tablesafe.mechanisms._magnitudes import (
    DP_CLAMPING,
    DP_NOISE,
    MagnitudeProtection,
    dp_grid_scale,
)
from tablesafe.mechanisms._precision import dp_noise_variance

SECRET = b"a-secret-of-at-least-16-bytes"


def _streams(seed: int, n: int) -> list[KeyedBits]:
    """``n`` independent bit streams, seeded from a fixed Generator."""
    rng = np.random.default_rng(seed)
    return [KeyedBits(rng.bytes(56)) for _ in range(n)]


def _chi_square(values: np.ndarray, s: int, t: int) -> float:
    """The chi-square p-value of integer draws against the discrete Laplace of ``(s, t)``.

    Bins are runs of consecutive values holding an expected count of at least 20, the
    two tails pooled into the outer bins.
    """
    n = len(values)
    reach = int(40 * t / s) + 50
    support = np.arange(-reach, reach + 1)
    expected = n * np.array([laplace_pmf(int(y), s, t) for y in support])
    edges, acc = [], 0.0
    for y, e in zip(support, expected, strict=True):
        acc += e
        if acc >= 20:
            edges.append(y)
            acc = 0.0
    edges[-1] = reach
    bins = np.searchsorted(edges, np.clip(values, -reach, reach))
    observed = np.bincount(bins, minlength=len(edges))
    want = np.array(
        [e.sum() for e in np.split(expected, np.searchsorted(support, edges[:-1], side="right"))]
    )
    want *= n / want.sum()
    return float(stats.chisquare(observed, want).pvalue)


@pytest.mark.parametrize(("num", "den"), [(0, 1), (1, 3), (1, 1), (5, 2), (7, 3)])
def test_bernoulli_exp_is_exact(num, den):
    n = 20_000
    hits = sum(bernoulli_exp(b, num, den) for b in _streams(num * 10 + den, n))
    p = math.exp(-num / den)
    if num == 0:
        assert hits == n
    else:
        assert stats.binomtest(hits, n, p).pvalue > 1e-3


@pytest.mark.parametrize(("s", "t"), [(1, 1), (1, 3), (3, 10), (10, 1584), (1, 3168)])
def test_discrete_laplace_passes_a_chi_square_test(s, t):
    draws = np.array([discrete_laplace(b, s, t) for b in _streams(s + t, 20_000)])
    assert _chi_square(draws, s, t) > 1e-3
    # Symmetric, with the stated variance 2 q / (1 - q)**2.
    q = math.exp(-s / t)
    assert abs(draws.mean()) < 4 * math.sqrt(2 * q) / (1 - q) / math.sqrt(len(draws))
    assert abs(draws.var() / (2 * q / (1 - q) ** 2) - 1) < 0.06


def test_a_wrong_scale_fails_the_same_test():
    # The test has power: draws of scale 10/3 are refused as draws of scale 3.
    draws = np.array([discrete_laplace(b, 3, 10) for b in _streams(1, 20_000)])
    assert _chi_square(draws, 1, 3) < 1e-6


def test_the_stream_is_a_function_of_its_seed():
    a, b, c = KeyedBits(b"seed-1"), KeyedBits(b"seed-1"), KeyedBits(b"seed-2")
    first = [a.bits(k) for k in (1, 7, 64, 600, 3)]
    assert first == [b.bits(k) for k in (1, 7, 64, 600, 3)]
    assert first != [c.bits(k) for k in (1, 7, 64, 600, 3)]
    # Bits taken in any grouping are the same bits.
    d, e = KeyedBits(b"seed-1"), KeyedBits(b"seed-1")
    assert d.bits(675) == sum(e.bits(1) << (674 - i) for i in range(675))
    assert all(0 <= KeyedBits(bytes([i])).uniform(7) < 7 for i in range(200))


def test_the_scale_in_integers():
    # epsilon as written (0.1 is 1/10), the sensitivity in grid steps: ceil(bound * 16).
    assert rational(0.1) == rational(1) / 10 and rational(2.5).denominator == 2
    assert dp_grid_scale(99, 10.0) == (10, 99 * MAGNITUDE_SCALE)
    assert dp_grid_scale(99.01, 0.1) == (1, math.ceil(99.01 * MAGNITUDE_SCALE) * 10)
    s, t = dp_grid_scale(99, 10.0)
    q = math.exp(-s / t)
    assert dp_noise_variance(99, 10.0) == pytest.approx(2 * q / (1 - q) ** 2 / 256)
    assert dp_noise_variance(99, 10.0) == pytest.approx(2 * 9.9**2, rel=1e-3)


@pytest.fixture(scope="module")
def demo(demo_dir: Path) -> Dataset:
    return Dataset.open(demo_dir)


def _table(demo: Dataset, secret: bytes, epsilon: float = 10.0):
    # Sums published on the grid itself (a rounding of 1/16), so the mechanism's values show.
    mags = MagnitudeProtection(method="dp", epsilon=epsilon, rounding="0.0625")
    prot = Protection(protection_from_options("ckm").mechanism, seeds="keyed", secret=secret)
    request = TableRequest(
        ("REGION", "AGE", "SEX"), statistic="count", margins="none", magnitudes=("sum:HOURS",)
    )
    return TableBuilder(demo, prot, magnitudes=mags).build(request), request


def test_published_sums_lie_on_the_grid_with_the_stated_noise(demo):
    table, request = _table(demo, SECRET)
    truth = TableBuilder(demo, Protection(None)).tabulate(request).aggregates
    true = truth.magnitudes["HOURS"].total
    got = table.statistics()["sum_HOURS"]
    cells = table.computed & (table.counts > 0)
    steps = got[cells] * MAGNITUDE_SCALE
    # No floating-point artifact: every value is a whole number of grid steps, exactly.
    assert np.array_equal(steps, np.rint(steps))
    # The noise, in steps, where no sum is cut at 0: the discrete Laplace of the metadata.
    s, t = dp_grid_scale(99, 10.0)
    live = cells & (truth.n > 0) & (true > 40 * t / s / MAGNITUDE_SCALE)
    assert live.sum() > 300
    noise = np.rint((got - true)[live] * MAGNITUDE_SCALE).astype(np.int64)
    assert _chi_square(noise, s, t) > 1e-3
    meta = table.public_metadata()["magnitudes"]
    assert meta["noise"] == DP_NOISE and meta["clamping"] == DP_CLAMPING
    assert meta["grid"] == 1 / MAGNITUDE_SCALE and meta["laplace_scale"] == {"HOURS": 9.9}


def test_the_same_request_gives_the_same_bytes_and_the_secret_matters(demo):
    first, _ = _table(demo, SECRET)
    again, _ = _table(demo, SECRET)
    other, _ = _table(demo, SECRET + b"-other")
    assert first.to_csv() == again.to_csv()
    a, b = first.statistics()["sum_HOURS"], other.statistics()["sum_HOURS"]
    cells = first.computed & (first.counts > 0) & (other.counts > 0)
    assert np.mean(a[cells] != b[cells]) > 0.9


def test_the_docs_state_the_sampler_and_clamping():
    text = (Path(__file__).resolve().parent.parent / "docs" / "magnitudes.md").read_text()
    assert "Canonne, Kamath & Steinke" in text and "clipped" in text
    assert "Mironov" in text and "1/16" in text
