"""Sources of randomness.

Published tables draw their randomness from record keys (see ``_keys``);
simulations take an explicit :class:`numpy.random.Generator`. Where neither
applies, :func:`secure_generator` gives a Generator seeded from the operating
system's secure random source, so that no draw is predictable.
"""

from __future__ import annotations

import secrets

import numpy as np

from tablesafe._errors import ParameterError

__all__ = ["resolve_generator", "secure_generator"]


def secure_generator() -> np.random.Generator:
    """Return a PCG64 Generator seeded with 128 bits from :mod:`secrets`."""
    return np.random.Generator(np.random.PCG64(secrets.randbits(128)))


def resolve_generator(rng: np.random.Generator | int | None) -> np.random.Generator:
    """Return ``rng`` itself, a Generator seeded with an int, or a secure one for ``None``.

    Args:
        rng: A Generator (used as is), an integer seed (for reproducible
            simulations), or ``None`` (a secure, unpredictable Generator).
    """
    if rng is None:
        return secure_generator()
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, int | np.integer) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))

    raise ParameterError(
        f"rng must be a numpy.random.Generator, an integer seed or None, not {type(rng).__name__}"
    )
