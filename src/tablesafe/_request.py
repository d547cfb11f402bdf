"""Table requests: what a user asks for, validated before any microdata is read.

A :class:`TableRequest` names 1 to 4 dimension variables, a universe (a
conjunction of "variable in these categories" conditions), the statistic and
the margins wanted. It is a frozen value object; methods that change it
return a new request. :meth:`TableRequest.bind` checks it against a
:class:`~tablesafe.Catalog` and compiles it into a :class:`TabulationPlan`,
the engine-neutral description of the query that every engine executes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeGuard

from tablesafe._errors import ParameterError, RequestError, choice
from tablesafe._rounding import Rounding
from tablesafe.catalog._catalog import Catalog, Code, Variable
from tablesafe.catalog._custom import CustomGrouping, extend_catalog, parse_groupings
from tablesafe.catalog._hints import missing_replicates_hint
from tablesafe.catalog._magnitudes import parse_quantile_item, quantile_item
from tablesafe.catalog._units import CountingUnit, Unit
from tablesafe.cells._aggregates import all_grouping_sets
from tablesafe.cells._plan import DimensionPlan, MagnitudePlan, TabulationPlan, replicate_name

__all__ = [
    "ITEM_KINDS",
    "MAX_DIMENSIONS",
    "Item",
    "MarginSpec",
    "Margins",
    "Percent",
    "Statistic",
    "TableRequest",
]

#: The largest number of dimensions a table may have.
MAX_DIMENSIONS = 4


class Statistic(StrEnum):
    """What a table reports: unweighted sample counts, weighted counts, or both.

    A member equals its text (``Statistic.COUNT == "count"``).
    """

    COUNT = "count"
    WEIGHTED = "weighted"
    BOTH = "both"


class Percent(StrEnum):
    """Percentages a table may report, of its weighted counts (of its counts without weights).

    ``row``: each cell as a share of its row's total (the total over the
    columns, the second dimension); ``column``: of its column's total (over
    the rows, the first dimension); ``total``: of the total over rows and
    columns. Layers (third and fourth dimensions) are kept: each layer has its
    own percentages. Asked as ``percent:row`` in ``statistic``; published as
    the columns ``percent_row``, ``percent_column``, ``percent_total``.
    A member equals its text (``Percent.ROW == "row"``).
    """

    ROW = "row"
    COLUMN = "column"
    TOTAL = "total"

    @property
    def column_name(self) -> str:
        """The published column: ``percent_row``."""
        return f"percent_{self.value}"

    def over(self, k: int) -> tuple[int, ...]:
        """The dimensions (positions) the denominator totals over, in a ``k``-way table.

        Raises:
            RequestError: for row percentages of a one-way table (it has no columns).
        """
        if self == Percent.ROW:
            if k < 2:
                raise RequestError(
                    "percent:row needs a column dimension; a one-way table has "
                    "percent:column (each row's share of the total) or percent:total"
                )
            return (1,)
        return (0,) if self == Percent.COLUMN or k < 2 else (0, 1)


#: The kinds of statistics of continuous variables a request may name, with how many
#: variables each takes (``sum:VAR``, ``ratio:VAR:VAR``...). Medians and quantiles are
#: written ``median:VAR`` and ``quantile:VAR:P``. A statistic the registry adds
#: (:func:`tablesafe.statistics.register`) adds its kind here.
ITEM_KINDS: dict[str, int] = {"sum": 1, "mean": 1}


class Item(str):
    """One statistic of continuous variables asked for, parsed once where the request is made.

    Equal to its canonical text, as a :class:`~enum.StrEnum` member is
    (``Item.parse("sum:INCOME") == "sum:INCOME"``), and typed: its kind, its
    variables and (a quantile) its percent are attributes, never split from
    the text again.

    Attributes:
        kind: ``sum``, ``mean``, ``median``, ``quantile`` or a registered kind.
        variables: The continuous variables it is of (one, for all but a
            registered kind that takes more).
        percent: A quantile's percent (50 for a median), else ``None``.
    """

    kind: str
    variables: tuple[str, ...]
    percent: int | None

    def __new__(cls, kind: str, variables: Sequence[str], percent: int | None = None) -> Item:
        variables = tuple(variables)
        if percent is not None:
            kind = "median" if percent == 50 else "quantile"
            text = quantile_item(variables[0], percent)
        else:
            text = ":".join((kind, *variables))
        item = super().__new__(cls, text)
        item.kind, item.variables, item.percent = kind, variables, percent
        return item

    def __reduce__(self) -> tuple[type[Item], tuple[str, tuple[str, ...], int | None]]:
        return (Item, (self.kind, self.variables, self.percent))

    @property
    def variable(self) -> str:
        """Its (first) variable."""
        return self.variables[0]

    @property
    def is_quantile(self) -> bool:
        """Whether it is a median or a quantile."""
        return self.percent is not None

    @classmethod
    def of(cls, text: object) -> Item:
        """The item ``text`` writes (a request's edge: its body, the command line).

        Raises:
            RequestError: for a text that is no item a request may name.
        """
        item = cls.parse(text)
        if item is None:
            raise RequestError(
                f"unknown statistic {text!r}; magnitudes are written sum:VAR or mean:VAR "
                "(medians and quantiles median:VAR or quantile:VAR:P; VAR a continuous "
                "variable of the catalog)"
            )
        return item

    @classmethod
    def parse(cls, text: object) -> Item | None:
        """The item ``text`` writes, or ``None`` for a text that is no known item.

        Raises:
            RequestError: for a quantile whose ``P`` is not a fraction of two decimals.
        """
        if isinstance(text, Item):
            return text
        found = parse_quantile_item(text)
        if found is not None:
            return cls("quantile", (found[0],), found[1])
        if not isinstance(text, str):
            return None
        kind, *names = text.split(":")
        if ITEM_KINDS.get(kind) != len(names) or not all(names):
            return None
        return cls(kind, names)


class Margins(StrEnum):
    """The named margins: every sub-total, inner cells only, or inner cells and the grand total.

    A member equals its text (``Margins.ALL == "all"``).
    """

    ALL = "all"
    NONE = "none"
    TOTAL = "total"


#: A request's margins: one of :class:`Margins` or an explicit list of
#: margins, each a tuple of the dimension names it keeps.
MarginSpec = Margins | tuple[tuple[str, ...], ...]


def _is_list(value: object) -> TypeGuard[Iterable[Any]]:
    """Whether ``value`` is a list-like of items (bytes and mappings are not)."""
    return isinstance(value, Iterable) and not isinstance(value, bytes | Mapping)


@dataclass(frozen=True)
class TableRequest:
    """A validated request for one table.

    Args:
        dimensions: 1 to 4 variable (or grouping) names: rows, columns, layers...
        universe: Variable name -> allowed category codes; a record is in the
            universe when every condition holds. Codes may be given as text
            (they are converted by :meth:`bind`).
        statistic: ``"count"``, ``"weighted"`` or ``"both"``.
        margins: ``"all"``, ``"none"``, ``"total"`` or a sequence of margins,
            each a sequence of the dimension names that margin keeps.
        replicates: Whether to also compute replicate-weight sums (for
            variances); needs a dataset with replicate weights.
        rounding: A rounding of the weighted figures, standard errors and
            intervals applied on top of the site's (so never finer): a base
            such as ``"1000"`` or significant figures such as ``"2sf"``;
            ``None`` for the site's rounding alone.
        groupings: Custom groupings defined for this request
            (:class:`~tablesafe.CustomGrouping` values or their JSON form);
            their names can be used as dimensions and in the universe.
        magnitudes: Sums and means of continuous variables, each
            ``"sum:VAR"`` or ``"mean:VAR"``. They may also be given inside
            ``statistic``, comma-separated (``"count,sum:INCOME"``, or
            ``"mean:HOURS"`` alone, which keeps the counts): they are moved
            here. They are weighted (sums of ``w x``, means over the weighted
            count) when ``statistic`` is ``"weighted"`` or ``"both"``.
        quantiles: Medians and quantiles of continuous variables, each
            ``"median:VAR"`` or ``"quantile:VAR:P"`` (``P`` a fraction with at
            most two decimals; ``quantile:VAR:0.5`` is ``median:VAR``). They
            may also be given inside ``statistic`` or ``magnitudes``: they are
            moved here. Weighted when ``statistic`` is ``"weighted"`` or ``"both"``.
        unit: What the table counts (:class:`~tablesafe.catalog.Unit`: ``person``,
            ``household``...; ABS's summation options), ``None`` for the
            records' own unit. A table of another unit the catalog declares
            counts each unit once, by its own variables, record key and weight.
        percentages: Row, column or total percentages (:class:`Percent`), of
            the weighted counts when ``statistic`` is ``"weighted"`` or
            ``"both"``, else of the counts. They may also be given inside
            ``statistic`` as ``percent:row``: they are moved here (a
            ``statistic`` that names percentages but none of ``count``,
            ``weighted``, ``both`` is weighted). Numerator and
            denominator are the table's own published figures, so the
            denominators' margins must be part of the table.

    Raises:
        RequestError: for an empty, duplicate or too long list of dimensions,
            an empty category list, an unknown statistic or malformed margins.
    """

    dimensions: tuple[str, ...]
    universe: Mapping[str, Sequence[Code]] = field(default_factory=dict)
    # Requests are built from text (HTTP bodies, the command line) and the
    # statistic may carry sums and means ("count,sum:X"): both fields take
    # text, and __post_init__ leaves a member (or the margins' tuple) in them.
    statistic: Statistic | str = Statistic.BOTH
    margins: MarginSpec | str = Margins.ALL
    replicates: bool = False
    rounding: str | None = None
    groupings: tuple[CustomGrouping, ...] = ()
    magnitudes: tuple[Item, ...] = ()
    percentages: tuple[Percent, ...] = ()
    quantiles: tuple[Item, ...] = ()
    unit: Unit | str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "groupings", parse_groupings(self.groupings))
        dims = self.dimensions
        if isinstance(dims, str):
            dims = (dims,)
        if not _is_list(dims):
            raise RequestError(
                f"dimensions must be a variable name or a list of 1 to {MAX_DIMENSIONS} names, "
                f"not {dims!r}"
            )
        dims = tuple(dims)
        if not dims:
            raise RequestError(
                f"a table needs 1 to {MAX_DIMENSIONS} dimension variables; none was given"
            )
        for d in dims:
            if not isinstance(d, str) or not d:
                raise RequestError(f"dimension names must be non-empty strings, not {d!r}")
        if len(dims) > MAX_DIMENSIONS:
            raise RequestError(
                f"a table has at most {MAX_DIMENSIONS} dimensions; {len(dims)} were given "
                f"({', '.join(dims)})"
            )
        dup = sorted({d for d in dims if dims.count(d) > 1})
        if dup:
            raise RequestError(
                f"dimension {dup[0]} is given twice; each variable may be used once per table"
            )
        object.__setattr__(self, "dimensions", dims)

        if not isinstance(self.universe, Mapping):
            raise RequestError("the universe must map variable names to lists of categories")
        universe: dict[str, tuple[Code, ...]] = {}
        for name, codes in self.universe.items():
            if not isinstance(name, str) or not name:
                raise RequestError(f"universe variable names must be strings, not {name!r}")
            if isinstance(codes, str | int):
                codes = (codes,)
            if not _is_list(codes):
                raise RequestError(
                    f"the universe condition on {name} must be a category code or a list of "
                    f"codes, not {codes!r}"
                )
            codes = tuple(codes)
            if not codes:
                raise RequestError(
                    f"the universe condition on {name} has an empty category list; "
                    "give at least one category"
                )
            for c in codes:
                if isinstance(c, bool) or not isinstance(c, int | str):
                    raise RequestError(
                        f"categories of {name} in the universe must be codes (int or str), "
                        f"not {c!r}"
                    )
            universe[name] = codes
        object.__setattr__(self, "universe", _FrozenDict(universe))

        self._split_magnitudes()
        statistic = choice(Statistic, self.statistic, "statistic", RequestError)
        object.__setattr__(self, "statistic", statistic)
        object.__setattr__(self, "margins", self._normalise_margins(self.margins, dims))
        self._check_percentages()
        if self.unit is not None:
            object.__setattr__(self, "unit", choice(Unit, self.unit, "unit", RequestError))
        if not isinstance(self.replicates, bool):
            raise RequestError("replicates must be true or false")
        if self.rounding is not None:
            try:
                object.__setattr__(self, "rounding", str(Rounding.parse(self.rounding)))
            except ParameterError as exc:
                raise RequestError(str(exc)) from None

    def _split_magnitudes(self) -> None:
        """Move ``sum:VAR``/``mean:VAR`` items of ``statistic`` into ``magnitudes``."""
        mags = self.magnitudes
        if isinstance(mags, str):
            mags = tuple(m.strip() for m in mags.split(","))
        if not _is_list(mags):
            raise RequestError(
                f"magnitudes must be a list of 'sum:VAR' or 'mean:VAR' items, not {mags!r}"
            )
        items = list(mags)
        percents = self._listed_percentages()
        base: str = self.statistic
        if isinstance(base, str) and ("," in base or ":" in base):
            parts = [p.strip() for p in base.split(",") if p.strip()]
            bases = [p for p in parts if ":" not in p]
            percents += [p.partition(":")[2] for p in parts if p.startswith("percent:")]
            items = [p for p in parts if ":" in p and not p.startswith("percent:")] + items
            if len(bases) > 1:
                raise RequestError(
                    f"statistic {base!r} names {', '.join(bases)}; give at most one of "
                    f"{', '.join(Statistic)}, plus sum:VAR, mean:VAR or percent:"
                    f"{'|'.join(Percent)} items"
                )
            # Percentages without a base are of the weighted counts (which the
            # table then publishes beside them); sums and means alone keep the counts.
            implied = Statistic.WEIGHTED if percents else Statistic.COUNT
            base = bases[0] if bases else implied
        kinds = [choice(Percent, p, "percentage", RequestError) for p in percents]
        object.__setattr__(self, "percentages", tuple(dict.fromkeys(kinds)))
        out: list[Item] = []
        quantiles = self._listed_quantiles()
        for text in items:
            item = Item.of(text)
            if item.is_quantile:
                quantiles.append(item)
            elif item not in out:
                out.append(item)
        object.__setattr__(self, "statistic", base)
        object.__setattr__(self, "magnitudes", tuple(out))
        object.__setattr__(self, "quantiles", tuple(dict.fromkeys(quantiles)))

    def _listed_quantiles(self) -> list[Item]:
        """The ``quantiles`` field's items in their canonical form (``median:VAR``...)."""
        given: object = self.quantiles
        if isinstance(given, str):
            given = [q.strip() for q in given.split(",") if q.strip()]
        if not _is_list(given):
            raise RequestError(
                f"quantiles must be a list of 'median:VAR' or 'quantile:VAR:P' items, not {given!r}"
            )
        out = []
        for text in given:
            item = Item.parse(text)
            if item is None or not item.is_quantile:
                raise RequestError(
                    f"unknown quantile {text!r}; quantiles are written median:VAR or "
                    "quantile:VAR:P (P a fraction such as 0.9)"
                )
            out.append(item)
        return out

    def _listed_percentages(self) -> list[str]:
        """The ``percentages`` field's items as texts (members are texts)."""
        given: object = self.percentages
        if isinstance(given, str):
            given = [p.strip() for p in given.split(",") if p.strip()]
        if not _is_list(given):
            raise RequestError(f"percentages must be a list of {', '.join(Percent)}, not {given!r}")
        out = []
        for p in given:
            if not isinstance(p, str):
                raise RequestError(f"unknown percentage {p!r}; allowed: {', '.join(Percent)}")
            out.append(p.removeprefix("percent:"))
        return out

    def _check_percentages(self) -> None:
        """Each percentage's denominators are cells of the table (its own published figures).

        Raises:
            RequestError: for row percentages of a one-way table, or margins
                that leave out a denominator.
        """
        if not self.percentages:
            return
        sets = self.grouping_sets()
        for kind in self.percentages:
            over = kind.over(len(self.dimensions))
            for gs in sets:
                needed = tuple(i for i in gs if i not in over)
                if needed not in sets:
                    kept = ", ".join(self.dimensions[i] for i in needed)
                    raise RequestError(
                        f"percent:{kind} divides each cell by a total the table does not "
                        f"hold ({f'the margin {kept}' if kept else 'the grand total'}); "
                        "ask for margins 'all' or add that margin"
                    )

    @staticmethod
    def _normalise_margins(margins: object, dims: tuple[str, ...]) -> MarginSpec:
        if isinstance(margins, str):
            if margins not in tuple(Margins):
                raise RequestError(
                    f"unknown margins {margins!r}; allowed: {', '.join(Margins)}, or a list of "
                    "margins (each a list of dimension names)"
                )
            return Margins(margins)
        if not _is_list(margins):
            raise RequestError(
                f"margins must be 'all', 'none', 'total' or a list of margins, not {margins!r}"
            )
        out = []
        for m in margins:
            if isinstance(m, str):
                m = (m,)
            if not _is_list(m):
                raise RequestError(
                    f"each margin is a list of dimension names (or one name), not {m!r}"
                )
            m = tuple(m)
            for d in m:
                if d not in dims:
                    raise RequestError(
                        f"margin {list(m)} names {d!r}, which is not a dimension of the "
                        f"table; dimensions: {', '.join(dims)}"
                    )
            if len(set(m)) != len(m):
                raise RequestError(f"margin {list(m)} names a dimension twice")
            key = tuple(d for d in dims if d in m)
            if key not in out:
                out.append(key)
        return tuple(out)

    # -- convenience ---------------------------------------------------------

    def with_universe(self, **conditions: Sequence[Code]) -> TableRequest:
        """Return a new request whose universe also has these conditions."""
        universe = dict(self.universe)
        universe.update({k: tuple(v) for k, v in conditions.items()})
        return replace(self, universe=universe)

    def coerced(self, catalog: Catalog) -> TableRequest:
        """The same request with universe codes converted to the catalog's types.

        Raises:
            RequestError: for an unknown variable or category.
        """
        catalog = extend_catalog(catalog, self.groupings)
        universe = {
            name: tuple(dict.fromkeys(catalog.variable(name).coerce(c) for c in codes))
            for name, codes in self.universe.items()
        }
        return replace(self, universe=universe)

    def grouping_sets(self) -> tuple[tuple[int, ...], ...]:
        """The grouping sets of the table as tuples of dimension positions.

        The inner cells (every dimension) always come first.
        """
        k = len(self.dimensions)
        inner = tuple(range(k))
        if self.margins == Margins.ALL:
            sets = list(all_grouping_sets(k))
        elif self.margins == Margins.NONE:
            sets = [inner]
        elif self.margins == Margins.TOTAL:
            sets = [inner, ()]
        else:
            assert isinstance(self.margins, tuple)
            sets = [inner] + [
                tuple(self.dimensions.index(d) for d in m) for m in self.margins if len(m) != k
            ]
        return tuple(dict.fromkeys(sets))

    def bind(self, catalog: Catalog, *, max_dimensions: int = MAX_DIMENSIONS) -> TabulationPlan:
        """Check the request against ``catalog`` and compile it into a plan.

        Args:
            catalog: The catalog of the dataset the table is built from.
            max_dimensions: A lower limit on dimensions set by the data owner.

        Raises:
            RequestError: for an unknown variable or category, two dimensions
                on the same microdata column, a weighted statistic on an
                unweighted dataset, or replicates on a dataset without them.
        """
        if len(self.dimensions) > max_dimensions:
            raise RequestError(
                f"this dataset allows at most {max_dimensions} dimensions; "
                f"{len(self.dimensions)} were given"
            )
        catalog = extend_catalog(catalog, self.groupings)
        variables = self._bind_dimensions(catalog)
        universe, trimmed = self._bind_universe(catalog)
        self._check_weights(catalog)
        mags = self._bind_magnitudes(catalog)
        _trim_to_universe(variables, universe, trimmed)
        dims = tuple(DimensionPlan.from_variable(v, trimmed.get(v.name)) for v in variables)
        source_order = {v.column: v for v in catalog.source_variables}
        counted = self._bind_unit(catalog, [*self.dimensions, *self.universe])
        plan = TabulationPlan(
            dimensions=dims,
            universe=tuple(
                (col, tuple(sorted(codes, key=source_order[col].codes.index)))
                for col, codes in universe.items()
            ),
            grouping_sets=self.grouping_sets(),
            record_key=catalog.record_key,
            weight=catalog.weight if self.statistic != Statistic.COUNT else None,
            replicates=catalog.replicates.columns
            if (self.replicates and catalog.replicates)
            else (),
            magnitudes=mags,
        )
        if counted is None:
            return plan
        columns = dict.fromkeys([*(d.column for d in dims), *(c for c, _ in plan.universe)])
        return replace(
            plan,
            record_key=counted.record_key,
            weight=counted.weight if plan.weight is not None else None,
            unit=(counted.id, tuple(dict.fromkeys([*columns, *counted.columns]))),
        )

    def _bind_unit(self, catalog: Catalog, names: list[str]) -> CountingUnit | None:
        """Step 6 of bind: the unit counted, where it is not the records' own.

        Raises:
            RequestError: for a unit the catalog does not declare, a variable
                that is not the unit's, weights it does not have, replicates,
                sums, means or quantiles (which are of the records).
        """
        if self.unit is None or self.unit == catalog.unit:
            return None
        counted = catalog.units.get(Unit(self.unit))
        if counted is None:
            declared = ", ".join([str(catalog.unit), *map(str, catalog.units)])
            raise RequestError(f"this dataset counts no {self.unit}; its units: {declared}")
        for name in names:
            var = catalog.variable(name)
            source = var.source if var.is_grouping and var.source else var.name
            if source not in counted.variables:
                raise RequestError(
                    f"{name} is not a variable of a {self.unit}: a table of {self.unit}s "
                    f"may use {', '.join(counted.variables)} (or their groupings); ask unit "
                    f"{catalog.unit} for {name}"
                )
        if self.statistic != Statistic.COUNT and counted.weight is None:
            raise RequestError(
                f"this dataset has no {self.unit} weight; a table of {self.unit}s has statistic "
                "'count'"
            )
        if self.replicates or self.magnitudes or self.quantiles:
            raise RequestError(
                f"standard errors, sums, means and quantiles are of {catalog.unit}s here; a "
                f"table of {self.unit}s has counts, weighted counts and percentages"
            )
        return counted

    def _bind_dimensions(self, catalog: Catalog) -> list[Variable]:
        """Step 1 of bind: the dimensions' variables, no two on the same microdata column."""
        variables = [catalog.variable(d) for d in self.dimensions]
        columns = [v.column for v in variables]
        for i, v in enumerate(variables):
            if columns.count(v.column) > 1:
                other = next(
                    w.name for j, w in enumerate(variables) if j != i and w.column == v.column
                )
                raise RequestError(
                    f"dimensions {v.name} and {other} classify the same variable; use one of them"
                )
        return variables

    def _bind_universe(
        self, catalog: Catalog
    ) -> tuple[dict[str, set[Code]], dict[str, tuple[Code, ...]]]:
        """Step 2 of bind: the universe as source codes per column.

        Returns:
            The source codes each restricted column keeps (the intersection
            when several variables restrict one column), and the categories
            of each dimension the universe names directly, in request order.
        """
        universe: dict[str, set[Code]] = {}
        trimmed: dict[str, tuple[Code, ...]] = {}
        for name, raw_codes in self.universe.items():
            var = catalog.variable(name)
            codes = tuple(dict.fromkeys(var.coerce(c) for c in raw_codes))
            source = {s for c in codes for s in var.source_codes(c)}
            if var.column in universe:
                source &= universe[var.column]
            universe[var.column] = source
            if name in self.dimensions:
                trimmed[name] = codes
        return universe, trimmed

    def _check_weights(self, catalog: Catalog) -> None:
        """Step 3 of bind: a weighted statistic or replicates only where the dataset has them."""
        if self.statistic != Statistic.COUNT and catalog.weight is None:
            percent = ",".join(f"percent:{p}" for p in self.percentages)
            raise RequestError(
                f"statistic {str(self.statistic)!r} needs survey weights, but this dataset has "
                f"none; use statistic 'count{',' + percent if percent else ''}'"
            )
        if self.replicates and catalog.replicates is None:
            raise RequestError(
                "this dataset has no replicate weights, so standard errors and intervals "
                "(--se) are unavailable" + missing_replicates_hint()
            )

    def _bind_magnitudes(self, catalog: Catalog) -> tuple[MagnitudePlan, ...]:
        """Step 4 of bind: one plan per magnitude variable asked for, in request order.

        With replicates and weights, each variable also gets one plan per
        replicate weight (its sums over ``w_r x``, named by
        :func:`~tablesafe.cells._magnitude_sums.replicate_name`), for the standard
        errors of sums and means.
        """
        weight = catalog.weight if self.statistic != Statistic.COUNT else None
        names = dict.fromkeys(
            catalog.magnitude(name).name for item in self.magnitudes for name in item.variables
        )
        for item in self.quantiles:
            catalog.magnitude(item.variable)
        plans = [
            MagnitudePlan(name=n, column=catalog.magnitudes[n].column, weight=weight) for n in names
        ]
        if self.replicates and catalog.replicates is not None and weight is not None:
            plans += [
                MagnitudePlan(
                    name=replicate_name(n, r),
                    column=catalog.magnitudes[n].column,
                    weight=column,
                    top=0,
                    replicate=(n, r),
                )
                for n in names
                for r, column in enumerate(catalog.replicates.columns)
            ]
        return tuple(plans)


def _trim_to_universe(
    variables: list[Variable],
    universe: dict[str, set[Code]],
    trimmed: dict[str, tuple[Code, ...]],
) -> None:
    """Step 5 of bind: a dimension restricted through another variable shows what it can hold.

    Adds to ``trimmed`` the categories of each dimension whose column the
    universe restricts through another variable (an upper level, a
    grouping, a custom grouping): those that can hold records of it.
    """
    for v in variables:
        allowed = universe.get(v.column)
        if v.name in trimmed or allowed is None:
            continue
        # A function of the request and the catalog only; an empty universe
        # keeps them all.
        inside = tuple(c for c in v.codes if allowed.intersection(v.source_codes(c)))
        if inside:
            trimmed[v.name] = inside


class _FrozenDict(dict[str, tuple[Code, ...]]):
    """A dict that refuses mutation, so a frozen request stays frozen."""

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a TableRequest's universe cannot be changed; use with_universe()")

    __setitem__ = _refuse  # type: ignore[assignment]
    __delitem__ = _refuse  # type: ignore[assignment]
    update = _refuse  # type: ignore[assignment]
    pop = _refuse  # type: ignore[assignment]
    clear = _refuse  # type: ignore[assignment]
    setdefault = _refuse  # type: ignore[assignment]
    popitem = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=lambda kv: kv[0])))
