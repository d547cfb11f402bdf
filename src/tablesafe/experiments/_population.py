"""The simulated populations of Shlomo, Krenzke & Li (2019), seed 000 Section 4.

Each replication draws a 7 x 7 table of Poisson counts with log-linear means
``exp(6.5 + a_i + b_j + const * g_ij)``, the main effects and interactions
Uniform(-1, 1) and redrawn per replication (docs/reproduction.md says why
this reading). The study (:mod:`tablesafe.experiments._shlomo2019`) and the
comparison of PRAM's readings (:mod:`tablesafe.experiments._pram_readings`)
draw the same populations from it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["population"]


def population(rng: np.random.Generator, const: float) -> np.ndarray:
    """One 7 x 7 population table; ``const`` scales the interactions."""
    a = rng.uniform(-1, 1, 7)
    b = rng.uniform(-1, 1, 7)
    g = rng.uniform(-1, 1, (7, 7))
    return np.asarray(rng.poisson(np.exp(6.5 + a[:, None] + b[None, :] + const * g)))
