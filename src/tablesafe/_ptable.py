"""Perturbation tables: one type for every cell-wise mechanism (DESIGN decision 3).

A :class:`PTable` is a family of discrete distributions ``p(v | i)`` of the
perturbation ``v`` given a cell's original sample count ``i``. Rows are
selected by the count:

* **by value**: rows ``0 .. L``; the last row stands for every larger count
  (the convention of the Destatis R package ``ptable``);
* **by residue** (PRAM's large cells, seed 000 Table 3): counts from ``L``
  on use row ``count mod M`` of a second block of rows;
* **looped** (ABS/ONS sampled ptables): counts above ``L`` reuse the rows
  ``start .. L`` cyclically (ONS: counts above 750 loop onto rows 501-750).

Each row holds its perturbations ``v`` and probabilities ``p``; the
cumulative intervals ``[p_int_lb, p_int_ub)`` turn a uniform ``u`` into a
perturbation by inverse-CDF lookup: ``v`` is the value whose interval holds
``u``. Application to any number of cells is one vectorised ``searchsorted``
over all rows at once (each row's cumulative probabilities are offset by
its row number, so one sorted array serves every row).

Privacy figures: for neighbouring counts ``i`` and ``i + 1`` (a record added
to a cell), ``epsilon`` is the largest ``|log p(j | i) / p(j | i+1)|`` over
outputs ``j`` (perturbed counts) where both are positive, and ``delta`` the
largest hockey-stick divergence at that ``epsilon``,
``max(sum_j max(0, p(j|i) - e^eps p(j|i')), ...)`` over both orders, i.e.
the smallest ``delta`` for which the pair satisfies (epsilon, delta)
indistinguishability. For the discretised Laplace mechanism with a cap
this is the mass at the cap (seed 000 Section 3.1).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from tablesafe._errors import FormatError, ParameterError

__all__ = ["PTable", "PrivacyFigures"]

_TOL = 1e-6


def _is_number(text: str) -> bool:
    try:
        float(text.strip('"'))
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class PrivacyFigures:
    """Privacy figures of a ptable between neighbouring counts.

    Attributes:
        epsilon: Largest finite |log-ratio| of output probabilities.
        delta: Smallest delta at that epsilon (hockey-stick divergence), worst pair.
        worst_count: The count ``i`` of the worst pair ``(i, i + 1)`` for delta.
    """

    epsilon: float
    delta: float
    worst_count: int


def _row(values: npt.ArrayLike, probs: npt.ArrayLike, where: str) -> tuple[np.ndarray, np.ndarray]:
    v = np.asarray(values, dtype=np.int64)
    p = np.asarray(probs, dtype=np.float64)
    if v.shape != p.shape or v.ndim != 1 or v.size == 0:
        raise ParameterError(f"{where}: perturbations and probabilities must be equal-length lists")
    if np.any(p < 0) or not np.all(np.isfinite(p)):
        raise ParameterError(f"{where}: probabilities must be finite and non-negative")
    if abs(p.sum() - 1.0) > _TOL:
        raise ParameterError(f"{where}: probabilities sum to {p.sum():.8f}, not 1")
    if len(set(v.tolist())) != v.size:
        raise ParameterError(f"{where}: a perturbation value appears twice")
    order = np.argsort(v, kind="stable")
    keep = p[order] > 0
    return v[order][keep], p[order][keep] / p[order][keep].sum()


@dataclass(frozen=True, eq=False)
class PTable:
    """A perturbation table ``p(v | i)`` with a row selector.

    Build one with a constructor (:func:`tablesafe.mechanisms.dp_geometric`,
    ``pram_shlomo_young``, ``drop_add_q``, ``destatis``), :meth:`from_rows`
    or :meth:`read_csv`.

    Attributes:
        name: Short name of the mechanism.
        rows: Per row, the perturbations ``v`` (sorted) and their probabilities.
        selector: ``"value"``, ``"residue"`` or ``"loop"``.
        residue_rows: For ``"residue"``: the rows of the residue classes.
        modulus: For ``"residue"``: the modulus M.
        loop_start: For ``"loop"``: the first row of the loop.
        parameters: The constructor's parameters (public).
        paper: The source of the mechanism.
        sampled: For a sampled (ABS/ONS) ptable, the perturbation of each
            row and integer cell key, shape ``(rows, 256 or 4096)``; cells
            are then looked up by ``cell_key mod K`` exactly as those tools do.
    """

    name: str
    rows: tuple[tuple[np.ndarray, np.ndarray], ...]
    selector: Literal["value", "residue", "loop"] = "value"
    residue_rows: tuple[tuple[np.ndarray, np.ndarray], ...] = ()
    modulus: int = 0
    loop_start: int = 0
    parameters: Mapping[str, Any] = field(default_factory=dict)
    paper: str = ""
    sampled: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not self.rows:
            raise ParameterError("a ptable needs at least one row")
        if self.selector == "residue" and (
            self.modulus < 1 or len(self.residue_rows) != self.modulus
        ):
            raise ParameterError("a residue selector needs one row per residue class")
        if self.selector == "loop" and not 0 <= self.loop_start < len(self.rows):
            raise ParameterError("the loop must start at one of the ptable's rows")
        all_rows = list(self.rows) + list(self.residue_rows)
        width = max(len(v) for v, _ in all_rows)
        n = len(all_rows)
        values = np.zeros((n, width), dtype=np.int64)
        cum = np.ones((n, width), dtype=np.float64)
        for r, (v, p) in enumerate(all_rows):
            values[r, : len(v)] = v
            values[r, len(v) :] = v[-1]
            c = np.cumsum(p)
            c[-1] = 1.0
            cum[r, : len(c)] = c
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_cum", cum)
        # One sorted array for every row: row r's cumulative bounds shifted by r.
        object.__setattr__(self, "_flat", (cum + np.arange(n)[:, None]).ravel())

    # -- construction ------------------------------------------------------------

    @classmethod
    def from_rows(
        cls,
        name: str,
        rows: Sequence[tuple[Sequence[int], Sequence[float]]],
        *,
        residue_rows: Sequence[tuple[Sequence[int], Sequence[float]]] = (),
        modulus: int = 0,
        selector: Literal["value", "residue", "loop"] | None = None,
        loop_start: int = 0,
        parameters: Mapping[str, Any] | None = None,
        paper: str = "",
    ) -> PTable:
        """Build a ptable from rows of (perturbations, probabilities).

        Raises:
            ParameterError: if a row's probabilities do not sum to 1, are
                negative, or a row would make a count negative.
        """
        checked = tuple(_row(v, p, f"row {i}") for i, (v, p) in enumerate(rows))
        for i, (v, _) in enumerate(checked):
            if i < len(checked) - 1 and v.min() < -i:
                raise ParameterError(
                    f"row {i}: perturbation {v.min()} would make the count negative"
                )
        residues = tuple(_row(v, p, f"residue row {m}") for m, (v, p) in enumerate(residue_rows))
        sel = selector or ("residue" if residues else "value")
        return cls(
            name=name,
            rows=checked,
            selector=sel,
            residue_rows=residues,
            modulus=modulus,
            loop_start=loop_start,
            parameters=dict(parameters or {}),
            paper=paper,
        )

    # -- selection and application -------------------------------------------------

    def row_index(self, counts: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The row used for each count."""
        c = np.asarray(counts, dtype=np.int64)
        if c.size and c.min() < 0:
            raise ParameterError("counts must be non-negative")
        last = len(self.rows) - 1
        if self.selector == "residue":
            return np.where(c < len(self.rows), c, len(self.rows) + c % self.modulus)
        if self.selector == "loop":
            span = last - self.loop_start + 1
            return np.where(c <= last, c, self.loop_start + (c - self.loop_start) % span)
        return np.minimum(c, last)

    def perturbation(
        self,
        counts: npt.NDArray[np.int64],
        u: npt.NDArray[np.float64],
        cell_key: npt.NDArray[np.uint32] | None = None,
    ) -> npt.NDArray[np.int64]:
        """The perturbation of each cell by inverse-CDF lookup of its uniform ``u``.

        Args:
            counts: Original sample counts.
            u: Uniforms in [0, 1), one per cell.
            cell_key: The cells' keys. A sampled ptable looks cells up by
                ``cell_key mod K`` (exact, since K divides 2**32), as the ABS
                method and the ONS package do; without keys (dynamic seeds)
                it uses ``floor(u * K)``.
        """
        rows = self.row_index(counts)
        if self.sampled is not None:
            k = self.sampled.shape[1]
            if cell_key is not None:
                ckey = np.asarray(cell_key, dtype=np.uint64) % np.uint64(k)
            else:
                ckey = np.minimum(np.floor(np.asarray(u) * k), k - 1)
            return np.asarray(self.sampled[rows, ckey.astype(np.int64)], dtype=np.int64)
        uu = np.asarray(u, dtype=np.float64)
        if uu.shape != rows.shape:
            raise ParameterError("counts and uniforms must have the same shape")
        if uu.size and (uu.min() < 0 or uu.max() >= 1):
            raise ParameterError("uniforms must lie in [0, 1)")
        flat = self._flat  # type: ignore[attr-defined]
        width = self._values.shape[1]  # type: ignore[attr-defined]
        pos = np.searchsorted(flat, rows + uu, side="right")
        col = np.minimum(pos - rows * width, width - 1)
        return np.asarray(self._values[rows, col], dtype=np.int64)  # type: ignore[attr-defined]

    def apply(self, counts: npt.NDArray[np.int64], u: npt.NDArray[np.float64]) -> np.ndarray:
        """Perturbed counts ``max(count + v, 0)``."""
        c = np.asarray(counts, dtype=np.int64)
        return np.asarray(np.maximum(c + self.perturbation(c, u), 0))

    # -- figures ------------------------------------------------------------------------

    def distribution(self, count: int) -> dict[int, float]:
        """``{perturbed count j: probability}`` for an original count (negatives set to 0)."""
        r = int(self.row_index(np.array([count]))[0])
        v, p = (list(self.rows) + list(self.residue_rows))[r]
        out: dict[int, float] = {}
        for vi, pi in zip(v.tolist(), p.tolist(), strict=True):
            j = max(count + vi, 0)
            out[j] = out.get(j, 0.0) + pi
        return out

    def privacy(
        self, max_count: int | None = None, *, epsilon: float | None = None
    ) -> PrivacyFigures:
        """Epsilon and delta between neighbouring counts (see the module docstring).

        Args:
            max_count: Largest count examined (default: enough to cover every
                row and residue class).
            epsilon: The epsilon at which delta is computed. Default: the
                mechanism's design epsilon where it has one (DP), else the
                largest finite log-ratio over neighbouring counts.
        """
        hi = max_count if max_count is not None else len(self.rows) + max(self.modulus, 1) + 2
        if self.selector == "loop":
            hi = max(hi, len(self.rows) + 2)
        eps = 0.0
        pairs = []
        for i in range(hi):
            a, b = self.distribution(i), self.distribution(i + 1)
            pairs.append((i, a, b))
            for j in set(a) & set(b):
                eps = max(eps, abs(math.log(a[j] / b[j])))
        if epsilon is None:
            design = self.parameters.get("epsilon")
            epsilon = float(design) if isinstance(design, int | float) else eps
        eps = float(epsilon)
        delta, worst = 0.0, 0
        factor = math.exp(eps)
        for i, a, b in pairs:
            for x, y in ((a, b), (b, a)):
                d = sum(max(0.0, px - factor * y.get(j, 0.0)) for j, px in x.items())
                if d > delta + 1e-15:
                    delta, worst = d, i
        return PrivacyFigures(epsilon=eps, delta=delta, worst_count=worst)

    def share_changed(self) -> list[float]:
        """Per row, the probability that a count changes (``v != 0``)."""
        return [float(p[v != 0].sum()) for v, p in list(self.rows) + list(self.residue_rows)]

    def variance(self) -> list[float]:
        """Per row, the variance of ``v``."""
        out = []
        for v, p in list(self.rows) + list(self.residue_rows):
            mean = float((v * p).sum())
            out.append(float(((v - mean) ** 2 * p).sum()))
        return out

    def describe(self) -> dict[str, Any]:
        """The public description: name, parameters and privacy figures."""
        fig = self.privacy()
        return {
            "name": self.name,
            **dict(self.parameters),
            "epsilon": round(fig.epsilon, 6),
            "delta": float(f"{fig.delta:.6g}"),
            **({"paper": self.paper} if self.paper else {}),
        }

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.parameters.items())
        return f"PTable({self.name}: {params}; {len(self.rows)} rows, {self.selector})"

    # -- files ----------------------------------------------------------------------------

    def to_csv(self, layout: Literal["destatis", "abs"] = "destatis", *, keys: int = 256) -> str:
        """The ptable as CSV text.

        ``destatis``: columns ``i, j, p, v, p_int_lb, p_int_ub, type`` (the
        layout of the R package ptable; the last ``i`` stands for all larger
        counts; residue rows, a tablesafe extension, have type ``mod<M>`` and
        ``i`` the residue). ``abs``: columns ``pcv, ckey, pvalue`` with
        ``keys`` cell keys per count (256 or 4096), ``pvalue`` the
        perturbation whose interval holds ``(ckey + 0.5) / keys``.
        """
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        if layout == "destatis":
            w.writerow(["i", "j", "p", "v", "p_int_lb", "p_int_ub", "type"])
            blocks = [(self.rows, "all")]
            if self.residue_rows:
                blocks.append((self.residue_rows, f"mod{self.modulus}"))
            for rows, kind in blocks:
                for i, (v, p) in enumerate(rows):
                    lb = 0.0
                    for vi, pi in zip(v.tolist(), p.tolist(), strict=True):
                        ub = lb + pi
                        j = i + vi if kind == "all" else i - vi
                        w.writerow([i, j, repr(pi), vi, repr(lb), repr(min(ub, 1.0)), kind])
                        lb = ub
            return buf.getvalue()
        if layout == "abs":
            if keys not in (256, 4096):
                raise ParameterError("ABS ptables have 256 or 4096 cell keys per count")
            if self.selector == "residue":
                raise ParameterError("PRAM's residue rows have no ABS layout; use destatis")
            # The ONS layout: counts 0..750, larger counts loop onto 501..750.
            w.writerow(["pcv", "ckey", "pvalue"])
            u = (np.arange(keys) + 0.5) / keys
            for i in range(751):
                if self.sampled is not None and self.sampled.shape[1] == keys:
                    v = self.sampled[int(self.row_index(np.array([i]))[0])]
                else:
                    v = self.perturbation(np.full(keys, i), u)
                for k, vi in enumerate(v.tolist()):
                    w.writerow([i, k, vi])
            return buf.getvalue()
        raise ParameterError(f"unknown layout {layout!r}; allowed: destatis, abs")

    def write_csv(self, path: str | Path, layout: Literal["destatis", "abs"] = "destatis") -> Path:
        """Write :meth:`to_csv` to ``path``."""
        path = Path(path)
        path.write_text(self.to_csv(layout))
        return path

    @classmethod
    def read_csv(cls, path: str | Path, *, name: str | None = None) -> PTable:
        """Read a ptable in the Destatis (``i,j,p,v,...``) or ABS (``pcv,ckey,pvalue``) layout.

        Raises:
            FormatError: for a missing file, missing columns, non-numeric
                values or rows whose probabilities do not sum to 1.
        """
        path = Path(path)
        try:
            text = path.read_text()
        except OSError:
            raise FormatError(f"cannot read ptable file {path}") from None
        return cls.from_csv_text(text, name=name or path.stem, source=str(path))

    @classmethod
    def from_csv_text(cls, text: str, *, name: str = "ptable", source: str = "ptable") -> PTable:
        """Parse ptable CSV text (see :meth:`read_csv`).

        Besides the two CSV layouts with headers, headerless files of six
        numeric columns ``i j p v p_int_lb p_int_ub`` (the R package's
        export for Tau-Argus, separated by spaces, semicolons or commas)
        are read as the Destatis layout.
        """
        first = text.lstrip().splitlines()[0] if text.strip() else ""
        fields = [f for f in first.replace(";", " ").replace(",", " ").split() if f]
        if len(fields) >= 6 and all(_is_number(f) for f in fields):
            rows = [
                line.replace(";", " ").replace(",", " ").split()
                for line in text.splitlines()
                if line.strip()
            ]
            text = "i,j,p,v,p_int_lb,p_int_ub\n" + "\n".join(",".join(r[:6]) for r in rows)
        reader = csv.DictReader(io.StringIO(text))
        cols = {c.strip() for c in reader.fieldnames or []}
        try:
            if {"pcv", "ckey", "pvalue"} <= cols:
                return cls._from_abs(list(reader), name, source)
            if {"i", "j", "p"} <= cols:
                return cls._from_destatis(list(reader), name, source)
        except (KeyError, ValueError) as exc:
            raise FormatError(f"{source}: malformed ptable row ({exc})") from None
        except ParameterError as exc:
            raise FormatError(f"{source}: {exc}") from None
        raise FormatError(
            f"{source}: not a ptable: expected columns i, j, p (Destatis layout) or pcv, ckey, "
            f"pvalue (ABS layout); found {', '.join(sorted(cols)) or 'none'}"
        )

    @classmethod
    def _from_destatis(cls, records: list[dict[str, str]], name: str, source: str) -> PTable:
        plain: dict[int, dict[int, float]] = {}
        residue: dict[int, dict[int, float]] = {}
        modulus = 0
        for rec in records:
            i, j, p = int(rec["i"]), int(rec["j"]), float(rec["p"])
            kind = (rec.get("type") or "all").strip()
            if kind.startswith("mod"):
                modulus = int(kind[3:])
                residue.setdefault(i, {})[i - j] = residue.setdefault(i, {}).get(i - j, 0.0) + p
            else:
                # "all" (or "even"/"odd" variants, read as the same table).
                plain.setdefault(i, {})[j - i] = plain.setdefault(i, {}).get(j - i, 0.0) + p
        if not plain:
            raise FormatError(f"{source}: the ptable has no rows")
        n = max(plain) + 1
        missing = [i for i in range(n) if i not in plain]
        if missing:
            raise FormatError(f"{source}: rows for counts {missing[:5]} are missing")
        rows = [(list(plain[i]), list(plain[i].values())) for i in range(n)]
        res = [(list(residue[m]), list(residue[m].values())) for m in sorted(residue)]
        if residue and sorted(residue) != list(range(modulus)):
            raise FormatError(f"{source}: residue rows must cover 0 .. {modulus - 1}")
        return cls.from_rows(
            name, rows, residue_rows=res, modulus=modulus, parameters={"file": Path(source).name}
        )

    @classmethod
    def _from_abs(cls, records: list[dict[str, str]], name: str, source: str) -> PTable:
        table: dict[int, dict[int, int]] = {}
        for rec in records:
            table.setdefault(int(rec["pcv"]), {})[int(rec["ckey"])] = int(rec["pvalue"])
        n = max(table) + 1
        keys = len(next(iter(table.values())))
        if keys not in (256, 4096):
            raise FormatError(f"{source}: an ABS ptable has 256 or 4096 cell keys per count")
        # The ONS package ships ptables without a row for 0 (empty cells are
        # never perturbed there); an absent row 0 means exactly that.
        table.setdefault(0, dict.fromkeys(range(keys), 0))
        rows = []
        sampled = np.zeros((n, keys), dtype=np.int64)
        for i in range(n):
            if i not in table or sorted(table[i]) != list(range(keys)):
                raise FormatError(f"{source}: count {i} does not have cell keys 0 .. {keys - 1}")
            vals = np.array([table[i][k] for k in range(keys)])
            sampled[i] = vals
            uniq, counts = np.unique(vals, return_counts=True)
            rows.append((uniq.tolist(), (counts / keys).tolist()))
        # ONS convention: counts above 750 loop onto rows 501-750.
        loop = n >= 751
        base = cls.from_rows(
            name,
            rows,
            selector="loop" if loop else "value",
            loop_start=501 if loop else 0,
            parameters={"file": Path(source).name, "cell_keys": keys},
        )
        return replace(base, sampled=sampled)
