"""The simulation study of Shlomo, Krenzke & Li (2019), seed 000 Section 3.4.

Two sets of 7 x 7 tables (independent attributes, Const = 0.02; dependent,
Const = 0.2), 500 replications each:

1. population counts ``Poisson(mu_ij)``, ``mu_ij = exp(eta + alpha_i + beta_j
   + Const * gamma_ij)``, ``eta = 6.5``, with ``alpha_i, beta_j, gamma_ij``
   drawn afresh for every replication from Uniform(-1, 1);
2. survey weights Uniform(20, 40) per cell; sample counts
   ``round(population / weight)``; final weights ``population / sample``;
3. DP (``dp_geometric(2, cap=7)``), PRAM (Shlomo & Young's matrices made
   invariant for the table, ``t M* = t``) and Q (``drop_add_q(0.01, 7)``) on
   the sample counts; weighted counts adjusted by the overall mean weight
   ("Avg", eq. 4) or the cell's mean weight ("Avg cell", eq. 5).

**The reading of the parameters.** The paper prints "Uniform(0.5,0.5)" and
does not say on which scale mu lies. The log scale with Uniform(-1, 1),
redrawn in every replication, is the reading that gives what the paper
reports: a population of about 44,000 (e^6.5 * E[e^U]^2 * 49 = 665.1 *
1.1752^2 * 49 = 45,000), a sample of about 1,530 (E[1/w] = ln 2 / 20) with
a mean cell of 31, and the paper's "standard errors" of the totals (573 and
21.7) as the standard errors of the mean over 500 replications (SD / sqrt
500), which require the effects to vary between replications. Uniform(-0.5,
0.5) gives 35,000; a linear scale gives about 350.

Measures (averaged over replications): percent of cells perturbed and RM
(Table 4, on the weighted counts with "Avg"); the mean and standard error
of the table totals, the percent relative absolute difference of the
total, ``100 |total_b - total_a| / total_a`` (Table 5 compares overall
totals), and the Hellinger distance of the cells (Table 5).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ParameterError
from tablesafe._random import resolve_generator
from tablesafe.experiments._population import population
from tablesafe.experiments._pram_readings import reading_method
from tablesafe.mechanisms import dp_geometric, drop_add_q
from tablesafe.metrics import (
    chi_square_independence,
    entropy_risk,
    hellinger_distance,
    percent_perturbed,
)

__all__ = ["PAPER_TABLE_4", "PAPER_TABLE_5", "Shlomo2019", "run_shlomo2019"]

#: Table 4 of seed 000: percent perturbed and RM, independent and dependent tables.
PAPER_TABLE_4: dict[str, dict[str, float]] = {
    "DP": {"pp_ind": 23.8, "pp_dep": 24.5, "rm_ind": 0.9891, "rm_dep": 0.9892},
    "PRAM": {"pp_ind": 27.7, "pp_dep": 27.7, "rm_ind": 0.9870, "rm_dep": 0.9870},
    "Q": {"pp_ind": 67.1, "pp_dep": 66.8, "rm_ind": 0.9849, "rm_dep": 0.9751},
}

#: Table 5 of seed 000: (mean, standard error, percent RAD, average HD) per row.
PAPER_TABLE_5: dict[str, dict[str, tuple[float, float, float | None, float | None]]] = {
    "dependent": {
        "Sample Original": (1531.1, 21.7, None, None),
        "Sample DP": (1531.3, 21.7, 0.245, 0.352),
        "Sample PRAM": (1531.1, 21.6, 0.276, 0.404),
        "Sample Q": (1531.5, 21.6, 0.346, 0.491),
        "Weighted Original": (44164.7, 573.0, None, None),
        "Weighted DP Avg": (44168.8, 573.2, 0.253, 1.931),
        "Weighted PRAM Avg": (44164.6, 572.8, 0.285, 2.224),
        "Weighted PRAM Avg cell": (44163.7, 572.8, 0.290, 2.245),
        "Weighted Q Avg": (44176.8, 573.0, 0.358, 2.696),
        "Weighted Q Avg cell": (44177.0, 573.0, 0.361, 2.739),
    },
    "independent": {
        "Sample Original": (1522.3, 21.4, None, None),
        "Sample DP": (1522.1, 21.4, 0.245, 0.350),
        "Sample PRAM": (1522.3, 21.4, 0.289, 0.401),
        "Sample Q": (1522.5, 21.4, 0.337, 0.491),
        "Weighted Original": (43921.2, 567.3, None, None),
        "Weighted DP Avg": (43916.0, 567.5, 0.253, 1.920),
        "Weighted PRAM Avg": (43922.1, 567.1, 0.297, 2.206),
        "Weighted PRAM Avg cell": (43921.8, 567.1, 0.307, 2.232),
        "Weighted Q Avg": (43927.2, 567.6, 0.346, 2.697),
        "Weighted Q Avg cell": (43925.2, 567.6, 0.357, 2.742),
    },
}


@dataclass(frozen=True)
class Shlomo2019:
    """Results of the simulation study.

    Attributes:
        reps: Replications per table type.
        seed: The seed used.
        table4: Method -> measure -> value (percent perturbed, RM).
        table5: Table type -> row -> (mean, standard error, percent RAD, HD).
        chi_square: Table type -> method -> list of (statistic, p-value) per replication.
        pram: The reading of PRAM used (``tablesafe.experiments._pram_readings``).
        pram_alpha: Its weight of M* against the identity.
    """

    reps: int
    seed: int | None
    table4: dict[str, dict[str, float]]
    table5: dict[str, dict[str, tuple[float, float, float | None, float | None]]]
    chi_square: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)
    pram: str = "values"
    pram_alpha: float = 1.0

    def as_dict(self) -> dict[str, Any]:
        """Every number, with the paper's beside it."""
        return {
            "reps": self.reps,
            "seed": self.seed,
            "pram": {"reading": self.pram, "alpha": self.pram_alpha},
            "table4": {"ours": self.table4, "paper": PAPER_TABLE_4},
            "table5": {"ours": self.table5, "paper": PAPER_TABLE_5},
        }


def _methods(pram: str, alpha: float) -> dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]]:
    dp = dp_geometric(2.0, cap=7)
    q = drop_add_q(0.01, 7)
    return {
        "DP": lambda n, u: dp.perturbation(n.ravel(), u.ravel()).reshape(n.shape),
        "PRAM": reading_method(pram, alpha),
        "Q": lambda n, u: q.perturbation(n.ravel(), u.ravel()).reshape(n.shape),
    }


def run_shlomo2019(
    reps: int = 500,
    *,
    rng: np.random.Generator | int | None = 2019,
    progress: Callable[[int, int], None] | None = None,
    pram: str = "values",
    pram_alpha: float = 1.0,
) -> Shlomo2019:
    """Run the simulation study and return Tables 4 and 5 (and chi-square results).

    Args:
        reps: Replications per table type (the paper: 500).
        rng: Generator or seed (deterministic for a fixed seed).
        progress: Called with (done, total).
        pram: The reading of PRAM's invariant matrix (see
            ``tablesafe.experiments._pram_readings``); ``values`` is the
            construction used so far.
        pram_alpha: Weight of the invariant matrix against the identity.

    Raises:
        ParameterError: for reps below 1, an unknown reading or a bad alpha.
    """
    if reps < 1:
        raise ParameterError("reps must be at least 1")
    seed = rng if isinstance(rng, int) else None
    methods = _methods(pram, pram_alpha)
    gen = resolve_generator(rng)
    table4: dict[str, dict[str, float]] = {m: {} for m in methods}
    table5: dict[str, dict[str, tuple[float, float, float | None, float | None]]] = {}
    chi: dict[str, dict[str, list[tuple[float, float]]]] = {}
    kinds = (("independent", 0.02), ("dependent", 0.2))
    for k, (kind, const) in enumerate(kinds):
        runs = _Runs(methods)
        for r in range(reps):
            runs.replicate(gen, const, methods)
            if progress is not None:
                progress(k * reps + r + 1, len(kinds) * reps)
        chi[kind] = runs.chi
        suffix = "ind" if kind == "independent" else "dep"
        for name in methods:
            table4[name][f"pp_{suffix}"] = round(float(np.mean(runs.pp[name])), 2)
            table4[name][f"rm_{suffix}"] = round(float(np.mean(runs.rm[name])), 4)
        table5[kind] = {
            row: _summarise(vals)
            for row, vals in sorted(runs.rows.items(), key=lambda kv: _order(kv[0]))
        }
    return Shlomo2019(
        reps=reps,
        seed=seed,
        table4=table4,
        table5=table5,
        chi_square=chi,
        pram=pram,
        pram_alpha=float(pram_alpha),
    )


class _Runs:
    """The replications of one table type: Table 5's rows, Table 4's measures, chi-squares.

    Attributes:
        rows: Table 5 row -> per replication (total, RAD or None, HD or None).
        pp: Method -> per replication, the percent of cells perturbed.
        rm: Method -> per replication, the entropy risk measure.
        chi: ``Original`` or method -> per replication, (statistic, p-value).
    """

    def __init__(self, methods: Mapping[str, Any]) -> None:
        self.rows: dict[str, list[tuple[float, float | None, float | None]]] = {}
        self.pp: dict[str, list[float]] = {m: [] for m in methods}
        self.rm: dict[str, list[float]] = {m: [] for m in methods}
        self.chi: dict[str, list[tuple[float, float]]] = {m: [] for m in ["Original", *methods]}

    def add(self, row: str, total: float, rad: float | None, hd: float | None) -> None:
        """One replication's figures for a Table 5 row."""
        self.rows.setdefault(row, []).append((total, rad, hd))

    def replicate(
        self,
        gen: np.random.Generator,
        const: float,
        methods: Mapping[str, Callable[[np.ndarray, np.ndarray], np.ndarray]],
    ) -> None:
        """One replication: a population, its sample, and every method applied to it."""
        pop = population(gen, const)
        w = gen.uniform(20, 40, pop.shape)
        n = np.round(pop / w).astype(np.int64)
        final = np.divide(pop, n, out=np.zeros(pop.shape), where=n > 0)
        weighted = n * final
        w_bar = weighted.sum() / n.sum()
        self.add("Sample Original", float(n.sum()), None, None)
        self.add("Weighted Original", float(weighted.sum()), None, None)
        self.chi["Original"].append(chi_square_independence(n))
        for name, mech in methods.items():
            v = mech(n, gen.random(n.shape))
            b = np.maximum(n + v, 0)
            v = b - n
            self.pp[name].append(percent_perturbed(n, b))
            self.add(f"Sample {name}", float(b.sum()), _rad(n, b), hellinger_distance(n, b))
            self.chi[name].append(chi_square_independence(b))
            weightings = {"Avg": np.full(n.shape, w_bar)}
            if name != "DP":
                weightings["Avg cell"] = np.divide(
                    weighted, n, out=np.full(n.shape, w_bar), where=n > 0
                )
            for wname, mean_w in weightings.items():
                wb = np.where(b == 0, 0.0, np.maximum(weighted + v * mean_w, 0.0))
                if wname == "Avg":
                    self.rm[name].append(entropy_risk(weighted, wb))
                self.add(
                    f"Weighted {name} {wname}",
                    float(wb.sum()),
                    _rad(weighted, wb),
                    hellinger_distance(weighted, wb),
                )


def _rad(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    # Table 5 compares overall totals: the relative absolute difference of the total.
    ta, tb = float(np.sum(a)), float(np.sum(b))
    return 100.0 * abs(tb - ta) / ta if ta else 0.0


def _summarise(
    vals: list[tuple[float, float | None, float | None]],
) -> tuple[float, float, float | None, float | None]:
    totals = np.array([v[0] for v in vals])
    se = float(totals.std(ddof=1) / np.sqrt(len(totals))) if len(totals) > 1 else 0.0
    rad = [v[1] for v in vals if v[1] is not None]
    hd = [v[2] for v in vals if v[2] is not None]
    return (
        round(float(totals.mean()), 1),
        round(se, 1),
        round(float(np.mean(rad)), 3) if rad else None,
        round(float(np.mean(hd)), 3) if hd else None,
    )


def _order(row: str) -> tuple[int, int]:
    kinds = ["Sample", "Weighted"]
    names = ["Original", "DP", "PRAM", "Q"]
    parts = row.split()
    return kinds.index(parts[0]) * 10 + names.index(parts[1]), len(parts)
