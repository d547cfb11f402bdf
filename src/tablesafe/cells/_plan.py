"""The plan of a tabulation: what an engine computes, in one place.

:class:`TabulationPlan` is the engine-neutral form of a bound request
(:meth:`tablesafe.TableRequest.bind`): its dimensions (:class:`DimensionPlan`),
universe, grouping sets, record key, weights, replicate weights and the
continuous variables to sum (:class:`MagnitudePlan`). Every identifier in it
comes from the catalog; every value is a category code the catalog declares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from tablesafe.catalog._catalog import Code, Variable

__all__ = [
    "TOP_K",
    "DimensionPlan",
    "MagnitudePlan",
    "TabulationPlan",
    "replicate_name",
    "with_top",
]

#: How many of a cell's largest contributions engines return.
TOP_K = 3


@dataclass(frozen=True)
class MagnitudePlan:
    """One continuous variable of a tabulation.

    Attributes:
        name: The magnitude's name in the catalog.
        column: Its microdata column.
        weight: The weight column when contributions are ``w x``, else ``None``.
        top: How many largest contributions per cell to return (0: the sum alone).
        replicates: Replicate-weight columns an engine lists beside each
            record's value (:meth:`~tablesafe.engines.Engine.record_values`, for
            the standard errors of quantiles); sums ignore them.
        replicate: For the sums over one replicate weight (the standard errors
            of sums and means): the magnitude and the replicate's position
            (from 0); ``name`` is then :func:`replicate_name`'s. ``None``: the
            sums over the table's own weight.
    """

    name: str
    column: str
    weight: str | None = None
    top: int = TOP_K
    replicates: tuple[str, ...] = ()
    replicate: tuple[str, int] | None = None

    @property
    def variable(self) -> str:
        """The magnitude these sums are of."""
        return self.name if self.replicate is None else self.replicate[0]


def replicate_name(name: str, r: int) -> str:
    """The plan name of magnitude ``name``'s sums over replicate weight ``r`` (from 0).

    ``#`` is outside the catalog's alphabet: no variable has such a name.
    """
    return f"{name}#{r}"


def with_top(plans: Sequence[MagnitudePlan], top: int) -> tuple[MagnitudePlan, ...]:
    """The magnitude plans asking for ``top`` largest contributions per cell (1 to ``TOP_K``)."""
    if not 1 <= top <= TOP_K:
        raise ValueError(f"top must lie in 1..{TOP_K}, not {top}")
    return tuple(replace(m, top=top) for m in plans)


@dataclass(frozen=True)
class DimensionPlan:
    """One dimension of a tabulation: output categories and the source codes of each.

    Attributes:
        name: The requested variable or grouping name.
        label: Its label.
        column: The microdata column it is read from.
        codes: The output category codes, in table order.
        labels: The output category labels.
        members: For each output category, the column's codes it stands for.
    """

    name: str
    label: str
    column: str
    codes: tuple[Code, ...]
    labels: tuple[str, ...]
    members: tuple[tuple[Code, ...], ...]

    @classmethod
    def from_variable(cls, var: Variable, only: Sequence[Code] | None = None) -> DimensionPlan:
        """Build the plan of ``var``, keeping only categories ``only`` if given."""
        codes = var.codes
        wanted = None if only is None else set(only)
        keep = [i for i, c in enumerate(codes) if wanted is None or c in wanted]
        return cls(
            name=var.name,
            label=var.label,
            column=var.column,
            codes=tuple(codes[i] for i in keep),
            labels=tuple(var.categories[i].label for i in keep),
            members=tuple((codes[i],) if var.members is None else var.members[i] for i in keep),
        )

    @property
    def size(self) -> int:
        """Number of categories (without the total)."""
        return len(self.codes)


@dataclass(frozen=True)
class TabulationPlan:
    """What an engine must compute: the engine-neutral form of a bound request.

    Every identifier in it comes from the catalog; every value is a category
    code that the catalog declares. Engines bind codes as parameters.

    Attributes:
        dimensions: The table's dimensions.
        universe: (column, allowed codes of that column) pairs, a conjunction.
        grouping_sets: Which dimensions each requested grouping set keeps
            (positions into ``dimensions``); the first is the inner cells.
        record_key: The record-key column.
        weight: The weight column, or ``None`` when only counts are wanted.
        replicates: Replicate-weight columns to sum (may be empty).
        magnitudes: Continuous variables to sum, with their largest contributions.
        present: (column, missing codes) pairs: only the records that hold a
            value of each column count (not NULL, NaN or a missing code; the
            base of a magnitude with item non-response), a condition the
            universe adds to.
        unit: For a table of another unit than the records' (households):
            its identifier column and the columns it reads; engines count each
            unit once (one record per identifier), ``record_key`` and
            ``weight`` being the unit's. ``None``: the records themselves.
    """

    dimensions: tuple[DimensionPlan, ...]
    universe: tuple[tuple[str, tuple[Code, ...]], ...]
    grouping_sets: tuple[tuple[int, ...], ...]
    record_key: str
    weight: str | None
    replicates: tuple[str, ...] = ()
    magnitudes: tuple[MagnitudePlan, ...] = ()
    present: tuple[tuple[str, tuple[float, ...]], ...] = ()
    unit: tuple[str, tuple[str, ...]] | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the extended cell arrays: one more slot per dimension for its total."""
        return tuple(d.size + 1 for d in self.dimensions)

    def with_top(self, top: int) -> TabulationPlan:
        """This plan asking for the ``top`` largest contributions of each magnitude."""
        return replace(self, magnitudes=with_top(self.magnitudes, top))
