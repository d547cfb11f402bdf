"""Reading and writing ptable files: the Destatis and the ABS/ONS layouts.

Destatis (probability) layout, as the R package ``ptable`` holds a ptable
for counts (``create_cnt_ptable``; its ``pTable`` slot): one line per
original count ``i`` and published count ``j`` with probability ``p``,
perturbation ``v = j - i``, the cumulative interval
``[p_int_lb, p_int_ub)`` of ``v`` within the row and ``type = all``. The
last ``i`` stands for all larger counts. The package's exports for Tau-Argus
(``i;j;p;v;p_int_ub``) and SAS (``i;j;p;v;p_int_lb;p_int_ub``) are the same
table with ``;`` between fields. The intervals give the lookup order: a
modified ptable (``modify_cnt_ptable``) splits and rearranges them, so the
same ``v`` can appear twice in a row and ``v`` need not ascend.

ABS/ONS (sampled) layout, as the ONS package ``cell-key-perturbation`` reads
it: columns ``pcv, ckey, pvalue``; for each perturbation cell value ``pcv``
(the count; 1..750 in ONS's files, 0 optional) and integer cell key
``ckey`` in 0..K-1 (K = 256 or 4096, the largest ckey + 1) the integer
perturbation ``pvalue``. Counts above 750 use row ``(count - 1) mod 250 +
501``; a count whose row is missing is not perturbed (the ONS package
left-joins the ptable and fills missing perturbations with 0).
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from pathlib import Path

import numpy as np

from tablesafe._errors import FormatError, ParameterError
from tablesafe.ptable._ptable import ONS_LAST_ROW, ONS_LOOP_START, Layout, PTable, Selector

__all__ = ["parse_ptable", "ptable_csv", "read_ptable", "write_ptable"]

_DESTATIS_COLUMNS = ("i", "j", "p", "v", "p_int_lb", "p_int_ub", "type")
_HEADERLESS = {
    6: ("i", "j", "p", "v", "p_int_lb", "p_int_ub"),
    5: ("i", "j", "p", "v", "p_int_ub"),
}
#: One line of a Destatis ptable: order key, v, p, p_int_lb, p_int_ub.
_Entry = tuple[float, int, float, float | None, float | None]
#: Interval bounds must meet within this tolerance (files round them to 8 digits).
_GAP = 1e-6


def _num(x: float) -> str:
    # 15 significant digits: exact for the 8-digit bounds of the R package, and
    # free of the last-bit noise of differences (0.01666667, not 0.016666669999999995).
    return f"{float(x):.15g}"


def ptable_csv(table: PTable, layout: Layout | str = Layout.DESTATIS, *, keys: int = 256) -> str:
    """The ptable as CSV text in the Destatis or the ABS/ONS layout.

    ``destatis``: columns ``i, j, p, v, p_int_lb, p_int_ub, type`` as the R
    package ``ptable`` writes them (the last ``i`` stands for all larger
    counts; PRAM's residue rows, a tablesafe extension, have type
    ``mod<M>``, ``i`` the residue m and ``j = m - v``). ``abs``: columns
    ``pcv, ckey, pvalue`` for counts 0..750 and ``keys`` cell keys
    (see :meth:`PTable.to_sampled`).

    Raises:
        ParameterError: for an unknown layout or a ptable the layout
            cannot hold exactly.
    """
    if layout == Layout.DESTATIS:
        return to_destatis_csv(table)
    if layout == Layout.ABS:
        return to_abs_csv(table.to_sampled(keys))
    raise ParameterError(f"unknown layout {layout!r}; allowed: {', '.join(Layout)}")


def write_ptable(
    table: PTable, path: str | Path, layout: Layout | str = Layout.DESTATIS, *, keys: int = 256
) -> Path:
    """Write :func:`ptable_csv` to ``path`` (nothing is written if conversion fails)."""
    text = ptable_csv(table, layout, keys=keys)
    path = Path(path)
    path.write_text(text)
    return path


def to_destatis_csv(table: PTable) -> str:
    """The Destatis layout: ``i,j,p,v,p_int_lb,p_int_ub,type``.

    Raises:
        ParameterError: for a looped (sampled) ptable whose loop rows differ,
            which "the last i stands for all larger counts" cannot express.
    """
    rows = list(table.rows)
    if table.selector == Selector.LOOP:
        tail = rows[table.loop_start :]
        first = tail[0]
        if any(
            v.shape != first[0].shape or np.any(v != first[0]) or np.any(np.abs(p - first[1]) > 0)
            for v, p in tail
        ):
            raise ParameterError(
                "this looped (ABS/ONS) ptable has different rows above its loop start, which "
                "the destatis layout (last row for all larger counts) cannot express"
            )
        rows = rows[: table.loop_start + 1]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(_DESTATIS_COLUMNS)
    blocks = [(rows, "all")]
    if table.residue_rows:
        blocks.append((list(table.residue_rows), f"mod{table.modulus}"))
    for block, kind in blocks:
        for i, (v, p) in enumerate(block):
            ub = np.cumsum(p)
            ub[-1] = 1.0
            lb = np.concatenate([[0.0], ub[:-1]])
            for vi, pi, lo, hi in zip(
                v.tolist(), p.tolist(), lb.tolist(), ub.tolist(), strict=True
            ):
                j = i + vi if kind == "all" else i - vi
                w.writerow([i, j, _num(pi), vi, _num(lo), _num(hi), kind])
    return buf.getvalue()


def to_abs_csv(table: PTable) -> str:
    """The ABS/ONS layout ``pcv,ckey,pvalue`` of a sampled ptable."""
    assert table.sampled is not None
    n, k = table.sampled.shape
    # 751 x 4096 lines: the ",ckey," parts are formatted once, not per line.
    middles = [f",{c}," for c in range(k)]
    parts = ["pcv,ckey,pvalue\n"]
    for i in range(n):
        pre = str(i)
        parts.append(
            "".join(
                f"{pre}{mid}{v}\n"
                for mid, v in zip(middles, table.sampled[i].tolist(), strict=True)
            )
        )
    return "".join(parts)


def read_ptable(path: str | Path, *, name: str | None = None) -> PTable:
    """Read a ptable file in the Destatis or the ABS/ONS layout.

    See :func:`parse_ptable` for the variants accepted.

    Raises:
        FormatError: for a missing file, missing columns, non-numeric
            values or rows whose probabilities do not sum to 1.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError):
        raise FormatError(f"cannot read ptable file {path}") from None
    return parse_ptable(text, name=name or path.stem, source=str(path))


def _split(line: str, sep: str | None) -> list[str]:
    if sep is None:
        return line.split()
    return next(csv.reader([line], delimiter=sep))


def parse_ptable(text: str, *, name: str = "ptable", source: str = "ptable") -> PTable:
    """Parse ptable CSV text.

    Accepted: the Destatis layout (header with ``i`` and ``j`` or ``v``,
    and ``p`` or ``p_int_ub``; ``p_int_lb``, ``type`` and extra columns
    such as R's row names are optional), including the R package's
    exports for Tau-Argus and SAS (``;``-separated) and headerless
    numeric exports (``i j p v p_int_lb p_int_ub`` or ``i j p v p_int_ub``);
    and the ABS/ONS layout (``pcv, ckey, pvalue``). Separators: comma,
    semicolon, tab or spaces.

    Raises:
        FormatError: for a file that is neither layout, or a malformed one.
    """
    lines = [ln for ln in text.lstrip("\ufeff").splitlines() if ln.strip()]
    if not lines:
        raise FormatError(f"{source}: the ptable file is empty")
    first = lines[0]
    sep = ";" if ";" in first else "," if "," in first else "\t" if "\t" in first else None
    header = [h.strip().strip('"').strip().lower() for h in _split(first, sep)]
    body = lines[1:]
    if {"pcv", "ckey", "pvalue"} <= set(header):
        return _from_abs(_abs_columns(body, header, sep, source), name, source)
    if all(_is_number(h) for h in header if h):
        names = _HEADERLESS.get(len(header))
        if names is None:
            raise FormatError(
                f"{source}: a ptable file without a header must have the 6 columns "
                "i j p v p_int_lb p_int_ub (or the 5 of a Tau-Argus export), not "
                f"{len(header)}"
            )
        header, body = list(names), lines
    records = []
    for n, line in enumerate(body, start=2 if body is not lines else 1):
        fields = [f.strip().strip('"').strip() for f in _split(line, sep)]
        if len(fields) != len(header):
            raise FormatError(
                f"{source}: line {n} has {len(fields)} fields, the header {len(header)}"
            )
        records.append(dict(zip(header, fields, strict=True)))
    cols = set(header)
    try:
        if "i" in cols and cols & {"j", "v"} and cols & {"p", "p_int_ub"}:
            return _from_destatis(records, cols, name, source)
    except ParameterError as exc:
        raise FormatError(f"{source}: {exc}") from None
    found = ", ".join(sorted(c for c in cols if c)) or "none"
    raise FormatError(
        f"{source}: not a ptable: expected the columns i, j (or v), p (or p_int_ub) of the "
        f"Destatis layout, or pcv, ckey, pvalue of the ABS/ONS layout; found {found}"
    )


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _int(rec: dict[str, str], col: str, source: str) -> int:
    text = rec[col]
    try:
        x = float(text)
    except ValueError:
        raise FormatError(
            f"{source}: malformed ptable row: {col} = {text!r} is not a number"
        ) from None
    if not math.isfinite(x) or x != int(x):
        raise FormatError(
            f"{source}: malformed ptable row: {col} = {text!r} is not an integer (ptables for "
            "magnitude tables are not supported)"
        )
    return int(x)


def _float(rec: dict[str, str], col: str, source: str) -> float:
    text = rec[col]
    try:
        x = float(text)
    except ValueError:
        raise FormatError(
            f"{source}: malformed ptable row: {col} = {text!r} is not a number"
        ) from None
    if not math.isfinite(x):
        raise FormatError(f"{source}: malformed ptable row: {col} = {text!r}")
    return x


def _from_destatis(records: list[dict[str, str]], cols: set[str], name: str, source: str) -> PTable:
    # Per (block, i): entries (order key, v, p).
    blocks: dict[str, dict[int, list[_Entry]]] = {}
    modulus = 0
    for n, rec in enumerate(records):
        i = _int(rec, "i", source)
        kind = (rec.get("type") or "all").strip().lower()
        if kind in ("even", "odd"):
            raise FormatError(
                f"{source}: type {kind!r} marks a ptable for magnitude tables; only ptables for "
                "counts (type all) are supported"
            )
        if kind.startswith("mod") and kind[3:].isdigit():
            m = int(kind[3:])
            if modulus and m != modulus:
                raise FormatError(f"{source}: residue rows of two moduli ({modulus} and {m})")
            modulus = m
        elif kind != "all":
            raise FormatError(f"{source}: unknown type {kind!r}; allowed: all, mod<M>")
        residue = kind != "all"
        if "v" in cols:
            v = _int(rec, "v", source)
            if "j" in cols:
                j = _int(rec, "j", source)
                expected = i - v if residue else i + v
                if j != expected:
                    raise FormatError(f"{source}: line for i={i}, j={j} has v={v}, not {j - i}")
        else:
            j = _int(rec, "j", source)
            v = i - j if residue else j - i
        lb = _float(rec, "p_int_lb", source) if "p_int_lb" in cols else None
        ub = _float(rec, "p_int_ub", source) if "p_int_ub" in cols else None
        if "p" in cols:
            p = _float(rec, "p", source)
            if lb is not None and ub is not None and abs((ub - lb) - p) > _GAP:
                raise FormatError(
                    f"{source}: row i={i}: p = {p} but its interval [{lb}, {ub}) has width "
                    f"{ub - lb}"
                )
        elif lb is not None and ub is not None:
            p = ub - lb
        else:
            p = math.nan  # from the upper bounds below (Tau-Argus export without p)
        if p < 0:
            raise FormatError(f"{source}: row i={i}: negative probability {p}")
        order = lb if lb is not None else ub if ub is not None else float(n)
        blocks.setdefault(kind, {}).setdefault(i, []).append((order, v, p, lb, ub))
    plain = blocks.get("all", {})
    if not plain:
        raise FormatError(f"{source}: the ptable has no rows of type all")
    n_rows = max(plain) + 1
    missing = [i for i in range(n_rows) if i not in plain]
    if missing:
        raise FormatError(f"{source}: rows for counts {missing[:5]} are missing")
    residue_block = blocks.get(f"mod{modulus}", {}) if modulus else {}
    if residue_block and sorted(residue_block) != list(range(modulus)):
        raise FormatError(f"{source}: residue rows must cover 0 .. {modulus - 1}")
    has_bounds = "p_int_ub" in cols
    rows = [_ordered_row(plain[i], has_bounds, f"row i={i}", source) for i in range(n_rows)]
    res = [
        _ordered_row(residue_block[m], has_bounds, f"residue row {m}", source)
        for m in range(modulus if residue_block else 0)
    ]
    return PTable.from_rows(
        name, rows, residue_rows=res, modulus=modulus, parameters={"file": Path(source).name}
    )


def _ordered_row(
    entries: list[_Entry], has_bounds: bool, where: str, source: str
) -> tuple[list[int], list[float]]:
    entries = sorted(entries, key=lambda e: e[0])
    vs = [e[1] for e in entries]
    ps = [e[2] for e in entries]
    if has_bounds:
        ubs = [e[4] if e[4] is not None else math.nan for e in entries]
        if any(math.isnan(p) for p in ps):
            # Only upper bounds: widths are the differences of consecutive bounds.
            ps = [ubs[0], *(b - a for a, b in itertools.pairwise(ubs))]
    total = math.fsum(ps)
    if abs(total - 1.0) > _GAP:
        raise FormatError(f"{source}: {where}: probabilities sum to {total:.8f}, not 1")
    if has_bounds:
        lbs = [
            e[3] if e[3] is not None else ub - p for e, ub, p in zip(entries, ubs, ps, strict=True)
        ]
        # The intervals must tile [0, 1) in their order: the lookup relies on it.
        prev = 0.0
        for lo, hi in zip(lbs, ubs, strict=True):
            if abs(lo - prev) > _GAP:
                raise FormatError(
                    f"{source}: {where}: the intervals p_int_lb/p_int_ub leave a gap or overlap "
                    f"at {prev}"
                )
            prev = hi
        if abs(prev - 1.0) > _GAP:
            raise FormatError(f"{source}: {where}: the last interval ends at {prev}, not 1")
    return vs, ps


def _abs_columns(body: list[str], header: list[str], sep: str | None, source: str) -> np.ndarray:
    """The (pcv, ckey, pvalue) columns of an ABS/ONS file as an int64 array (n, 3)."""
    import pandas as pd

    # A sampled ptable has 751 x 4096 lines: parsed by pandas, not line by line.
    def read(dtype: type[np.int64] | type[str]) -> pd.DataFrame:
        return pd.read_csv(
            io.StringIO("\n".join(body)),
            sep=sep if sep is not None else r"\s+",
            header=None,
            names=header,
            usecols=["pcv", "ckey", "pvalue"],
            dtype=dtype,
            skipinitialspace=True,
        )

    try:
        try:
            frame = read(np.int64)  # the common case, fast
            return np.asarray(frame[["pcv", "ckey", "pvalue"]].to_numpy(), dtype=np.int64)
        except (ValueError, TypeError):
            frame = read(str)  # find out what is wrong, and say so
    except (ValueError, pd.errors.ParserError) as exc:
        raise FormatError(f"{source}: malformed ABS/ONS ptable ({exc})") from None
    cols = frame[["pcv", "ckey", "pvalue"]]
    if cols.isna().any().any():
        raise FormatError(f"{source}: malformed ABS/ONS ptable: a line lacks pcv, ckey or pvalue")
    try:
        values = cols.apply(lambda c: pd.to_numeric(c.str.strip().str.strip('"'))).to_numpy()
    except ValueError:
        raise FormatError(f"{source}: malformed ptable row: a value is not a number") from None
    if values.size and (not np.all(np.isfinite(values)) or np.any(values != np.round(values))):
        raise FormatError(f"{source}: malformed ptable row: pcv, ckey and pvalue must be integers")
    return np.asarray(values, dtype=np.int64).reshape(-1, 3)


def _from_abs(data: np.ndarray, name: str, source: str) -> PTable:
    if data.shape[0] == 0:
        raise FormatError(f"{source}: the ptable has no rows")
    pcv, ckey, pvalue = data[:, 0], data[:, 1], data[:, 2]
    bad = (pcv < 0) | (pcv > ONS_LAST_ROW)
    if bad.any():
        raise FormatError(
            f"{source}: pcv {int(pcv[bad][0])} outside 0 .. {ONS_LAST_ROW} (counts above "
            f"{ONS_LAST_ROW} use rows {ONS_LOOP_START}-{ONS_LAST_ROW})"
        )
    if (ckey < 0).any():
        raise FormatError(f"{source}: negative cell key {int(ckey[ckey < 0][0])}")
    keys = int(ckey.max()) + 1
    if keys < 2 or keys & (keys - 1):
        raise FormatError(
            f"{source}: cell keys run 0 .. {keys - 1}; an ABS/ONS ptable has a power-of-two "
            "number of cell keys (0-255 or 0-4095)"
        )
    flat = pcv * keys + ckey
    if np.bincount(flat).max() > 1:
        raise FormatError(f"{source}: a (pcv, ckey) pair appears twice")
    present = np.bincount(pcv, minlength=ONS_LAST_ROW + 1)
    incomplete = np.flatnonzero((present > 0) & (present != keys))
    if incomplete.size:
        raise FormatError(
            f"{source}: count {int(incomplete[0])} does not have cell keys 0 .. {keys - 1}"
        )
    # Absent rows (ONS files start at pcv 1) stay zero: the ONS package leaves
    # such counts unperturbed.
    filled = np.zeros((ONS_LAST_ROW + 1) * keys, dtype=np.int64)
    filled[flat] = pvalue
    sampled = filled.reshape(ONS_LAST_ROW + 1, keys)
    try:
        return PTable.from_sampled(
            name, sampled, parameters={"file": Path(source).name, "cell_keys": keys}
        )
    except ParameterError as exc:
        raise FormatError(f"{source}: {exc}") from None
