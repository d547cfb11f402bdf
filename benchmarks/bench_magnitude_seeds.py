"""Benchmark: magnitude draws under dynamic seeds, one keyed hash per cell (issue 17).

The cell-key method for magnitudes draws, per variable and cell, a ``v``
and a sign coin for each of its ``top_k`` largest contributions (4 draws
with the defaults). Under dynamic seeds each draw used to be a keyed
BLAKE2b pass over every cell (``dynamic_uniforms`` with a salt per draw);
now one digest per cell is split into the seven words of every draw
(``dynamic_words``). Both are timed in the same process on the extended
cell keys of a 350 x 100 x 2 table (106,353 cells, margins included),
best of ``--repeat``, interleaved.

Usage: python benchmarks/bench_magnitude_seeds.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from tablesafe._seeds import dynamic_uniforms, dynamic_words

SECRET = b"benchmark-secret-0123456789abcdef"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    keys = np.random.default_rng(2026).integers(0, 2**32, (351, 101, 3), dtype=np.uint32)
    salts = [f"magnitude:INCOME:{w}:{j}".encode() for j in range(2) for w in ("v", "sign")]
    runs = {
        "one stream (dynamic_uniforms)": lambda: dynamic_uniforms(keys, SECRET, salt=salts[0]),
        "4 streams, one pass each (before)": lambda: [
            dynamic_uniforms(keys, SECRET, salt=s) for s in salts
        ],
        "7 words from one digest (now)": lambda: dynamic_words(
            keys, SECRET, b"magnitude:INCOME", 7
        ),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.repeat):
        for name, fn in runs.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    base = min(times["4 streams, one pass each (before)"])
    print(f"{keys.size:,} cells, best of {args.repeat}, load average {os.getloadavg()[0]:.2f}")
    for name, ts in times.items():
        print(f"  {name:36s} {min(ts):7.3f} s   {min(ts) / base:.2f}x of before")


if __name__ == "__main__":
    main()
