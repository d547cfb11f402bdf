"""What the publishing formats read of a protected table.

:class:`~tablesafe.ProtectedTable` imports its writers (JSON-stat, SDMX-CSV,
the workbook) when asked for them; the writers name what they read here
rather than importing the table's module, so no import runs in a circle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from tablesafe._request import Percent
from tablesafe.catalog._magnitudes import read_magnitude_column
from tablesafe.mechanisms._precision import denominator_index

if TYPE_CHECKING:
    import pandas as pd

    from tablesafe._request import TableRequest
    from tablesafe._rounding import Rounding
    from tablesafe.catalog import Catalog
    from tablesafe.cells._plan import DimensionPlan

__all__ = [
    "WITHHELD",
    "Published",
    "estimate_companions",
    "figure_masks",
    "sensitive_flag",
    "unreliable_flag",
]

#: What a base the small-cell rule withholds says where the footnotes have no small-cell legend.
WITHHELD = "withheld by the site's small-cell rule: too few records hold a value"


class Published(Protocol):
    """A protected table as its writers see it (``ProtectedTable`` is one)."""

    @property
    def request(self) -> TableRequest: ...

    @property
    def dimensions(self) -> tuple[DimensionPlan, ...]: ...

    @property
    def computed(self) -> npt.NDArray[np.bool_]: ...

    @property
    def structural_zero(self) -> npt.NDArray[np.bool_]: ...

    @property
    def suppressed(self) -> npt.NDArray[np.bool_] | None: ...

    @property
    def suppressed_display(self) -> str | None: ...

    @property
    def sensitive(self) -> Mapping[str, npt.NDArray[np.bool_]] | None: ...

    @property
    def unreliable(self) -> Mapping[str, npt.NDArray[np.bool_]] | None: ...

    @property
    def suppressed_bases(self) -> Mapping[str, npt.NDArray[np.bool_]] | None: ...

    @property
    def withheld(self) -> npt.NDArray[np.bool_] | None: ...

    @property
    def excludes_withheld(self) -> npt.NDArray[np.bool_] | None: ...

    @property
    def unreliable_display(self) -> str | None: ...

    @property
    def mechanism(self) -> Mapping[str, Any]: ...

    @property
    def protected(self) -> bool: ...

    @property
    def metadata(self) -> Mapping[str, Any]: ...

    @property
    def catalog(self) -> Catalog | None: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def title(self) -> str: ...

    @property
    def universe_label(self) -> str: ...

    @property
    def rounding(self) -> str | None: ...

    @property
    def roundings(self) -> tuple[Rounding, ...]: ...

    def statistics(self) -> dict[str, np.ndarray]: ...

    def shown_statistics(self) -> dict[str, np.ndarray]: ...

    def withheld_figures(self) -> dict[str, npt.NDArray[np.bool_]]: ...

    def mark_legend(self) -> list[str]: ...

    def statistic_labels(self) -> dict[str, str]: ...

    def public_metadata(self) -> dict[str, Any]: ...

    def footnotes(self) -> dict[str, Any]: ...

    def to_frame(
        self, *, labels: bool = False, flags: bool = True, owner: bool = False
    ) -> pd.DataFrame: ...


def sensitive_flag(table: Published, statistic: str) -> tuple[str, npt.NDArray[np.bool_]] | None:
    """The magnitude of a sum's or mean's column and the cells the dominance or p% rule flags.

    ``None`` for any other column, or where the table has no such flags.
    """
    parts = read_magnitude_column(statistic)
    flag = None if parts is None else (table.sensitive or {}).get(parts[1])
    return None if parts is None or flag is None else (parts[1], flag)


def estimate_companions(column: str) -> tuple[str, ...]:
    """The standard error and interval columns of an estimate's column.

    ``weighted`` has ``se``, ``ci_low``, ``ci_high``; any other estimate
    ``X`` has ``X_se``, ``X_ci_low``, ``X_ci_high``.
    """
    if column == "weighted":
        return ("se", "ci_low", "ci_high")
    return (f"{column}_se", f"{column}_ci_low", f"{column}_ci_high")


def unreliable_flag(table: Published, statistic: str) -> npt.NDArray[np.bool_] | None:
    """The cells where the precision rule marks an estimate's column (or its se, interval).

    ``None`` where the rule marks nothing in that column.
    """
    for name, flag in (table.unreliable or {}).items():
        if statistic == name or statistic in estimate_companions(name):
            return flag
    return None


def figure_masks(
    names: list[str] | tuple[str, ...],
    withheld: npt.NDArray[np.bool_],
    over: npt.NDArray[np.bool_] | None,
    magnitudes: frozenset[str] | set[str],
) -> dict[str, npt.NDArray[np.bool_]]:
    """Per statistic, the cells whose figure is withheld (blank, and marked where shown).

    Every statistic of a withheld cell; a percentage whose denominator is
    withheld; a sum, mean or quantile (``magnitudes``) of a total over a
    withheld cell (``over``), which covers the withheld cells' records.
    """
    out = {}
    for name in names:
        mask = withheld.copy()
        if name.startswith("percent_"):
            kind = Percent(name.split("_")[1])
            mask |= withheld[denominator_index(kind, withheld.shape)]
        elif name in magnitudes and over is not None:
            mask |= over
        out[name] = mask
    return out
