"""Replicate weights from the sample design: ``tablesafe replicates add``.

Survey variances come from the design: strata ``h = 1..H``, each with
``n_h`` primary sampling units (PSUs) drawn from it, and a weight per
record. :func:`replicate_weights` turns such a design into replicate
weights by the textbook formulas (Wolter, *Introduction to Variance
Estimation*, 2nd ed., chapters 3-5; Rust & Rao 1996, *Statistical Methods in
Medical Research* 5, 283-310; Rao & Wu 1988, *JASA* 83, 231-241). With
``y_hj`` the weighted total of PSU ``j`` of stratum ``h``, each method's
variance of a total equals, exactly or in expectation, the Taylor
(linearisation) variance ``sum_h n_h/(n_h - 1) sum_j (y_hj - ybar_h)**2``
of the same with-replacement design:

- **JK1** (delete-one-PSU jackknife; JKn when there are strata): one
  replicate per PSU; the PSU's records get weight 0 and the other PSUs of
  its stratum ``n_h/(n_h - 1)`` times their weight. Variance
  ``sum_r c_h(r) (theta_r - theta)**2`` with ``c_h = (n_h - 1)/n_h``. When
  every stratum has the same ``n_h`` (or there are no strata) the catalog's
  single coefficient is ``(n - 1)/n``; otherwise each replicate is rescaled
  to ``w + sqrt(c_h) (w_r - w)`` and the coefficient is 1 (the same
  variance for every linear estimator, and non-negative weights).
- **JK2** (paired jackknife; exactly two PSUs per stratum): one replicate
  per stratum; its first PSU (in sorted order of the PSU codes) gets weight
  0 and the second twice its weight. Coefficient 1; for totals the variance
  equals the Taylor variance exactly.
- **BRR** (balanced repeated replication, two PSUs per stratum), with Fay's
  factor ``rho``: replicate ``r`` multiplies the first PSU of stratum ``h``
  by ``1 + (1 - rho) a_rh`` and the second by ``1 - (1 - rho) a_rh``, where
  ``a_rh = ±1`` is column ``h + 1`` of a Sylvester Hadamard matrix of order
  ``R``, the smallest power of two above ``H``. The columns are orthogonal,
  so for totals ``sum_r (theta_r - theta)**2 / (R (1 - rho)**2)`` equals the
  Taylor variance exactly.
- **bootstrap** (Rao-Wu rescaling bootstrap with ``n_h - 1`` PSUs drawn
  with replacement in each stratum): replicate weights
  ``w * n_h/(n_h - 1) * m_hj`` with ``m_hj`` the number of times PSU ``j``
  was drawn. Coefficient ``1/(R - 1)``, R ``survey``'s for this bootstrap
  (``subbootweights``: ``scale = 1/(replicates - 1)``) and the catalog's
  default for ``bootstrap``; the expected variance of a total is the Taylor
  variance.

PSUs are identified within their stratum (PSU 1 of stratum 1 and PSU 1 of
stratum 2 are different PSUs), as in NHANES and most public-use files.
"""

from __future__ import annotations

import math
import numbers
import re
import secrets
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import CatalogError, DataError, ParameterError, choice
from tablesafe.catalog._catalog import Catalog, check_name, toml_value
from tablesafe.catalog._catalog import ReplicateMethod as Method
from tablesafe.catalog._dataset import DataFormat, Dataset

__all__ = [
    "DesignReplicates",
    "ReplicatesReport",
    "add_replicates",
    "design_warnings",
    "replicate_weights",
]

#: Replicates drawn by the bootstrap unless told otherwise.
DEFAULT_BOOTSTRAP_REPLICATES = 200


@dataclass(frozen=True)
class DesignReplicates:
    """Replicate factors for a design, and how to turn replicates into a variance.

    The replicate weight ``r`` of record ``i`` is
    ``weight[i] * factors[r, psu_index[i]]``.

    Attributes:
        factors: Shape ``(R, P)``: the factor of each PSU in each replicate.
        psu_index: For each record, the index of its PSU (0 .. P-1).
        method: The replication method.
        coefficient: The factor in front of ``sum_r (theta_r - theta)**2``.
        fay: Fay's factor (BRR only; 0 otherwise).
        strata: Number of strata ``H``.
    """

    factors: npt.NDArray[np.float64]
    psu_index: npt.NDArray[np.int64]
    method: Method
    coefficient: float
    fay: float
    strata: int

    @property
    def replicates(self) -> int:
        """The number of replicates ``R``."""
        return int(self.factors.shape[0])

    def columns(self, weight: npt.NDArray[np.float64]) -> Iterator[npt.NDArray[np.float64]]:
        """The replicate weights, one column (all records) at a time."""
        for row in self.factors:
            yield weight * row[self.psu_index]


def _codes(values: npt.ArrayLike, what: str, column: str) -> npt.NDArray[np.int64]:
    import pandas as pd

    series = pd.Series(np.asarray(values))
    missing = int(series.isna().sum())
    if missing:
        raise DataError(
            f"{what} column {column} has {missing} missing values; every record needs a {what}"
        )
    codes, _ = pd.factorize(series, sort=True)
    return np.asarray(codes, dtype=np.int64)


def _sylvester(order: int) -> npt.NDArray[np.int64]:
    h = np.ones((1, 1), dtype=np.int64)
    while h.shape[0] < order:
        h = np.block([[h, h], [h, -h]])
    return h


def _label(values: npt.ArrayLike, index: int) -> str:
    import pandas as pd

    uniques = pd.unique(pd.Series(np.asarray(values)))
    return str(sorted(uniques, key=lambda v: (str(type(v)), v))[index])


def replicate_weights(
    strata: npt.ArrayLike | None,
    psu: npt.ArrayLike,
    method: str,
    *,
    replicates: int | None = None,
    fay: float = 0.0,
    rng: np.random.Generator | None = None,
    strata_column: str = "strata",
    psu_column: str = "psu",
) -> DesignReplicates:
    """Make replicate factors from a stratified cluster design.

    Args:
        strata: The stratum of each record, or ``None`` for an unstratified design.
        psu: The PSU of each record (identified within its stratum).
        method: ``"JK1"``, ``"JK2"``, ``"BRR"`` or ``"bootstrap"``.
        replicates: The number of replicates: for BRR a power of two above
            the number of strata (default the smallest), for the bootstrap
            at least 2 (default 200); JK1 and JK2 have one replicate per PSU
            or per stratum and accept only that number.
        fay: Fay's factor in [0, 1) (BRR only).
        rng: The bootstrap's Generator; ``None`` draws a seed from the
            secure source.
        strata_column: The stratum column's name, for messages.
        psu_column: The PSU column's name, for messages.

    Returns:
        The replicate factors per PSU and the variance coefficient.

    Raises:
        ParameterError: for an unknown method, a bad number of replicates or
            a Fay factor outside [0, 1) or with another method than BRR.
        DataError: for missing strata or PSUs, a stratum with one PSU, or
            (JK2, BRR) a stratum without exactly two PSUs.
    """
    kind = _check_method(method, fay)
    d = _psus(strata, psu, strata_column, psu_column)
    if kind in (Method.JK2, Method.BRR):
        other = np.flatnonzero(d.n_h != 2)
        if other.size:
            raise DataError(
                f"{kind} needs exactly two PSUs per stratum; {d.where(int(other[0]))} of "
                f"{strata_column} has {d.n_h[other[0]]}. Use JK1 or bootstrap, or pair the PSUs"
            )
    natural = {Method.JK1: d.n_psu, Method.JK2: d.n_strata}
    if kind in natural and replicates is not None and replicates != natural[kind]:
        raise ParameterError(
            f"{kind} makes one replicate per {'PSU' if kind == Method.JK1 else 'stratum'}: "
            f"{natural[kind]} here, not {replicates}; leave out --replicates"
        )
    if kind == Method.JK1:
        factors, coefficient = _jk1(d)
    elif kind == Method.JK2:
        factors, coefficient = _jk2(d)
    elif kind == Method.BRR:
        factors, coefficient = _brr(d, replicates, fay)
    else:
        factors, coefficient = _bootstrap(d, replicates, rng)
    return DesignReplicates(
        factors=factors,
        psu_index=d.psu_index.astype(np.int64),
        method=kind,
        coefficient=coefficient,
        fay=float(fay),
        strata=d.n_strata,
    )


def _check_method(method: str, fay: float) -> Method:
    """Check the method and Fay's factor.

    Returns:
        The method, as its member.

    Raises:
        ParameterError: for an unknown method, or a Fay factor outside [0, 1)
            or with another method than BRR.
    """
    kind = choice(Method, method, "replication method")
    if not isinstance(fay, int | float) or not 0 <= fay < 1:
        raise ParameterError(f"Fay's factor must lie in [0, 1), not {fay!r}")
    if fay and kind != Method.BRR:
        raise ParameterError(f"Fay's factor applies to BRR only, not to {kind}")
    return kind


@dataclass(frozen=True)
class _Psus:
    """The PSUs of a design, numbered in sorted (stratum, PSU) order.

    Attributes:
        strata: The stratum of each record (``None``: one stratum), for messages.
        psu_index: For each record, the index of its PSU.
        stratum_of: For each PSU, its stratum.
        n_h: For each stratum, its number of PSUs.
        first: For each stratum, the index of its first PSU.
    """

    strata: npt.ArrayLike | None
    psu_index: npt.NDArray[np.intp]
    stratum_of: npt.NDArray[np.int64]
    n_h: npt.NDArray[np.int64]
    first: npt.NDArray[np.intp]

    @property
    def n_psu(self) -> int:
        """The number of PSUs."""
        return int(self.stratum_of.size)

    @property
    def n_strata(self) -> int:
        """The number of strata."""
        return int(self.n_h.size)

    def where(self, h: int) -> str:
        """Stratum ``h`` as a message names it."""
        return f"stratum {_label(self.strata, h)}" if self.strata is not None else "the one stratum"


def _psus(
    strata: npt.ArrayLike | None, psu: npt.ArrayLike, strata_column: str, psu_column: str
) -> _Psus:
    """Number the PSUs within their strata.

    Raises:
        DataError: for missing strata or PSUs, no record, or a stratum with one PSU.
    """
    p_codes = _codes(psu, "PSU", psu_column)
    n = p_codes.size
    if n == 0:
        raise DataError("the microdata has no records")
    s_codes = (
        np.zeros(n, dtype=np.int64) if strata is None else _codes(strata, "stratum", strata_column)
    )
    # PSUs within strata, numbered in sorted (stratum, PSU) order.
    pairs = s_codes * (int(p_codes.max()) + 1) + p_codes
    uniq, psu_index = np.unique(pairs, return_inverse=True)
    stratum_of = (uniq // (int(p_codes.max()) + 1)).astype(np.int64)
    n_strata = int(stratum_of.max()) + 1
    n_h = np.bincount(stratum_of, minlength=n_strata)
    first = np.searchsorted(stratum_of, np.arange(n_strata))  # index of each stratum's first PSU
    d = _Psus(strata, psu_index, stratum_of, n_h, first)
    single = np.flatnonzero(n_h < 2)
    if single.size:
        raise DataError(
            f"{d.where(int(single[0]))} of {strata_column} has only one PSU ({single.size} strata "
            "in all); a variance needs at least two PSUs per stratum: collapse such strata "
            "with a neighbouring one first"
        )
    return d


def _jk1(d: _Psus) -> tuple[npt.NDArray[np.float64], float]:
    """JK1: each replicate drops one PSU and reweights the rest of its stratum (and coefficient)."""
    n_psu, n_h, stratum_of = d.n_psu, d.n_h, d.stratum_of
    factors = np.ones((n_psu, n_psu))
    c_h = (n_h - 1) / n_h
    for r in range(n_psu):
        h = stratum_of[r]
        members = stratum_of == h
        factors[r, members] = n_h[h] / (n_h[h] - 1)
        factors[r, r] = 0.0
    if np.all(n_h == n_h[0]):
        return factors, float(c_h[0])
    scale = np.sqrt(c_h[stratum_of])[:, None]  # per replicate (= per PSU)
    return 1.0 + scale * (factors - 1.0), 1.0


def _jk2(d: _Psus) -> tuple[npt.NDArray[np.float64], float]:
    """JK2: each replicate drops a stratum's first PSU and doubles its second."""
    factors = np.ones((d.n_strata, d.n_psu))
    for h in range(d.n_strata):
        factors[h, d.first[h]] = 0.0
        factors[h, d.first[h] + 1] = 2.0
    return factors, 1.0


def _brr(d: _Psus, replicates: int | None, fay: float) -> tuple[npt.NDArray[np.float64], float]:
    """BRR with Fay's factor: half-samples from a Sylvester Hadamard matrix.

    Raises:
        ParameterError: for a number of replicates that is not a power of two above ``H``.
    """
    n_strata, first = d.n_strata, d.first
    order = 1 << max(n_strata, 1).bit_length()  # smallest power of two > H
    if replicates is not None:
        if replicates < order or replicates & (replicates - 1):
            raise ParameterError(
                f"BRR with {n_strata} strata needs a power of two above {n_strata} "
                f"replicates (at least {order}), not {replicates}"
            )
        order = replicates
    alpha = _sylvester(order)[:, 1 : n_strata + 1].astype(np.float64)  # (R, H)
    factors = np.empty((order, d.n_psu))
    factors[:, first] = 1.0 + (1.0 - fay) * alpha
    factors[:, first + 1] = 1.0 - (1.0 - fay) * alpha
    return factors, 1.0 / (order * (1.0 - fay) ** 2)


def _bootstrap(
    d: _Psus, replicates: int | None, rng: np.random.Generator | None
) -> tuple[npt.NDArray[np.float64], float]:
    """The Rao-Wu rescaling bootstrap: ``n_h - 1`` PSUs drawn with replacement per stratum.

    Raises:
        ParameterError: for fewer than 2 replicates.
    """
    r_count = DEFAULT_BOOTSTRAP_REPLICATES if replicates is None else replicates
    if r_count < 2:
        raise ParameterError(f"the bootstrap needs at least 2 replicates, not {r_count}")
    gen = rng if rng is not None else np.random.default_rng(secrets.randbits(128))
    factors = np.empty((r_count, d.n_psu))
    for h in range(d.n_strata):
        k = int(d.n_h[h])
        draws = gen.multinomial(k - 1, np.full(k, 1.0 / k), size=r_count)
        factors[:, d.first[h] : d.first[h] + k] = draws * (k / (k - 1))
    # R survey's coefficient for the Rao-Wu bootstrap (subbootweights), and the catalog's default.
    return factors, 1.0 / (r_count - 1)


# -- writing to a dataset ---------------------------------------------------------------


@dataclass(frozen=True)
class ReplicatesReport:
    """What :func:`add_replicates` wrote.

    Attributes:
        columns: The replicate-weight columns.
        method: The replication method.
        coefficient: The variance coefficient written to the catalog.
        strata: Number of strata.
        psus: Number of PSUs.
        records: Number of records.
        warnings: What may make the standard errors mislead (see
            :func:`design_warnings`); the command line prints them on standard error.
    """

    columns: tuple[str, ...]
    method: str
    coefficient: float
    strata: int
    psus: int
    records: int
    warnings: tuple[str, ...] = ()


_DESIGN_KEYS = ("replicate_weights", "replicate_method", "replicate_coefficient", "fay")


def _edit_catalog(text: str, new_lines: list[str]) -> str:
    """Replace the replicate keys of ``[dataset]`` in the catalog text, keeping the rest."""
    lines = text.splitlines()
    try:
        start = next(
            i for i, line in enumerate(lines) if re.match(r"\s*\[dataset\]\s*(#.*)?$", line)
        )
    except StopIteration:
        raise CatalogError(
            "the catalog has no [dataset] table to add replicate weights to"
        ) from None
    end = next(
        (i for i in range(start + 1, len(lines)) if re.match(r"\s*\[", lines[i])), len(lines)
    )
    key = re.compile(r"\s*(" + "|".join(_DESIGN_KEYS) + r")\s*=")
    marker = "# replicate weights made by `tablesafe replicates add`"
    kept: list[str] = []
    i = start + 1
    while i < end:
        line = lines[i]
        if line.startswith(marker):
            i += 1
            continue
        if key.match(line):
            # A value may span lines (an array): skip until its brackets close.
            depth = _depth(line)
            i += 1
            while depth > 0 and i < end:
                depth += _depth(lines[i])
                i += 1
            continue
        kept.append(line)
        i += 1
    # After the last key of [dataset] (comments below it stay below it).
    last = max(
        (j for j, line in enumerate(kept) if line.strip() and not line.lstrip().startswith("#")),
        default=-1,
    )
    body = kept[: last + 1] + new_lines + kept[last + 1 :]
    return "\n".join([*lines[: start + 1], *body, *lines[end:]]) + "\n"


def _depth(line: str) -> int:
    code = re.sub(r'"(\\.|[^"\\])*"', "", line).split("#", 1)[0]
    return code.count("[") - code.count("]")


def add_replicates(
    directory: str | Path,
    *,
    strata: str | None,
    psu: str,
    method: str,
    replicates: int | None = None,
    fay: float = 0.0,
    prefix: str = "RW",
    seed: int | None = None,
    replace: bool = False,
) -> ReplicatesReport:
    """Make replicate weights from the design and write them to a dataset.

    The weights are appended to the microdata file (``<prefix>1`` ..
    ``<prefix>R``) and the catalog's ``[dataset]`` table gets
    ``replicate_weights``, ``replicate_method``, ``replicate_coefficient``
    (and ``fay`` for BRR); the rest of the catalog, comments included, is
    kept. Both files are written only after every check passed.

    Args:
        directory: The dataset folder (or its catalog file).
        strata: The stratum column, or ``None`` for an unstratified design.
        psu: The PSU column.
        method: ``"JK1"``, ``"JK2"``, ``"BRR"`` or ``"bootstrap"``.
        replicates: The number of replicates (see :func:`replicate_weights`).
        fay: Fay's factor (BRR only).
        prefix: Prefix of the replicate-weight column names.
        seed: The bootstrap's seed (for a reproducible file); ``None`` draws
            one from the secure source.
        replace: Replace replicate weights the dataset already has.

    Returns:
        What was written.

    Raises:
        CatalogError: if the catalog declares no weight, or already declares
            replicate weights and ``replace`` is false.
        DataError: for missing design columns, bad weights or a bad design.
        ParameterError: for impossible options.
    """
    import pyarrow as pa

    dataset, catalog_path, old = _open(directory, prefix, replace)
    catalog = dataset.catalog
    assert catalog.weight is not None
    table = _read(dataset)
    weight = _design_weights(table, catalog.weight, strata, psu)
    design = replicate_weights(
        None if strata is None else table.column(strata).to_numpy(zero_copy_only=False),
        table.column(psu).to_numpy(zero_copy_only=False),
        method,
        replicates=replicates,
        fay=fay,
        rng=None if seed is None else np.random.default_rng(seed),
        strata_column=strata or "strata",
        psu_column=psu,
    )
    columns, keep = _columns(table.column_names, old, prefix, design.replicates)
    if {strata, psu} & {catalog.weight, catalog.record_key}:
        raise DataError("the stratum and PSU columns must not be the weight or the record key")
    table = table.select(keep)
    for name, values in zip(columns, design.columns(weight), strict=True):
        table = table.append_column(name, pa.array(values, type=pa.float64()))
    text = _catalog_with(catalog_path, design, columns, strata, psu, fay)
    _write(dataset.path, table, catalog_path, text)
    psu_values = table.column(psu).to_numpy(zero_copy_only=False)
    others = [c for c in keep if c not in {psu, catalog.weight, catalog.record_key}]
    return ReplicatesReport(
        columns=columns,
        method=method,
        coefficient=design.coefficient,
        strata=design.strata,
        psus=int(design.factors.shape[1]),
        records=int(weight.size),
        warnings=design_warnings(design, strata, psu, psu_values, others),
    )


def _open(directory: str | Path, prefix: str, replace: bool) -> tuple[Any, Path, tuple[str, ...]]:
    """The dataset, its catalog file and its replicate weights, checked against the options.

    Raises:
        CatalogError: if the catalog declares no weight, or replicate weights
            and ``replace`` is false.
        ParameterError: for a prefix that makes no valid column name.
    """
    dataset = Dataset.open(directory)
    catalog = dataset.catalog
    catalog_path = Path(directory)
    if catalog_path.is_dir():
        catalog_path = catalog_path / "catalog.toml"
    if catalog.weight is None:
        raise CatalogError(
            "the catalog declares no weight (dataset.weight); replicate weights are made from "
            "the survey weight: add it to the catalog (or run `tablesafe catalog init --weight`)"
        )
    old = tuple(catalog.replicates.columns) if catalog.replicates else ()
    if old and not replace:
        raise CatalogError(
            f"the dataset already has {len(old)} replicate weights ({old[0]} ..); pass "
            "replace (--replace) to make new ones"
        )
    try:
        check_name(prefix + "1", "replicate-weight column")
    except CatalogError:
        raise ParameterError(
            f"prefix {prefix!r} does not make valid column names: use a letter followed by "
            "letters, digits or underscores"
        ) from None
    return dataset, catalog_path, old


def _columns(
    names: Sequence[str], old: Sequence[str], prefix: str, replicates: int
) -> tuple[tuple[str, ...], list[str]]:
    """The new replicate-weight columns, and the microdata's columns kept (old replicates out).

    Raises:
        DataError: for a new column's name already in the microdata.
    """
    columns = tuple(f"{prefix}{r + 1}" for r in range(replicates))
    keep = [c for c in names if c not in old]
    clash = [c for c in columns if c in keep]
    if clash:
        raise DataError(f"the microdata already has a column {clash[0]}; choose another --prefix")
    return columns, keep


def _design_weights(
    table: Any, weight_column: str, strata: str | None, psu: str
) -> npt.NDArray[np.float64]:
    """The survey weights, once the design columns are known to exist.

    Raises:
        DataError: for a missing stratum or PSU column, or weights that are
            not numbers, or missing, infinite or negative.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    names = table.column_names
    for what, col in (("stratum", strata), ("PSU", psu)):
        if col is not None and col not in names:
            raise DataError(
                f"{what} column {col!r} is not in the microdata; columns: {', '.join(names)}"
            )
    w = table.column(weight_column)
    if not pa.types.is_floating(w.type) and not pa.types.is_integer(w.type):
        raise DataError(f"weight column {weight_column} must hold numbers, not {w.type}")
    weight = np.asarray(pc.cast(w, pa.float64()).to_numpy(zero_copy_only=False), dtype=float)
    if np.isnan(weight).any() or not np.isfinite(weight).all() or (weight < 0).any():
        raise DataError(
            f"weight column {weight_column} has missing, infinite or negative values; "
            "weights must be finite and >= 0"
        )
    return weight


def _catalog_with(
    catalog_path: Path,
    design: DesignReplicates,
    columns: Sequence[str],
    strata: str | None,
    psu: str,
    fay: float,
) -> str:
    """The catalog's text with the replicate keys of ``design``, checked to read back."""
    method = design.method
    lines = [
        f"# replicate weights made by `tablesafe replicates add`: {method}"
        + (f" (Fay {fay:g})" if method == Method.BRR and fay else "")
        + f" from strata {strata or '(none)'} and PSUs {psu}",
        "replicate_weights = [",
        *(
            "  " + ", ".join(toml_value(c) for c in columns[i : i + 8]) + ","
            for i in range(0, len(columns), 8)
        ),
        "]",
        f"replicate_method = {toml_value(method)}",
        f"replicate_coefficient = {toml_value(design.coefficient)}",
    ]
    if method == Method.BRR:
        lines.append(f"fay = {toml_value(float(fay))}")
    text = _edit_catalog(catalog_path.read_text(encoding="utf-8"), lines)
    new_catalog = Catalog.from_dict(tomllib.loads(text), base=catalog_path.parent)
    if new_catalog.replicates is None or not math.isclose(
        new_catalog.replicates.coefficient, design.coefficient, rel_tol=1e-15
    ):
        raise CatalogError("the edited catalog does not read back as written")  # pragma: no cover
    return text


#: Fewer replicates than this draw a warning: a variance with so few degrees
#: of freedom varies a lot from sample to sample, and a 95% interval of
#: ``± 1.96 se`` is too narrow (the t quantile is 2.09 at 19 degrees of freedom,
#: 12.7 at 1).
MIN_REPLICATES = 20

#: PSU codes 0..k-1 or 1..k with k up to this, without strata, look like PSUs
#: numbered within strata (NHANES: 1 and 2 in each of its strata).
NESTED_CODES = 10


def design_warnings(
    design: DesignReplicates,
    strata: str | None,
    psu: str,
    psu_values: npt.ArrayLike,
    columns: Sequence[str] = (),
) -> tuple[str, ...]:
    """What may make the standard errors of a replicate design mislead.

    * No strata, and PSU codes that are the small integers ``1..k`` (or
      ``0..k-1``, ``k <= NESTED_CODES``): such codes are how PSUs are
      numbered *within* strata; read without the strata, PSU 1 of every
      stratum becomes one PSU (NHANES II, 31 strata of 2 PSUs numbered 1
      and 2, would give 2 JK1 replicates instead of 62).
    * Fewer than ``MIN_REPLICATES`` replicates.

    Args:
        design: The replicate design made.
        strata: The stratum column, or ``None``.
        psu: The PSU column.
        psu_values: The PSU of each record.
        columns: The microdata's other columns (for naming stratum candidates).

    Returns:
        One sentence per warning, each saying what to pass instead.
    """
    import pandas as pd

    out: list[str] = []
    codes = pd.unique(pd.Series(np.asarray(psu_values)))
    whole = sorted(
        int(float(c))
        for c in codes
        if isinstance(c, numbers.Real) and not isinstance(c, bool) and float(c).is_integer()
    )
    k = len(codes)
    numbered = len(whole) == k and whole in (list(range(1, k + 1)), list(range(k)))
    if strata is None and numbered and 2 <= k <= NESTED_CODES:
        candidates = [c for c in columns if "stra" in c.lower()]
        hint = f" (a candidate: {', '.join(candidates[:3])})" if candidates else ""
        out.append(
            f"PSU column {psu} holds only the codes {whole[0]}..{whole[-1]} and no stratum "
            f"column was given, so the design has {k} PSUs in 1 stratum; if PSUs are "
            "numbered within strata (as in NHANES: 1 and 2 in each stratum), pass the "
            f"stratum column (--strata){hint}, or the standard errors will be wrong"
        )
    if design.replicates < MIN_REPLICATES:
        out.append(
            f"only {design.replicates} replicate weights: a standard error from fewer than "
            f"{MIN_REPLICATES} replicates rests on few degrees of freedom, and its 95% "
            "intervals (estimate +- 1.96 se) are too narrow; check that the stratum "
            "(--strata) and PSU (--psu) columns give the full design"
        )
    return tuple(out)


def _read(dataset: Any) -> Any:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if dataset.format == DataFormat.PARQUET:
        return pq.read_table(dataset.path)
    return pacsv.read_csv(dataset.path)


def _write(path: Path, table: Any, catalog_path: Path, text: str) -> None:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    tmp_data = path.with_name(f".{path.name}.tmp")
    tmp_cat = catalog_path.with_name(f".{catalog_path.name}.tmp")
    try:
        if path.suffix.lower() == ".parquet":
            pq.write_table(table, tmp_data)
        else:
            pacsv.write_csv(table, tmp_data)
        tmp_cat.write_text(text, encoding="utf-8")
        tmp_data.replace(path)
        tmp_cat.replace(catalog_path)
    finally:
        tmp_data.unlink(missing_ok=True)
        tmp_cat.unlink(missing_ok=True)
