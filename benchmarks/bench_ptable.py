"""Benchmark: applying ptables to 10**7 cells (target: under 1 s).

Baselines in the same process, as ratios:

* ``searchsorted``: one ``numpy.searchsorted`` of the uniforms in a single
  row's cumulative probabilities (what any inverse-CDF lookup must at least
  do, ignoring that cells need different rows);
* ``add``: one vectorised ``counts + v`` over the same arrays (the cost of
  touching 10**7 cells at all).

Run: ``.venv/bin/python benchmarks/bench_ptable.py [cells]``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np

from tablesafe.mechanisms import destatis, dp_geometric, drop_add_q, pram_shlomo_young


def best(fn: Callable[[], object], repeat: int = 3) -> float:
    out = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    u = (keys.astype(np.float64) + 0.5) / 2**32  # cell-key uniforms, DESIGN decision 2
    counts = rng.poisson(30, n)
    cum = np.cumsum(dp_geometric(2).rows[-1][1])
    base = best(lambda: np.searchsorted(cum, u))
    add = best(lambda: counts + counts)
    print(f"{n:,} cells, counts Poisson(30), best of 3")
    print(f"baseline searchsorted in one row: {base:.3f} s;  plain counts + v: {add:.3f} s")
    print(f"{'ptable':<22}{'time':>8}{'vs search':>11}{'vs add':>8}")
    sampled = destatis(3, 1.0).to_sampled(256)
    tables = [
        ("dp(2, cap 7)", dp_geometric(2), None),
        ("pram", pram_shlomo_young(), None),
        ("q(1%, cap 7)", drop_add_q(), None),
        ("ckm(D 3, V 1)", destatis(3, 1.0), None),
        ("ckm sampled, ckey", sampled, keys),
    ]
    for name, table, ck in tables:
        table.perturbation(counts[:10], u[:10])  # build the lazy lookup tables first
        t = best(lambda table=table, ck=ck: table.perturbation(counts, u, ck))
        print(f"{name:<22}{t:>7.3f}s{t / base:>10.1f}x{t / add:>7.1f}x")


if __name__ == "__main__":
    main()
