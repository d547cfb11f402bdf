"""Suppressed cells as decimals (Langsrud 2019, Section 3, Table 2; Langsrud 2019a).

Given a table whose inner cells are partly suppressed and whose margins are
released, the suppressed cells are estimated by Method A from every
released number (the safe inner cells and the margins). Residuals that
preserve every released number can be added, scaled to a chosen root mean
square, so that no estimate is a whole number by accident (a whole number
then means "not suppressed").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy import linalg

from tablesafe._errors import ParameterError
from tablesafe._random import resolve_generator
from tablesafe.postprocess._design import DesignMatrix, design_matrix
from tablesafe.postprocess._methods import method_a

__all__ = ["estimate_suppressed"]


def estimate_suppressed(
    table: npt.ArrayLike,
    margins: Sequence[Sequence[int]],
    *,
    rmse: float | None = None,
    rng: np.random.Generator | int | None = None,
) -> npt.NDArray[np.float64]:
    """Replace suppressed inner cells by decimals that add up to the released margins.

    Args:
        table: The table as an extended array (last slot of each axis is the
            total, as :class:`~tablesafe.ProtectedTable` holds it), with the
            suppressed inner cells set to NaN.
        margins: The released margins (kept dimensions), e.g.
            ``[(0,), (1,), ()]`` for row, column and overall totals.
        rmse: If given, add residuals that keep every released number and
            have this root mean square over the suppressed cells.
        rng: Generator for the residuals.

    Returns:
        The inner table with the suppressed cells estimated.
    """
    ext = np.asarray(table, dtype=np.float64)
    k = ext.ndim
    inner_idx = tuple(slice(0, s - 1) for s in ext.shape)
    y = ext[inner_idx]
    mask = np.isnan(y)
    inner = tuple(range(k))
    design = design_matrix(y.shape, [inner, *margins])
    n_inner = int(y.size)
    safe = np.flatnonzero(~mask.ravel())
    released_cols = np.concatenate([safe, np.arange(n_inner, design.x.shape[1])])
    values = [y.ravel()[safe]]
    for m in margins:
        kept = set(int(d) for d in m)
        sel = tuple(
            slice(0, s - 1) if i in kept else slice(s - 1, s) for i, s in enumerate(ext.shape)
        )
        values.append(ext[sel].ravel())
    z = np.concatenate(values)
    if not np.all(np.isfinite(z)):
        raise ParameterError("released margins must be numbers (only inner cells may be NaN)")
    x = design.x[:, released_cols].tocsc()
    sub = DesignMatrix(x=x, shape=y.shape, columns=(), rows=design.rows)
    est = method_a(sub, z)
    out = np.where(mask, est, y)
    if rmse is not None:
        if rmse < 0:
            raise ParameterError("rmse must be >= 0")
        # Residuals in the null space of the released equations, on suppressed cells.
        cols = np.flatnonzero(mask.ravel())
        a = x.toarray().T[:, cols]
        basis = linalg.null_space(a) if a.size else np.eye(cols.size)
        if basis.shape[1] and rmse > 0:
            r = basis @ resolve_generator(rng).standard_normal(basis.shape[1])
            r *= rmse / np.sqrt(np.mean(r * r))
            flat = out.ravel().copy()
            flat[cols] += r
            out = flat.reshape(y.shape)
    return np.asarray(out, dtype=np.float64)
