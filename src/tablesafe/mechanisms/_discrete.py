"""Exact discrete samplers driven by keyed bits (Canonne, Kamath & Steinke 2020).

Differentially private sums add discrete Laplace noise on a fixed-point grid,
sampled with integer arithmetic only, so that no floating-point rounding of a
continuous draw can give the true value away (Mironov 2012: the inverse-CDF
Laplace of doubles leaves gaps and a pattern that depend on the value it was
added to). Every random bit comes from :class:`KeyedBits`, an unbounded stream
that is a deterministic function of a per-figure seed (BLAKE2b keyed by the
seed, in counter mode), so the same figure gets the same noise, bit for bit,
in every run, thread and engine.

The algorithms are Canonne, Kamath & Steinke, "The Discrete Gaussian for
Differential Privacy" (NeurIPS 2020), Section 5:

* :meth:`KeyedBits.uniform` draws a uniform integer in ``0 .. n - 1`` by
  rejection from ``bit_length(n - 1)`` bits;
* :func:`bernoulli_exp` draws ``Bernoulli(exp(-num/den))`` for a rational
  ``num/den >= 0`` (their Algorithm 1);
* :func:`discrete_laplace` draws ``Y`` with ``P(Y = y) ∝ exp(-|y| s / t)``
  for integers ``s, t >= 1`` (their Algorithm 2);
* :func:`discrete_gaussian` draws ``Y`` with ``P(Y = y) ∝ exp(-y² / (2σ²))``
  for a rational ``σ² > 0`` (their Algorithm 3): the DP marginals of
  :mod:`tablesafe.mechanisms._marginals` are measured with it.

OpenDP implements the same algorithms but draws its bits from OpenSSL and
cannot be given ours (docs/decisions.md).
"""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction

__all__ = [
    "KeyedBits",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_laplace",
    "gaussian_pmf",
    "laplace_pmf",
    "rational",
]

#: Personalisation of the stream's hash: no other use of BLAKE2b in tablesafe shares it.
_PERSON = b"ts-exact-bits"


class KeyedBits:
    """An unbounded stream of random bits, a deterministic function of ``seed``.

    Block ``i`` is ``BLAKE2b(i as 8 bytes, key=seed, person="ts-exact-bits")``
    (64 bytes); bits are taken from the blocks in order, most significant
    first. A keyed BLAKE2b is a pseudorandom function of the counter under the
    seed, so the bits are as unpredictable as the seed.

    Args:
        seed: 1 to 64 bytes (the figure's keyed draws).
    """

    def __init__(self, seed: bytes) -> None:
        if not 1 <= len(seed) <= 64:
            raise ValueError("a bit stream's seed has 1 to 64 bytes")
        self._seed = seed
        self._block = 0
        self._bits = 0  # unused bits, as an integer
        self._count = 0  # how many

    def bits(self, k: int) -> int:
        """The next ``k`` bits as an integer in ``0 .. 2**k - 1``."""
        while self._count < k:
            block = hashlib.blake2b(
                self._block.to_bytes(8, "big"), key=self._seed, person=_PERSON
            ).digest()
            self._block += 1
            self._bits = (self._bits << 512) | int.from_bytes(block, "big")
            self._count += 512
        self._count -= k
        out = self._bits >> self._count
        self._bits &= (1 << self._count) - 1
        return out

    def uniform(self, n: int) -> int:
        """A uniform integer in ``0 .. n - 1`` (rejection: at most 2 tries expected)."""
        if n == 1:
            return 0
        k = (n - 1).bit_length()
        while True:
            x = self.bits(k)
            if x < n:
                return x

    def bernoulli(self, num: int, den: int) -> bool:
        """``Bernoulli(num / den)`` for integers ``0 <= num <= den``, ``den >= 1``."""
        return self.uniform(den) < num


def bernoulli_exp(bits: KeyedBits, num: int, den: int) -> bool:
    """``Bernoulli(exp(-num / den))`` exactly, for integers ``num >= 0``, ``den >= 1``.

    CKS 2020, Algorithm 1: for ``γ = num/den <= 1`` count ``K`` up while
    ``Bernoulli(γ / K)`` succeeds and return whether ``K`` is odd (the series
    of ``exp(-γ)``); above 1, ``floor(γ)`` draws of ``exp(-1)`` and one of the rest.
    """
    if num <= den:
        k = 1
        while bits.bernoulli(num, den * k):
            k += 1
        return k % 2 == 1
    for _ in range(num // den):
        if not bernoulli_exp(bits, 1, 1):
            return False
    return bernoulli_exp(bits, num % den, den)


def discrete_laplace(bits: KeyedBits, s: int, t: int) -> int:
    """``Y`` with ``P(Y = y) ∝ exp(-|y| · s / t)`` (scale ``t / s``), for integers ``s, t >= 1``.

    CKS 2020, Algorithm 2: ``X = U + t V`` with ``U`` uniform on ``0 .. t - 1``
    kept with probability ``exp(-U/t)`` and ``V`` geometric (``exp(-1)``), so
    ``X`` is geometric with parameter ``exp(-1/t)``; ``Y = floor(X / s)`` with
    a random sign, ``-0`` rejected.
    """
    while True:
        u = bits.uniform(t)
        if not bernoulli_exp(bits, u, t):
            continue
        v = 0
        while bernoulli_exp(bits, 1, 1):
            v += 1
        y = (u + t * v) // s
        negative = bits.bits(1) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_gaussian(bits: KeyedBits, sigma2: Fraction) -> int:
    """``Y`` with ``P(Y = y) ∝ exp(-y² / (2 σ²))`` for a rational ``σ² = sigma2 > 0``.

    CKS 2020, Algorithm 3: ``Y`` from the discrete Laplace of scale
    ``t = floor(σ) + 1``, kept with probability ``exp(-(|Y| - σ²/t)² / (2σ²))``
    (a rational exponent: :func:`bernoulli_exp` is exact); at most about
    ``1 + 2/√(2π)`` tries on average (their Proposition 5).
    """
    if sigma2 <= 0:
        raise ValueError("the discrete Gaussian's sigma**2 is positive")
    # floor(sigma) + 1 in integers: floor(sqrt(floor(x))) is floor(sqrt(x)).
    t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1
    while True:
        y = discrete_laplace(bits, 1, t)
        gamma = (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)
        if bernoulli_exp(bits, gamma.numerator, gamma.denominator):
            return y


def gaussian_pmf(y: int, sigma2: float, reach: int | None = None) -> float:
    """``P(Y = y)`` of :func:`discrete_gaussian` (normalised over ``|y| <= reach``).

    ``reach`` defaults to 40 standard deviations, past which the mass is below 1e-300.
    """
    reach = reach if reach is not None else int(40 * math.sqrt(sigma2)) + 50
    support = range(-reach, reach + 1)
    norm = math.fsum(math.exp(-(v * v) / (2 * sigma2)) for v in support)
    return math.exp(-(y * y) / (2 * sigma2)) / norm


def rational(x: float) -> Fraction:
    """``x`` as the decimal it is written as: ``0.1`` is 1/10, not 3602879701896397/2**55."""
    return Fraction(repr(float(x)))


def laplace_pmf(y: int, s: int, t: int) -> float:
    """``P(Y = y)`` of :func:`discrete_laplace`: ``(1 - q) / (1 + q) q**|y|``, ``q = exp(-s/t)``."""
    q = math.exp(-s / t)
    return (1.0 - q) / (1.0 + q) * q ** abs(y)
