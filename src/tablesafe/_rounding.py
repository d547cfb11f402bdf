"""How weighted figures, sums, means, standard errors and intervals are rounded.

:class:`Rounding` is a small value type shared by the request (a user may ask
for a coarser rounding), the protection (the site's rounding) and the
outputs; it depends on nothing else in tablesafe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ParameterError
from tablesafe._protection_limits import RANGES

__all__ = ["Rounding"]


@dataclass(frozen=True)
class Rounding:
    """How weighted figures, standard errors and intervals are rounded.

    Either to a ``base`` (the nearest multiple of it: 1 for whole units,
    1000 for thousands, 0.1 for one decimal) or to ``digits`` significant
    figures. Written as text in settings, the CLI and the API: ``"1"``,
    ``"1000"``, ``"0.5"`` for a base, ``"3sf"`` for three significant
    figures. Ties round to even; rounding is exact for bases that are
    integers or powers of ten.

    A request may ask for any positive base (one finer than the site's changes
    nothing); the owner's roundings are held to ``RANGES["rounding.base"]``
    (:meth:`check_owner`).

    Raises:
        ParameterError: for a base that is not a positive finite number or
            a number of digits outside 1..15.
    """

    base: float | None = 1.0
    digits: int | None = None

    def __post_init__(self) -> None:
        if (self.base is None) == (self.digits is None):
            raise ParameterError("a rounding has either a base or a number of significant digits")
        if self.base is not None and not (
            isinstance(self.base, int | float) and math.isfinite(self.base) and self.base > 0
        ):
            raise ParameterError(
                f"rounding base must be a positive finite number (e.g. 1, 10, 0.1), not "
                f"{self.base!r}"
            )
        if self.digits is not None:
            RANGES["rounding.digits"].check(self.digits, "significant digits")

    def check_owner(self, name: str = "rounding") -> Rounding:
        """This rounding, as a site's: a base within ``RANGES["rounding.base"]``.

        Raises:
            ParameterError: naming ``name`` and the range.
        """
        if self.base is not None:
            RANGES["rounding.base"].check(self.base, f"{name} base")
        return self

    @classmethod
    def parse(cls, text: str | float | Rounding) -> Rounding:
        """Read ``"1"``, ``"1000"``, ``"0.1"`` (a base) or ``"3sf"`` (significant figures)."""
        if isinstance(text, Rounding):
            return text
        if isinstance(text, int | float) and not isinstance(text, bool):
            return cls(base=float(text))
        if not isinstance(text, str):
            raise ParameterError(f"rounding must be text such as '1' or '3sf', not {text!r}")
        t = text.strip().lower()
        allowed = "a positive base such as '1', '1000' or '0.1', or significant figures as '3sf'"
        if t.endswith("sf"):
            try:
                digits = int(t[:-2])
            except ValueError:
                raise ParameterError(f"unknown rounding {text!r}; give {allowed}") from None
            return cls(base=None, digits=digits)
        try:
            base = float(t)
        except ValueError:
            raise ParameterError(f"unknown rounding {text!r}; give {allowed}") from None
        return cls(base=base)

    def __str__(self) -> str:
        if self.digits is not None:
            return f"{self.digits}sf"
        assert self.base is not None
        return f"{self.base:g}"

    @property
    def whole(self) -> bool:
        """Whether every rounded value is a whole number (a base that is a positive integer)."""
        return self.base is not None and float(self.base).is_integer()

    def describe(self) -> str:
        """Plain words for footnotes and metadata."""
        if self.digits is not None:
            return f"rounded to {self.digits} significant figures"
        return "rounded to whole units" if self.base == 1 else f"rounded to a multiple of {self}"

    def apply(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Round ``values`` (NaN stays NaN); the result is the nearest double to the decimal."""
        x = np.asarray(values, dtype=np.float64)
        if self.base is not None:
            base = float(self.base)
            if base.is_integer():
                return np.rint(x / base) * base
            # A decimal base such as 0.1 or 0.25: divide the rounded integer
            # by a power of ten, so that the result prints as the decimal.
            decimals = _decimals(base)
            scale = 10.0**decimals
            step = round(base * scale)
            if step == 0 or abs(step - base * scale) > 1e-9 * base * scale:
                # Not a decimal of at most 15 places (1e-300, 1e-20): the plain
                # multiple, but the value itself where that moves it by no more
                # than doubles resolve (or x / base overflows).
                with np.errstate(over="ignore", invalid="ignore"):
                    q = np.rint(x / base) * base
                    keep = ~np.isfinite(q) | (np.abs(q - x) <= 2 * np.spacing(np.abs(x)))
                return np.asarray(np.where(keep, x, q), dtype=np.float64)
            k = np.rint(x / base) * step
            return np.asarray(k / scale, dtype=np.float64)
        assert self.digits is not None
        with np.errstate(divide="ignore", invalid="ignore"):
            mag = np.floor(np.log10(np.abs(x)))
        mag = np.where(np.isfinite(mag), mag, 0.0)
        dec = self.digits - 1 - mag
        up = dec >= 0
        pos = np.where(up, dec, 0.0)
        neg = np.where(up, 0.0, -dec)
        out = np.where(
            up,
            np.rint(x * 10.0**pos) / 10.0**pos,
            np.rint(x / 10.0**neg) * 10.0**neg,
        )
        return np.asarray(out, dtype=np.float64)


def _decimals(base: float) -> int:
    for d in range(16):
        if abs(base * 10**d - round(base * 10**d)) < 1e-9 * max(1.0, base * 10**d):
            return d
    return 15
