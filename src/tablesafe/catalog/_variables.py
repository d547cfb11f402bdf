"""Categories and classifying variables of a catalog: the types the rest of the catalog builds on.

A :class:`Variable` is a classification of records by one microdata column
(or a grouping of another variable's categories); its :class:`Category`
values have codes (:data:`Code`). The catalog (:mod:`tablesafe.catalog._catalog`)
parses them and the hierarchies (:mod:`tablesafe.catalog._hierarchy`) relate them;
both import this module, which imports neither.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tablesafe._errors import RequestError

__all__ = ["Category", "Code", "Variable"]

#: A category code: an integer or a string, as stored in the microdata.
Code = int | str


@dataclass(frozen=True)
class Category:
    """One category of a variable: its code in the microdata and its label."""

    code: Code
    label: str


@dataclass(frozen=True)
class Variable:
    """A classification variable, or a grouping derived from one.

    Attributes:
        name: The name used in requests (and, for a plain variable, the column).
        label: A human-readable label.
        categories: The ordered categories.
        column: The microdata column the variable is read from.
        members: For a grouping, the source codes each category stands for,
            in the order of ``categories``; ``None`` for a plain variable.
        source: For a grouping, the name of the variable it groups.
    """

    name: str
    label: str
    categories: tuple[Category, ...]
    column: str
    members: tuple[tuple[Code, ...], ...] | None = None
    source: str | None = None

    @property
    def codes(self) -> tuple[Code, ...]:
        """The category codes, in order."""
        # Cached: asked for once per category when a request is bound (a
        # 350-area table asked it 14,600 times per request, 0.12 s).
        cache = self.__dict__.get("_codes_cache")
        if cache is None:
            cache = tuple(c.code for c in self.categories)
            object.__setattr__(self, "_codes_cache", cache)
        return cache  # type: ignore[no-any-return]

    @property
    def is_grouping(self) -> bool:
        """Whether this is a grouping of another variable."""
        return self.members is not None

    @property
    def code_type(self) -> type:
        """``int`` or ``str``: the type of this variable's codes."""
        return type(self.categories[0].code)

    def index_of(self, code: Code) -> int:
        """Return the position of ``code`` among the categories.

        Raises:
            RequestError: if the code is not a category of this variable.
        """
        try:
            return self._index[code]
        except KeyError:
            raise RequestError(
                f"unknown category {code!r} of variable {self.name}; allowed: "
                f"{_show_codes(self.codes)}"
            ) from None

    def coerce(self, raw: object) -> Code:
        """Convert a code given as text (command line, query string) to this variable's type.

        Raises:
            RequestError: if the value is not one of the categories.
        """
        if isinstance(raw, bool):
            raise RequestError(f"category of {self.name} must be a code, not a boolean")
        if self.code_type is int and isinstance(raw, str):
            text = raw.strip()
            if re.fullmatch(r"[+-]?\d+", text):
                raw = int(text)
        elif self.code_type is str and isinstance(raw, int):
            raw = str(raw)
        elif self.code_type is str and isinstance(raw, str):
            raw = raw.strip()
        if not isinstance(raw, int | str) or raw not in self._index:
            raise RequestError(
                f"unknown category {raw!r} of variable {self.name}; allowed: "
                f"{_show_codes(self.codes)}"
            )
        return raw

    def source_codes(self, code: Code) -> tuple[Code, ...]:
        """The codes of the source column that category ``code`` stands for."""
        i = self.index_of(code)
        if self.members is None:
            return (self.categories[i].code,)
        return self.members[i]

    @property
    def _index(self) -> dict[Code, int]:
        cache = self.__dict__.get("_index_cache")
        if cache is None:
            cache = {c.code: i for i, c in enumerate(self.categories)}
            object.__setattr__(self, "_index_cache", cache)
        return cache


def _show_codes(codes: Sequence[Code], limit: int = 30) -> str:
    shown = ", ".join(repr(c) if isinstance(c, str) else str(c) for c in codes[:limit])
    if len(codes) > limit:
        shown += f", ... ({len(codes)} in all)"
    return shown
