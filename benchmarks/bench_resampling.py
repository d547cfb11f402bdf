"""Benchmark: cost and exact-disclosure risk of the resampling methods (seed 001).

1. Regenerations (Section 4): bootstrap tables drawn until the quality
   condition holds, for M = 1, 3, 5, against the cell-oriented method's
   binomial draws, for I x J growing; measured over repeated runs and
   beside the expectation of ``expected_bootstrap_tables``; then the M that
   minimises the expected number of tables drawn (the paper: M = 3 near
   IJ = 50, M = 5 near IJ = 100).
2. Exact disclosure, simulated with the whole methods (table-level
   rejection for the bootstrap, compensation for the binomial method):
   tables of 40 small cells (original counts uniform on 1..30, the prior)
   plus one cell of 1000 so that n > 1000; P(X = k | X' = k) is the share of
   released k whose original was k. Beside the per-cell model of
   ``resampling_disclosure_probability`` and Table 1 of the paper.
"""

from __future__ import annotations

import time

import numpy as np

from tablesafe.mechanisms import (
    PAPER_TABLE_1,
    binomial_resample,
    expected_binomial_draws,
    expected_bootstrap_tables,
    heer_bootstrap,
    optimal_m,
    resampling_disclosure_probability,
)


def regenerations(reps: int = 40) -> None:
    print("1. cost: bootstrap tables drawn (mean of runs | expected) vs binomial draws per cell")
    rng = np.random.default_rng(0)
    for s in (1.5, 2.0):
        print(f"  S = {s}")
        for ij in (10, 25, 50, 100, 200, 400, 1000):
            table = rng.integers(20, 200, ij)
            cols = []
            for m in (1, 3, 5):
                expected = expected_bootstrap_tables(table, s, m)
                if expected < 2000:
                    drawn = [heer_bootstrap(table, s, m, rng=rng).tables_drawn for _ in range(reps)]
                    cols.append(f"M={m}: {np.mean(drawn):8.1f} | {expected:8.1f}")
                else:
                    cols.append(f"M={m}:          | {expected:8.2g}")
            draws = [binomial_resample(table, s, rng=rng).cell_draws / ij for _ in range(reps)]
            exp_draws = expected_binomial_draws(table, s) / ij
            print(
                f"    IJ={ij:<5} " + "  ".join(cols) + f"  binomial: {np.mean(draws):.3f} | "
                f"{exp_draws:.3f}  optimal M: {optimal_m(table, s)}"
            )


def disclosure(trials: int = 2000) -> None:
    print("2. exact disclosure P(X = k | X' = k), k = 1, 2, 3: simulated | per-cell model | paper")
    rng = np.random.default_rng(1)
    for (m, s), paper in PAPER_TABLE_1.items():
        t0 = time.perf_counter()
        hits = np.zeros(3)
        seen = np.zeros(3)
        bhits = np.zeros(3)
        bseen = np.zeros(3)
        for _ in range(trials):
            x = np.append(rng.integers(1, 31, 40), 1000)
            released = heer_bootstrap(x, s, m, rng=rng).table
            for k in (1, 2, 3):
                sel = released[:-1] == k
                seen[k - 1] += sel.sum()
                hits[k - 1] += (x[:-1][sel] == k).sum()
            if m == 1:
                rel = binomial_resample(x, s, rng=rng).table
                for k in (1, 2, 3):
                    sel = rel[:-1] == k
                    bseen[k - 1] += sel.sum()
                    bhits[k - 1] += (x[:-1][sel] == k).sum()
        model = [resampling_disclosure_probability(k, s, m) for k in (1, 2, 3)]
        sim = hits / np.maximum(seen, 1)
        line = "  ".join(f"{sim[i]:.2f} | {model[i]:.3f} | {paper[i]:.2f}" for i in range(3))
        print(f"  bootstrap M={m} S={s}: {line}   ({time.perf_counter() - t0:.1f} s)")
        if m == 1:
            bsim = bhits / np.maximum(bseen, 1)
            print(f"  binomial      S={s}: " + "  ".join(f"{v:.2f}" for v in bsim))


def main() -> None:
    regenerations()
    disclosure()


if __name__ == "__main__":
    main()
