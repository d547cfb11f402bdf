"""Protection mechanisms.

Cell-wise mechanisms are perturbation tables (:class:`tablesafe.PTable`) built
by the constructors in ``_cellwise``; table-level mechanisms (cyclic
perturbation, resampling) act on a whole table with an explicit Generator.
Each private module owns its ``__all__``; this package re-exports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tablesafe._lazy import attach

if TYPE_CHECKING:
    from tablesafe.mechanisms._cellwise import (
        PRAM_LARGE,
        PRAM_SMALL,
        destatis,
        dp_geometric,
        drop_add_q,
        geometric_probabilities,
        invariant_matrix,
        pram_matrices,
        pram_shlomo_young,
    )
    from tablesafe.mechanisms._cyclic import (
        CyclicPosterior,
        CyclicResult,
        cycle_chances,
        cycle_set,
        cyclic_perturb,
        cyclic_posterior,
    )
    from tablesafe.mechanisms._records import DropAddRecords, drop_add_records
    from tablesafe.mechanisms._resampling import (
        PAPER_TABLE_1,
        ResamplingResult,
        binomial_resample,
        bootstrap_acceptance,
        exact_disclosure_probability,
        expected_binomial_draws,
        expected_bootstrap_tables,
        heer_bootstrap,
        optimal_m,
        quality_interval,
        resampling_disclosure_probability,
    )

#: Public name -> defining module (the modules' own ``__all__``; a test checks).
_EXPORTS = {
    "CyclicPosterior": "tablesafe.mechanisms._cyclic",
    "CyclicResult": "tablesafe.mechanisms._cyclic",
    "DropAddRecords": "tablesafe.mechanisms._records",
    "PAPER_TABLE_1": "tablesafe.mechanisms._resampling",
    "PRAM_LARGE": "tablesafe.mechanisms._cellwise",
    "PRAM_SMALL": "tablesafe.mechanisms._cellwise",
    "ResamplingResult": "tablesafe.mechanisms._resampling",
    "binomial_resample": "tablesafe.mechanisms._resampling",
    "bootstrap_acceptance": "tablesafe.mechanisms._resampling",
    "cycle_chances": "tablesafe.mechanisms._cyclic",
    "cycle_set": "tablesafe.mechanisms._cyclic",
    "cyclic_perturb": "tablesafe.mechanisms._cyclic",
    "cyclic_posterior": "tablesafe.mechanisms._cyclic",
    "destatis": "tablesafe.mechanisms._cellwise",
    "dp_geometric": "tablesafe.mechanisms._cellwise",
    "drop_add_q": "tablesafe.mechanisms._cellwise",
    "drop_add_records": "tablesafe.mechanisms._records",
    "exact_disclosure_probability": "tablesafe.mechanisms._resampling",
    "resampling_disclosure_probability": "tablesafe.mechanisms._resampling",
    "expected_binomial_draws": "tablesafe.mechanisms._resampling",
    "expected_bootstrap_tables": "tablesafe.mechanisms._resampling",
    "geometric_probabilities": "tablesafe.mechanisms._cellwise",
    "heer_bootstrap": "tablesafe.mechanisms._resampling",
    "invariant_matrix": "tablesafe.mechanisms._cellwise",
    "optimal_m": "tablesafe.mechanisms._resampling",
    "pram_matrices": "tablesafe.mechanisms._cellwise",
    "pram_shlomo_young": "tablesafe.mechanisms._cellwise",
    "quality_interval": "tablesafe.mechanisms._resampling",
}

__getattr__, __dir__ = attach(__name__, _EXPORTS)

__all__ = [
    "PAPER_TABLE_1",
    "PRAM_LARGE",
    "PRAM_SMALL",
    "CyclicPosterior",
    "CyclicResult",
    "DropAddRecords",
    "ResamplingResult",
    "binomial_resample",
    "bootstrap_acceptance",
    "cycle_chances",
    "cycle_set",
    "cyclic_perturb",
    "cyclic_posterior",
    "destatis",
    "dp_geometric",
    "drop_add_q",
    "drop_add_records",
    "exact_disclosure_probability",
    "expected_binomial_draws",
    "expected_bootstrap_tables",
    "geometric_probabilities",
    "heer_bootstrap",
    "invariant_matrix",
    "optimal_m",
    "pram_matrices",
    "pram_shlomo_young",
    "quality_interval",
    "resampling_disclosure_probability",
]
