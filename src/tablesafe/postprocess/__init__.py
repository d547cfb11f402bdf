"""Post-processing protected tables into releasable inner cells (Langsrud 2019).

Design matrices (z = X^T y), Methods A, B and C, least absolute deviation,
the log-linear refit, Laplace noise on margins, suppressed cells as
decimals, and whole numbers / synthetic microdata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tablesafe._lazy import attach

if TYPE_CHECKING:
    from tablesafe.postprocess._design import DesignMatrix, all_margins, design_matrix
    from tablesafe.postprocess._loglinear import laplace_margins, loglinear_refit
    from tablesafe.postprocess._methods import (
        least_absolute_deviation,
        method_a,
        method_b,
        method_c,
    )
    from tablesafe.postprocess._rounding import (
        multinomial_round,
        multinomial_sample,
        stochastic_round,
        synthetic_microdata,
    )
    from tablesafe.postprocess._suppressed import estimate_suppressed

_EXPORTS = {
    "DesignMatrix": "tablesafe.postprocess._design",
    "all_margins": "tablesafe.postprocess._design",
    "design_matrix": "tablesafe.postprocess._design",
    "estimate_suppressed": "tablesafe.postprocess._suppressed",
    "laplace_margins": "tablesafe.postprocess._loglinear",
    "least_absolute_deviation": "tablesafe.postprocess._methods",
    "loglinear_refit": "tablesafe.postprocess._loglinear",
    "method_a": "tablesafe.postprocess._methods",
    "method_b": "tablesafe.postprocess._methods",
    "method_c": "tablesafe.postprocess._methods",
    "multinomial_round": "tablesafe.postprocess._rounding",
    "multinomial_sample": "tablesafe.postprocess._rounding",
    "stochastic_round": "tablesafe.postprocess._rounding",
    "synthetic_microdata": "tablesafe.postprocess._rounding",
}

__getattr__, __dir__ = attach(__name__, _EXPORTS)

__all__ = [
    "DesignMatrix",
    "all_margins",
    "design_matrix",
    "estimate_suppressed",
    "laplace_margins",
    "least_absolute_deviation",
    "loglinear_refit",
    "method_a",
    "method_b",
    "method_c",
    "multinomial_round",
    "multinomial_sample",
    "stochastic_round",
    "synthetic_microdata",
]
