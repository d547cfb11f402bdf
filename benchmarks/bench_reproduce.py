"""Benchmark: the full simulation study of seed 000 (500 replications; target under 60 s).

Baseline in the same process: generating the 1,000 tables alone (population,
weights, sample counts), without protection or measures.
"""

from __future__ import annotations

import time

import numpy as np

from tablesafe.experiments import run_shlomo2019
from tablesafe.experiments._shlomo2019 import _population


def main() -> None:
    rng = np.random.default_rng(1)
    t0 = time.perf_counter()
    for const in (0.02, 0.2):
        for _ in range(500):
            pop = _population(rng, const)
            np.round(pop / rng.uniform(20, 40, pop.shape))
    base = time.perf_counter() - t0
    t0 = time.perf_counter()
    run_shlomo2019(500, rng=2019)
    full = time.perf_counter() - t0
    print(
        f"tables alone: {base:.2f} s; full study (500 replications x 2): {full:.2f} s; "
        f"ratio {full / base:.0f}"
    )


if __name__ == "__main__":
    main()
