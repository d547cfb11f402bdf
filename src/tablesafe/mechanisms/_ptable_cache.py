"""A cache of maximum-entropy ptables, in memory and on disk.

Building the Destatis ptable of the cell-key method solves one
maximum-entropy problem per row with scipy (about a second with scipy's
import), and every ``tablesafe table --method ckm`` needed it. The rows are
a pure function of ``(D, V, js)`` and of the code that computes them, so
they are kept:

* in memory, for the life of the process (the server builds each once);
* on disk, as a NumPy ``.npz`` of the rows (no pickle), under
  ``$XDG_CACHE_HOME/tablesafe/ptables`` (``~/.cache`` by default; the
  setting ``TABLESAFE_CACHE_DIR`` overrides it), named by the parameters
  and a SHA-256 of the module that computes them, so a change of the code
  is a new entry. An unreadable or unwritable cache is skipped: the table
  is computed as without it.

The values are bit-for-bit those of :func:`tablesafe.mechanisms.destatis`:
the cached arrays are the rows it returned.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from tablesafe.mechanisms import _cellwise, destatis
from tablesafe.ptable._ptable import PTable, Selector

__all__ = ["cache_dir", "cached_destatis", "write_npz"]


def cache_dir() -> Path:
    """Where ptables are cached on disk."""
    override = os.environ.get("TABLESAFE_CACHE_DIR")
    if override:
        return Path(override) / "ptables"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tablesafe" / "ptables"


@functools.cache
def _code_hash() -> str:
    source = Path(_cellwise.__file__).read_bytes()
    return hashlib.sha256(source).hexdigest()[:16]


@functools.lru_cache(maxsize=32)
def cached_destatis(D: int, V: float, js: int = 0) -> PTable:
    """``destatis(D, V, js)``, from the cache when it holds it.

    Raises:
        ParameterError: for impossible parameters (never cached).
    """
    path = cache_dir() / f"destatis-D{D}-V{float(V)!r}-js{js}-{_code_hash()}.npz"
    if path.exists():
        try:
            return _load(path)
        except (OSError, ValueError, KeyError):
            pass  # an unreadable entry is replaced
    table = destatis(D, V, js=js)
    _store(path, table)
    return table


def _load(path: Path) -> PTable:
    with np.load(path, allow_pickle=False) as npz:
        count = int(npz["rows"])
        rows = [(npz[f"v{i}"], npz[f"p{i}"]) for i in range(count)]
        return PTable.from_rows(
            str(npz["name"]),
            rows,
            parameters=json.loads(str(npz["parameters"])),
            paper=str(npz["paper"]),
        )


def _store(path: Path, table: PTable) -> None:
    if table.selector != Selector.VALUE or table.sampled is not None:
        return  # only plain row tables (as destatis builds) are cached
    arrays: dict[str, np.ndarray] = {
        "rows": np.array(len(table.rows)),
        "name": np.array(table.name),
        "parameters": np.array(json.dumps(dict(table.parameters))),
        "paper": np.array(table.paper),
    }
    for i, (v, p) in enumerate(table.rows):
        arrays[f"v{i}"] = np.asarray(v)
        arrays[f"p{i}"] = np.asarray(p)
    write_npz(path, arrays)


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write a cache entry atomically (temporary file, then rename); skip an unwritable cache."""
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(tmp, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
