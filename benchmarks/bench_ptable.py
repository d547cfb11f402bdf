"""Benchmark: applying ptables to 10**7 cells (target: under 1 s).

Baseline in the same process: one ``numpy.searchsorted`` of the uniforms in
a single row's cumulative probabilities (what any lookup must at least do).
"""

from __future__ import annotations

import time

import numpy as np

from tablesafe.mechanisms import destatis, dp_geometric, drop_add_q, pram_shlomo_young


def best(fn, repeat: int = 3) -> float:
    out = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def main() -> None:
    rng = np.random.default_rng(1)
    n = 10_000_000
    u = rng.random(n)
    counts = rng.poisson(30, n)
    cum = np.cumsum(dp_geometric(2).rows[-1][1])
    base = best(lambda: np.searchsorted(cum, u))
    print(f"baseline: searchsorted in one row, {n:,} cells: {base:.3f} s")
    for name, table in [
        ("dp(2, cap 7)", dp_geometric(2)),
        ("pram", pram_shlomo_young()),
        ("q(1%, cap 7)", drop_add_q()),
        ("ckm(D 3, V 1)", destatis(3, 1.0)),
    ]:
        t = best(lambda table=table: table.perturbation(counts, u))
        print(f"{name:<14} {t:.3f} s   ratio {t / base:.1f}")


if __name__ == "__main__":
    main()
