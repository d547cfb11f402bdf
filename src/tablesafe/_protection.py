"""The data owner's protection profile, and the one way from settings to it.

:class:`Protection` is what the :class:`~tablesafe.TableBuilder` applies to
every request: the cell-wise (or record-level) mechanism, the seed scheme
and its secret, the additivity option, and how weighted figures are
published (their noise and their :class:`Rounding`).

:func:`protection_from_settings` is the only place that turns validated
protection settings (:class:`~tablesafe._settings.ProtectionSettings`, the
site configuration's ``[datasets.protection]`` table) into a
:class:`Protection`. The server, the command line (whose ``--method``
options are first turned into the same settings) and the Python API all go
through it, so a method name means the same thing everywhere.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from tablesafe import mechanisms
from tablesafe._errors import ParameterError, choice
from tablesafe._protection_limits import Additivity, ProtectionMethod, check_number
from tablesafe._rounding import Rounding
from tablesafe._seeds import (
    SeedScheme,
    cell_key_uniforms,
    definition_words,
    keyed_words,
)
from tablesafe.mechanisms._marginals import DPMarginals
from tablesafe.mechanisms._ptable_cache import cached_destatis
from tablesafe.mechanisms._records import DropAddRecords
from tablesafe.mechanisms._weighted import weight_uniforms
from tablesafe.ptable._io import read_ptable

if TYPE_CHECKING:
    from tablesafe._settings import DatasetSettings, ProtectionSettings, SiteConfig
    from tablesafe.ptable._ptable import PTable

__all__ = [
    "CellwiseMechanism",
    "Protection",
    "Rounding",
    "mechanism_from_settings",
    "protection_from_settings",
    "site_protection",
]


@runtime_checkable
class CellwiseMechanism(Protocol):
    """A cell-wise mechanism: a perturbation for each cell from its count and uniform.

    :class:`tablesafe.PTable` is the implementation; anything with these two
    methods can be used.
    """

    def perturbation(
        self,
        counts: npt.NDArray[np.int64],
        u: npt.NDArray[np.float64],
        cell_key: npt.NDArray[np.uint32] | None = None,
    ) -> npt.NDArray[np.int64]:
        """Return the perturbation ``v`` of each cell (``counts + v >= 0``).

        ``u`` are the cells' uniforms; ``cell_key`` the cell keys when the
        cell-key scheme is used (sampled ptables index by the key itself).
        """
        ...

    def describe(self) -> Mapping[str, Any]:
        """The public description of the mechanism (name, parameters, privacy figures)."""
        ...


#: Default half-width of the noise on weighted figures, in mean weights.
DEFAULT_WEIGHT_NOISE = 0.5
#: Default smallest protected count with a published standard error.
DEFAULT_SE_MIN_COUNT = 10


@dataclass(frozen=True)
class Protection:
    """The data owner's protection profile.

    Args:
        mechanism: The cell-wise mechanism (e.g. ``dp_geometric(2.0)``), the
            record-level :func:`~tablesafe.mechanisms.drop_add_records`, or
            ``None`` for no perturbation (the data owner's own use only).
        seeds: ``"cellkey"`` (ABS uniforms from cell keys), ``"keyed"`` (keyed
            hashes of each cell's record set; needs ``secret``; the
            recommended scheme) or ``"dynamic"`` (Li & Krenzke's keyed hashes
            of the cell's and its margins' key sums; needs ``secret``; for the
            workbench only: averaging tables defeats it, docs/attacks.md).
        secret: The data owner's secret (at least 16 bytes). With a secret,
            empty cells are perturbed too, from a keyed hash of their
            definition; without one they stay 0 and the stated privacy
            figures are those of that mechanism (:meth:`describe`).
        additivity: ``"aggregate"``, ``"independent"`` or ``"ipf"``.
        weight_noise: Half-width ``s`` of the noise added to each weighted
            figure, in the cell's mean weights (docs/weighted.md); 0 turns it
            off (then integer weights can reveal true counts).
        rounding: How weighted figures, standard errors and intervals are
            rounded (a :class:`Rounding` or its text, e.g. ``"1"``, ``"3sf"``).
        se_min_count: Standard errors and intervals are published only for
            cells whose protected count is at least this (and above the
            largest count the mechanism can make of a true zero).

    Raises:
        ParameterError: for an unknown option, a missing secret or an
            impossible parameter.
    """

    mechanism: CellwiseMechanism | DropAddRecords | DPMarginals | None
    seeds: SeedScheme = SeedScheme.CELLKEY
    secret: bytes | None = None
    additivity: Additivity = Additivity.AGGREGATE
    weight_noise: float = DEFAULT_WEIGHT_NOISE
    rounding: Rounding | str = "1"
    se_min_count: int = DEFAULT_SE_MIN_COUNT

    def __post_init__(self) -> None:
        object.__setattr__(self, "rounding", Rounding.parse(self.rounding).check_owner())
        # Texts are accepted for both options and held as members from here on.
        object.__setattr__(self, "seeds", choice(SeedScheme, self.seeds, "seeds"))
        if self.seeds != SeedScheme.CELLKEY and not self.secret:
            raise ParameterError(f"{self.seeds} seeds need the data owner's secret")
        object.__setattr__(self, "additivity", choice(Additivity, self.additivity, "additivity"))
        check_number("protection.weight_noise", self.weight_noise, "weight_noise")
        check_number("protection.se_min_count", self.se_min_count, "se_min_count")
        if self.fixed_budget:
            if not self.secret:
                raise ParameterError(
                    "dp-marginals draws its measurements' noise from bits keyed by the secret: "
                    "give the data owner's secret"
                )
        elif self.record_level:
            if self.seeds == SeedScheme.CELLKEY:
                raise ParameterError(
                    "record-level drop/add-up-to-q draws its two seeds from keyed hashes: use "
                    "seeds='keyed' with a secret"
                )
        elif self.mechanism is not None and not isinstance(self.mechanism, CellwiseMechanism):
            raise ParameterError(
                "mechanism must be a cell-wise mechanism such as a PTable "
                "(with perturbation() and describe()) or drop_add_records()"
            )

    @property
    def protects(self) -> bool:
        """Whether the counts are protected: ``False`` for no mechanism (exact, the owner's use).

        A table says whether it is protected from this (and from its magnitudes'
        :attr:`~tablesafe.mechanisms._magnitudes.MagnitudeProtection.protects`), never
        from a constant.
        """
        return self.mechanism is not None

    @property
    def fixed_budget(self) -> bool:
        """Whether every table is read from one DP release (``dp-marginals``): no figure spends."""
        return isinstance(self.mechanism, DPMarginals)

    @property
    def record_level(self) -> bool:
        """Whether the mechanism works on records (drop/add-up-to-q) rather than cells."""
        return bool(getattr(self.mechanism, "record_level", False))

    @property
    def perturbs_empty_cells(self) -> bool:
        """Whether cells without records are perturbed (keyed to their definition).

        They are where there is a secret to key their draws to (and under
        Li & Krenzke's dynamic seeds, whose draws hash the margins' key sums);
        otherwise an empty cell stays 0.
        """
        return self.secret is not None

    @functools.cached_property
    def keyed_by_definition(self) -> bool:
        """Whether every figure's noise is keyed to its canonical definition (DP mechanisms).

        DESIGN decision 2: under DP the noise of a figure is a keyed hash of
        its canonical definition, not of its record set: noise that depends on
        which records a cell holds breaks DP's analysis (two definitions of
        one record set would share a draw, which tells an empty difference
        from a non-empty one with certainty). The other mechanisms keep
        record-set consistency (the same records, the same noise).
        """
        mech = self.mechanism
        if not isinstance(mech, CellwiseMechanism) or self.secret is None:
            return False
        return isinstance(getattr(mech, "parameters", {}).get("epsilon"), int | float)

    def uniforms(
        self,
        n: npt.NDArray[np.int64],
        cell_key: npt.NDArray[np.uint32],
        salts: tuple[bytes, ...],
        definitions: Callable[[npt.NDArray[np.bool_]], list[bytes]],
        *,
        where: npt.NDArray[np.bool_] | None = None,
    ) -> list[npt.NDArray[np.float64]]:
        """Per salt, each cell's uniform: the one owner of which draw a cell gets.

        Under cell-key seeds ``(cell_key + 0.5) / 2**32`` (a ``b"count"`` salt;
        other salts are the weight stream's, :mod:`tablesafe.mechanisms._weighted`);
        under keyed seeds a keyed hash of the cell's record set (key sum and
        count); a cell without records, and every cell where the noise is
        :attr:`keyed_by_definition`, from a keyed hash of its canonical
        definition. Dynamic seeds depend on the table around a cell and are
        the builder's (the workbench's) alone.

        Args:
            n: Record counts, any shape.
            cell_key: Cell keys, the same shape.
            salts: One stream per salt (``b"count"``, ``b"weight"``, ...).
            definitions: The canonical definitions (bytes) of the cells of a mask, in
                ``np.nonzero`` order; asked only for the cells that need them.
            where: Compute only these cells (the rest are NaN); default all.
        """
        mask = np.ones(n.shape, dtype=bool) if where is None else where
        if self.keyed_by_definition:
            out = [np.full(n.shape, np.nan) for _ in salts]
            by_definition = mask
        else:
            if self.seeds == SeedScheme.KEYED:
                assert self.secret is not None
                out = [keyed_words(cell_key, n, self.secret, s, where=mask)[0] for s in salts]
            else:
                out = [
                    cell_key_uniforms(cell_key)
                    if s == b"count"
                    else weight_uniforms(cell_key, SeedScheme.CELLKEY, None)
                    for s in salts
                ]
            by_definition = (n == 0) & mask if self.secret is not None else np.zeros_like(mask)
        if by_definition.any():
            assert self.secret is not None
            defs = definitions(by_definition)
            for s, u in zip(salts, out, strict=True):
                u[by_definition] = definition_words(defs, self.secret, s)[:, 0]
        return out

    def inner_counts(
        self,
        n: npt.NDArray[np.int64],
        cell_key: npt.NDArray[np.uint32],
        definitions: Callable[[npt.NDArray[np.bool_]], list[bytes]],
    ) -> npt.NDArray[np.int64]:
        """The protected count of each cell published as an inner cell (1-D arrays).

        The same function of a cell's count, key and definition as the builder
        applies (:class:`~tablesafe.TableBuilder`): the account of published
        figures reads it for record sets no table published (the difference
        of two figures), so its decisions rest on protected counts only.
        Structural zeros are the caller's (they are never perturbed).
        """
        mech = self.mechanism
        if mech is None:
            return n.astype(np.int64)
        if isinstance(mech, DPMarginals):
            raise TypeError("a dp-marginals table is read from its release, not cell by cell")
        if isinstance(mech, DropAddRecords):
            (u,) = self.uniforms(n, cell_key, (b"count",), definitions)
            q = mech.q(n)
            d = np.floor(u * (2 * q + 1)).astype(np.int64) - q
            return np.asarray(n + d, dtype=np.int64)
        (u,) = self.uniforms(n, cell_key, (b"count",), definitions)
        keys = None
        if self.seeds == SeedScheme.CELLKEY:
            by_definition = (n == 0) | self.keyed_by_definition
            keys = np.where(by_definition, np.floor(u * 2.0**32).astype(np.uint32), cell_key)
        v = np.asarray(mech.perturbation(n, u, keys), dtype=np.int64)
        if not self.perturbs_empty_cells:
            v = np.where(n == 0, 0, v)
        return np.asarray(np.maximum(n + v, 0), dtype=np.int64)

    def effective_mechanism(self) -> CellwiseMechanism | DropAddRecords | DPMarginals | None:
        """The mechanism as applied: with row 0 fixed at 0 where empty cells stay 0."""
        mech = self.mechanism
        fix = getattr(mech, "fixing_zero", None)
        if fix is not None and not self.perturbs_empty_cells:
            return fix()  # type: ignore[no-any-return]
        return mech

    @property
    def round(self) -> Rounding:
        """The rounding as a :class:`Rounding`."""
        assert isinstance(self.rounding, Rounding)
        return self.rounding

    def zero_reach(self) -> int:
        """The largest count the mechanism can publish for a cell that holds no record."""
        mech = self.effective_mechanism()
        dist = getattr(mech, "distribution", None)
        if mech is None or self.record_level or dist is None:
            return 0
        return max((int(v) for v, p in dist(0).items() if p > 0), default=0)

    def reach_above(self, m: int) -> int:
        """The most the mechanism can add to a count below ``m`` (0 for no protection).

        A block whose protected count is at least ``m`` plus this holds at least
        ``m`` records, whatever the noise: the account of published figures
        calls a block small below that (:mod:`tablesafe.rules._account`).
        """
        mech = self.effective_mechanism()
        if mech is None or m <= 0:
            return 0
        if isinstance(mech, DropAddRecords):
            return int(mech.q(np.array([m - 1]))[0])
        dist = getattr(mech, "distribution", None)
        if dist is None:
            raise ParameterError("the mechanism states no distribution of its perturbations")
        return max(max(int(v) for v, p in dist(i).items() if p > 0) - i for i in range(m))

    def se_threshold(self) -> int:
        """The smallest protected count whose standard error is published."""
        return max(self.se_min_count, self.zero_reach() + 1)

    def __repr__(self) -> str:
        # The secret never appears in a repr, a log line or an error message.
        # Options as their texts (a member's repr would name its class).
        return (
            f"Protection(mechanism={self.mechanism!r}, seeds={str(self.seeds)!r}, "
            f"secret={'<hidden>' if self.secret else None}, "
            f"additivity={str(self.additivity)!r}, "
            f"weight_noise={self.weight_noise!r}, rounding={str(self.rounding)!r}, "
            f"se_min_count={self.se_min_count!r})"
        )

    def describe(self) -> dict[str, Any]:
        """The public description of the protection."""
        mech = self.effective_mechanism()
        out = dict(mech.describe()) if mech is not None else {"name": "none"}
        if not self.fixed_budget:  # its noise is keyed by the secret, not by seeds
            out["seeds"] = str(self.seeds)
        return out


def mechanism_from_settings(
    settings: ProtectionSettings, resolve: Callable[[str], Path] = Path
) -> CellwiseMechanism | DropAddRecords | DPMarginals | None:
    """The mechanism that protection settings name.

    Args:
        settings: Validated protection settings.
        resolve: Turns a path from the settings into a file path (the site
            configuration resolves relative to its folder).

    Raises:
        ParameterError: for impossible mechanism parameters.
        FormatError: for an unreadable ptable file.
    """
    m = settings.method
    if m == ProtectionMethod.NONE:
        return None
    if m == ProtectionMethod.Q_RECORDS:
        return mechanisms.drop_add_records(rate=settings.rate)
    if m == ProtectionMethod.DP_MARGINALS:
        return settings.marginals.mechanism(settings.epsilon, settings.delta)
    mech: PTable
    if m == ProtectionMethod.DP:
        mech = mechanisms.dp_geometric(settings.epsilon, cap=settings.cap)
    elif m == ProtectionMethod.Q:
        mech = mechanisms.drop_add_q(rate=settings.rate, cap=settings.cap)
    elif m == ProtectionMethod.PRAM:
        mech = mechanisms.pram_shlomo_young()
    elif m == ProtectionMethod.CKM:
        mech = cached_destatis(settings.max_deviation, settings.variance, settings.js)
    else:
        assert settings.ptable_file is not None
        mech = read_ptable(resolve(settings.ptable_file))
    return mech


def protection_from_settings(
    settings: ProtectionSettings,
    *,
    secret: bytes | None = None,
    resolve: Callable[[str], Path] = Path,
) -> Protection:
    """The :class:`Protection` that validated protection settings fix.

    Args:
        settings: Validated protection settings (the site's
            ``[datasets.protection]``, or the CLI's options).
        secret: The secret for dynamic seeds, already read from where the
            settings say (never from the settings themselves).
        resolve: Turns a path from the settings into a file path.

    Raises:
        ParameterError: for impossible parameters or a missing secret.
    """
    return Protection(
        mechanism_from_settings(settings, resolve),
        seeds=settings.seeds,
        secret=secret,
        additivity=settings.additivity,
        weight_noise=settings.weight_noise,
        rounding=Rounding.parse(settings.rounding),
        se_min_count=settings.se_min_count,
    )


def site_protection(dataset: DatasetSettings, site: SiteConfig) -> Protection:
    """The Protection a site configuration fixes for one of its datasets.

    Reads the secret where the configuration says, then defers to
    :func:`protection_from_settings`, the one place that turns protection
    settings into a Protection.

    Raises:
        ConfigError: if the secret cannot be read.
        ParameterError: for impossible mechanism parameters.
    """
    return protection_from_settings(
        dataset.protection, secret=site.secret(dataset), resolve=site.resolve
    )
