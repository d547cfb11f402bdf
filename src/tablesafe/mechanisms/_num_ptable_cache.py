"""The numeric ptables of magnitudes, cached on disk like the count ptables.

:func:`tablesafe.mechanisms._num_ptable.num_ptable` solves one maximum-entropy problem
per row value on a grid of ``2 D step + 1`` deviations (R's
``create_num_ptable`` example, ``D = 5, V = 2, step = 4, icat = (1, 3, 5)``,
takes seconds), and every process that protects magnitudes needs it. Its
arrays are a pure function of ``(D, V, step, icat)`` and of the code that
computes them, so they are kept as a NumPy ``.npz`` (no pickle) in the
directory of :func:`tablesafe.mechanisms._ptable_cache.cache_dir` (``TABLESAFE_CACHE_DIR``
overrides it), named by the parameters and a SHA-256 of the modules that
compute them (the construction and its solver): a change of the code is a
new entry. An unreadable entry is rebuilt and replaced; an unwritable cache
is skipped. The arrays read back are bit for bit those the construction
returned.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np

from tablesafe.mechanisms import _cellwise
from tablesafe.mechanisms import _num_ptable as _num_ptable
from tablesafe.mechanisms._num_ptable import NumPTable, num_ptable
from tablesafe.mechanisms._ptable_cache import cache_dir, write_npz

__all__ = ["cached_num_ptable"]


@functools.cache
def _code_hash() -> str:
    digest = hashlib.sha256()
    for module in (_num_ptable, _cellwise):
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()[:16]


def _path(D: int, V: float, step: int, icat: tuple[int, ...]) -> Path:
    cats = "-".join(str(i) for i in icat)
    return cache_dir() / f"num-D{D}-V{float(V)!r}-step{step}-icat{cats}-{_code_hash()}.npz"


def cached_num_ptable(D: int, V: float, step: int, icat: tuple[int, ...] | None) -> NumPTable:
    """``num_ptable(D, V, step=step, icat=icat)``, from the disk cache when it holds it.

    Raises:
        ParameterError: for parameters the construction refuses (never cached).
    """
    try:
        cats = tuple(sorted({int(c) for c in (icat if icat is not None else (1, D))}))
        path = _path(D, V, step, cats)
    except (TypeError, ValueError):
        return num_ptable(D, V, step=step, icat=icat)  # raises the typed error
    if path.exists():
        try:
            loaded = _load(path)
        except (OSError, ValueError, KeyError):
            loaded = None  # an unreadable entry is replaced
        if loaded is not None and (loaded.D, loaded.V, loaded.step, loaded.icat) == (
            int(D),
            float(V),
            int(step),
            cats,
        ):
            return loaded
    table = num_ptable(D, V, step=step, icat=icat)
    _store(path, table)
    return table


def _load(path: Path) -> NumPTable:
    with np.load(path, allow_pickle=False) as npz:
        rows = int(npz["rows"])
        return NumPTable(
            D=int(npz["D"]),
            V=float(npz["V"]),
            step=int(npz["step"]),
            icat=tuple(int(i) for i in npz["icat"]),
            v=tuple(np.array(npz[f"v{r}"]) for r in range(rows)),
            p=tuple(np.array(npz[f"p{r}"]) for r in range(rows)),
            ub=tuple(np.array(npz[f"ub{r}"]) for r in range(rows)),
        )


def _store(path: Path, table: NumPTable) -> None:
    arrays: dict[str, np.ndarray] = {
        "rows": np.array(len(table.v)),
        "D": np.array(table.D),
        "V": np.array(table.V),
        "step": np.array(table.step),
        "icat": np.array(table.icat, dtype=np.int64),
    }
    for r, (v, p, ub) in enumerate(zip(table.v, table.p, table.ub, strict=True)):
        arrays[f"v{r}"], arrays[f"p{r}"], arrays[f"ub{r}"] = v, p, ub
    write_npz(path, arrays)
