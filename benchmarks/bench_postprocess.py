"""Benchmark: post-processing a large 5-way table (Langsrud 2019, Section 4 in spirit).

A 5-way table (12 x 10 x 8 x 6 x 5 = 28,800 inner cells, Poisson counts with
many zeros), all ten 3-way margins perturbed with Laplace noise (epsilon 1,
k = 10): time Method A (LSQR), Method B with the scalable solver
(lsq_linear) and the log-linear refit (IPF) of the result, against the
baseline of computing z = X^T y once (same process).
"""

from __future__ import annotations

import time

import numpy as np

from tablesafe.postprocess import (
    all_margins,
    design_matrix,
    laplace_margins,
    loglinear_refit,
    method_a,
    method_b,
)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    rng = np.random.default_rng(1)
    shape = (12, 10, 8, 6, 5)
    y = rng.poisson(rng.gamma(0.5, 4, size=shape))
    margins = all_margins(5, order=3, total=False)
    design, t_design = timed(lambda: design_matrix(shape, margins))
    z, t_z = timed(lambda: design.margins(y))
    noisy = laplace_margins(z, k=len(margins), epsilon=1.0, rng=rng)
    print(
        f"{y.size:,} inner cells ({(y == 0).mean():.0%} zeros), {design.x.shape[1]:,} margin "
        f"cells; design matrix {t_design:.2f} s; baseline z = X^T y {t_z * 1000:.1f} ms"
    )
    a, t_a = timed(lambda: method_a(design, noisy))
    print(f"Method A (LSQR):            {t_a:6.2f} s   ratio {t_a / t_z:8.0f}")
    b, t_b = timed(lambda: method_b(design, noisy, exact=False, tol=1e-8))
    print(f"Method B (lsq_linear, 1e-8): {t_b:6.2f} s   ratio {t_b / t_z:8.0f}")
    f, t_f = timed(lambda: loglinear_refit(b, margins))
    print(f"log-linear refit (IPF):      {t_f:6.2f} s   ratio {t_f / t_z:8.0f}")
    for name, est in (("A", a), ("B", b), ("B + refit", f)):
        mad = np.abs(design.margins(est) - z).mean()
        print(f"  {name:<10} mean |margin error| {mad:.3f}; negative cells {(est < -1e-9).sum()}")


if __name__ == "__main__":
    main()
