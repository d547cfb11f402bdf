"""The JSON bodies of the HTTP API, as pydantic models: what a table request may hold.

:class:`TableBody` is a table request as JSON; :meth:`TableBody.to_request`
turns it into a :class:`~tablesafe.TableRequest`. The application
(:mod:`tablesafe.server._app`), jobs, the agent interface
(:mod:`tablesafe.server._mcp`) and the cumulative audit
(:mod:`tablesafe.attacks._reconstruct._cumulative`) all read bodies with it, and
:func:`invalid_body` words what is wrong with one for all of them.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any

import pydantic
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictInt,
    StrictStr,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from tablesafe._errors import RequestError, UserError
from tablesafe._request import Item, Margins, Percent, Statistic, TableRequest
from tablesafe.catalog._custom import parse_groupings
from tablesafe.catalog._units import Unit

__all__ = [
    "GroupBody",
    "GroupingBody",
    "TableBody",
    "ValidationError",
    "allowed_fields",
    "invalid_body",
    "parse_body",
]

# Strict: JSON true or 1.0 is not category 1 (pydantic's lax mode would take them as 1).
Code = (
    Annotated[StrictInt, Field(ge=-(2**62), le=2**62)] | Annotated[StrictStr, Field(max_length=64)]
)


class GroupBody(BaseModel):
    """One group of a custom grouping: its code, label and the categories it merges."""

    model_config = ConfigDict(extra="forbid")

    code: Annotated[str, Field(min_length=1, max_length=40)]
    label: Annotated[str, Field(max_length=200)] | None = None
    members: list[Code] = Field(..., max_length=1000, description="Categories merged.")


class GroupingBody(BaseModel):
    """A custom grouping: categories of a variable merged into named groups."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=64)]
    variable: Annotated[str, Field(min_length=1, max_length=64)]
    label: Annotated[str, Field(max_length=200)] | None = None
    groups: list[GroupBody] = Field(..., max_length=200)
    other: Annotated[str, Field(max_length=200)] | None = Field(
        None, description="Label of an 'other' group collecting the categories not named."
    )


def _named_margins(value: object) -> Margins:
    """One of :class:`~tablesafe._request.Margins`, from its text.

    A plain validator rather than the enum itself: the API's schema then lists
    the texts inline, as it always has, with no definition named after a
    Python class; the error is the one pydantic gives for a wrong choice.
    """
    if isinstance(value, str) and value in tuple(Margins):
        return Margins(value)
    *first, last = (repr(str(m)) for m in Margins)
    raise PydanticCustomError(
        "enum", "Input should be {expected}", {"expected": f"{', '.join(first)} or {last}"}
    )


def _counted_unit(value: object) -> Unit:
    """One of :class:`~tablesafe.catalog.Unit`, from its text (as :func:`_named_margins`)."""
    if isinstance(value, str) and value in tuple(Unit):
        return Unit(value)
    *first, last = (repr(str(u)) for u in Unit)
    raise PydanticCustomError(
        "enum", "Input should be {expected}", {"expected": f"{', '.join(first)} or {last}"}
    )


class TableBody(BaseModel):
    """A table request as JSON."""

    model_config = ConfigDict(extra="forbid")

    dimensions: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        ..., min_length=1, max_length=4, description="Rows, columns, layers: 1 to 4 variables."
    )
    universe: dict[Annotated[str, Field(max_length=64)], list[Code]] = Field(
        default_factory=dict,
        max_length=20,
        description="Variable -> allowed category codes (combined with 'and').",
    )
    statistic: Annotated[
        str,
        Field(
            max_length=400,
            pattern=rf"^({'|'.join(Statistic)})?"
            rf"(,?((sum|mean|median):[A-Za-z][A-Za-z0-9_]{{0,62}}"
            rf"|quantile:[A-Za-z][A-Za-z0-9_]{{0,62}}:0?\.[0-9]{{1,2}}"
            rf"|percent:({'|'.join(Percent)})))*$",
        ),
    ] = Field(
        "both",
        description="count, weighted or both (unweighted counts, weighted counts, or both), "
        "optionally followed by sums, means, medians and quantiles of continuous variables "
        "and percentages: 'count,sum:INCOME', 'weighted,median:INCOME,quantile:INCOME:0.9', "
        "'weighted,percent:row' (percent:row, percent:column or percent:total, of the weighted "
        "counts; of the counts with 'count').",
    )
    magnitudes: list[Annotated[str, Field(max_length=70)]] = Field(
        default_factory=list,
        max_length=10,
        description="Sums, means, medians and quantiles of continuous variables: 'sum:VAR', "
        "'mean:VAR', 'median:VAR' or 'quantile:VAR:P' (P a fraction such as 0.9; weighted "
        "when the statistic is weighted or both).",
    )
    # Typed str, not Margins: FastAPI would add an enum class to the API's schema.
    margins: Annotated[
        str,
        PlainValidator(_named_margins),
        WithJsonSchema({"enum": [str(m) for m in Margins], "title": "Margins", "type": "string"}),
    ] = Field(Margins.ALL, description="Margins to include.")
    rounding: Annotated[str, Field(max_length=16)] | None = Field(
        None,
        description="A coarser rounding of the weighted figures, applied on top of the "
        "site's: a base such as '1000' or significant figures such as '2sf'.",
    )
    groupings: list[GroupingBody] = Field(
        default_factory=list,
        max_length=10,
        description="Custom groupings: new names usable in dimensions and universe.",
    )
    # Typed str, not Unit: FastAPI would add an enum class to the API's schema.
    unit: (
        Annotated[
            str,
            PlainValidator(_counted_unit),
            WithJsonSchema({"enum": [str(u) for u in Unit], "title": "Unit", "type": "string"}),
        ]
        | None
    ) = Field(
        None,
        description="What the table counts: person, family, household or dwelling, among the "
        "units the dataset declares (default: its records' own); a table of households counts "
        "each household once, by its own variables.",
    )
    se: bool = Field(
        False,
        description="Add standard errors and 95% confidence intervals of the weighted "
        "estimates (weighted counts, percentages, means, sums), from the dataset's replicate "
        "weights and the protection's own variance.",
    )

    def to_request(self) -> TableRequest:
        """The validated :class:`~tablesafe.TableRequest`."""
        for name, codes in self.universe.items():
            if len(codes) > 1000:
                raise RequestError(
                    f"the universe condition on {name} lists {len(codes)} categories; at most "
                    "1000 are allowed"
                )
        return TableRequest(
            tuple(self.dimensions),
            universe={k: tuple(v) for k, v in self.universe.items()},
            statistic=self.statistic,
            magnitudes=tuple(Item.of(m) for m in self.magnitudes),
            margins=self.margins,
            replicates=self.se,
            rounding=self.rounding,
            unit=self.unit,
            groupings=parse_groupings(
                {
                    **g.model_dump(exclude_none=True, exclude={"groups"}),
                    "groups": [
                        {"code": x.code, "label": x.label or x.code, "members": x.members}
                        for x in g.groups
                    ],
                }
                for g in self.groupings
            ),
        )


def _nested_model(annotation: object) -> type[BaseModel] | None:
    """The body model a field's annotation holds (``list[GroupBody]`` -> GroupBody), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def allowed_fields(loc: Sequence[str | int], model: type[BaseModel] = TableBody) -> list[str]:
    """The fields a body may hold where a validation error points (its ``loc``).

    Read from the models themselves, so that the message of an unknown field
    names every field the API takes and no other: ``("body", "colour")`` gives
    the table body's fields, ``("body", "groupings", 0, "x")`` a grouping's.

    Args:
        loc: The error's location: ``"body"``, then field names and list
            positions, the unknown field last.
        model: The model the location starts from.
    """
    for part in loc[:-1]:
        if isinstance(part, str) and part in model.model_fields:
            inner = _nested_model(model.model_fields[part].annotation)
            if inner is not None:
                model = inner
    return list(model.model_fields)


def invalid_body(errors: Iterable[Mapping[str, Any]], *, also_allowed: tuple[str, ...] = ()) -> str:
    """What is wrong with a table request's JSON, from pydantic's errors (at most 5 named).

    The one wording of a 422 ``ValidationError``, whichever door the body came
    through: the HTTP API (FastAPI's errors, located under ``body``) or the
    agent interface (the tool's arguments).

    Args:
        errors: pydantic's error dicts (``ValidationError.errors()``).
        also_allowed: Fields the door accepts beside the body's (the agent
            interface's ``dataset``), named where an unknown field is.
    """
    parts = []
    for err in list(errors)[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            loc = tuple(err.get("loc", ()))
            top = len([p for p in loc if p != "body"]) == 1
            names = [*also_allowed, *allowed_fields(loc)] if top else allowed_fields(loc)
            msg = "unknown field; allowed: " + ", ".join(names)
        elif err.get("type") == "json_invalid":
            where, msg = "body", f"not valid JSON (at character {err.get('loc', ('', 0))[-1]})"
        elif err.get("type") == "string_pattern_mismatch" and where == "statistic":
            *others, last = Statistic
            msg = (
                f"unknown statistic {err.get('input')!r}; allowed: {', '.join(others)} or {last}, "
                "optionally followed by sum:VAR, mean:VAR or percent:row, percent:column, "
                "percent:total items, comma-separated (e.g. 'count,sum:INCOME', "
                "'weighted,percent:row')"
            )
        parts.append(f"{where}: {msg}")
    return "invalid request: " + "; ".join(parts)


class ValidationError(UserError):
    """A table request's JSON that does not fit :class:`TableBody` (HTTP 422, ``ValidationError``).

    The HTTP API's framework raises its own for a body; a door that reads
    JSON itself (the agent interface's tool arguments) raises this one, with
    the same message (:func:`invalid_body`).
    """

    status_code = 422


def parse_body(data: object, *, also_allowed: tuple[str, ...] = ()) -> TableBody:
    """A table request's JSON (already parsed) as a :class:`TableBody`.

    Args:
        data: The JSON value.
        also_allowed: Fields the door accepts beside the body's (named in the message).

    Raises:
        ValidationError: for a value that does not fit, saying where and what is allowed.
    """
    try:
        return TableBody.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ValidationError(invalid_body(exc.errors(), also_allowed=also_allowed)) from None
