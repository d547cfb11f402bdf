"""Benchmark: the exact discrete Laplace of DP sums against the floating-point draw it replaced.

Issue 38 (item 7): DP sums draw discrete Laplace noise with integers only
(Canonne, Kamath & Steinke 2020) from a keyed bit stream per cell
(``tablesafe.mechanisms._magnitudes.dp_noise``). Timed in the same process,
best of ``--repeat`` rounds, on ``--cells`` cells:

* ``float``: the inverse-CDF Laplace of doubles from one uniform per cell
  (numpy, vectorised: what tablesafe did before; the baseline);
* ``exact``: :func:`dp_noise` on the same cells (the seeds from the cells'
  keyed draws, one bit stream and one sample per cell, in Python);
* ``table``: a whole DP-sum table of the demo survey (``--records`` records,
  REGION x AGE x SEX with every margin, ``count,sum:HOURS``) built with the
  exact sampler, against the same table under the cell-key method for
  magnitudes (the default protection).

Prints each time, the cost per cell of the exact sampler and the ratios.

Usage: python benchmarks/bench_dp_sums.py [--cells 20000] [--records 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tablesafe._builder import TableBuilder
from tablesafe._cli._methods import protection_from_options
from tablesafe._protection import Protection
from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.mechanisms._magnitudes import MagnitudeProtection, dp_noise
from tablesafe.prepare._demo import write_demo_data


def best(fn: Callable[[], object], repeat: int) -> float:
    """The best wall time of ``repeat`` calls, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=20_000)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    draws: dict[tuple[int, str], np.ndarray] = {}

    def uniforms(j: int, what: str) -> np.ndarray:
        """Each draw of every cell, made once (the keyed words stand-in)."""
        return draws.setdefault((j, what), rng.random(args.cells))

    base = rng.integers(0, 10**6, args.cells).astype(np.float64)
    live = np.ones(args.cells, dtype=bool)

    def float_laplace() -> np.ndarray:
        c = uniforms(0, "laplace") - 0.5
        return base - (99 / 1.0) * np.sign(c) * np.log1p(-2.0 * np.abs(c))

    t_float = best(float_laplace, args.repeat)
    t_exact = best(lambda: dp_noise(base, live, 99.0, 1.0, uniforms), args.repeat)
    print(
        f"{args.cells:,} cells: float {t_float * 1e3:.2f} ms, exact {t_exact * 1e3:.1f} ms "
        f"({t_exact / args.cells * 1e6:.1f} us a cell, {t_exact / t_float:.0f}x)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        demo = Dataset.open(write_demo_data(Path(tmp) / "demo", args.records, seed=1, replicates=0))
        request = TableRequest(
            ("REGION", "AGE", "SEX"), statistic="count", magnitudes=("sum:HOURS",)
        )
        ckm_counts = protection_from_options("ckm").mechanism
        prot = Protection(ckm_counts, seeds="keyed", secret=b"a-benchmark-secret-16")
        dp = TableBuilder(demo, prot, magnitudes=MagnitudeProtection(method="dp"))
        ckm = TableBuilder(demo, prot)
        cells = int(dp.build(request).computed.sum())
        t_dp = best(lambda: dp.build(request), args.repeat)
        t_ckm = best(lambda: ckm.build(request), args.repeat)
        print(
            f"table of {cells:,} cells, {args.records:,} records: dp {t_dp * 1e3:.0f} ms, "
            f"ckm {t_ckm * 1e3:.0f} ms ({t_dp / t_ckm:.2f}x)"
        )


if __name__ == "__main__":
    main()
