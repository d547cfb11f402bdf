"""Benchmark: the draws of one table under each seed scheme (issue 25).

A census-sized extended array of 107,000 cells (3 dimensions): the cell-key
uniforms (no hash), keyed seeds (one keyed BLAKE2b of each cell's key sum
and count), Li & Krenzke's dynamic seeds (one keyed BLAKE2b of each cell's
and its margins' key sums) and the draws of empty cells from their canonical
definitions (building the definitions, then one keyed hash each), all in
the same process. Ratios are to the dynamic seeds, the scheme keyed seeds
replace on the demo site.

Usage: python benchmarks/bench_seeds.py [--empty 0.5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tablesafe._seeds import (
    canonical_definitions,
    cell_key_uniforms,
    definition_words,
    dynamic_streams,
    keyed_words,
)

SECRET = b"bench-seeds-secret-0123456789abcdef"


def best(fn, repeat: int = 3) -> float:
    out = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--empty", type=float, default=0.5, help="Share of empty cells.")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    shape = (350, 101, 3)  # AREA x AGE x SEX with totals: 106,752 cells
    keys = rng.integers(0, 2**32, size=shape, dtype=np.uint32)
    n = rng.integers(1, 40, size=shape)
    empty = rng.random(shape) < args.empty
    n[empty] = 0
    keys[empty] = 0
    dims = [
        ("AREA", [(i,) for i in range(shape[0] - 1)]),
        ("AGE", [(i,) for i in range(shape[1] - 1)]),
        ("SEX", [(1,), (2,)]),
    ]
    all_codes = {c: [m[0] for m in members] for c, members in dims}
    universe = [("REGION", (4,))]
    all_codes["REGION"] = list(range(1, 13))
    cases = {
        "dynamic seeds (before)": lambda: dynamic_streams(keys, SECRET, (b"",)),
        "cell-key uniforms": lambda: cell_key_uniforms(keys),
        "keyed seeds": lambda: keyed_words(keys, n, SECRET, b"count"),
        f"empty cells' definitions ({empty.sum():,})": lambda: definition_words(
            canonical_definitions(dims, universe, all_codes, np.nonzero(empty)), SECRET, b"count"
        ),
    }
    times = {name: best(fn) for name, fn in cases.items()}
    base = times["dynamic seeds (before)"]
    print(f"{keys.size:,} cells")
    for name, t in times.items():
        print(f"{name:40s} {t:8.3f} s  {t / base:5.2f}x")


if __name__ == "__main__":
    main()
