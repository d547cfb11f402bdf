"""A realistic synthetic survey for demonstrations, tests and benchmarks.

The demo survey has nine classification variables with the skews and
dependencies of a labour-force style survey: region sizes differ, the age
pyramid narrows with age, marital status, education, employment, occupation,
household size and tenure depend on age and on each other, and children
under 15 are never married and never in the labour force (declared as
structural zeros in the catalog). Weights vary moderately (regions are
sampled at different rates, times a non-response adjustment), and 80
delete-a-group jackknife (JK1) replicate weights are built from 80 random
groups of primary sampling units. Record keys are drawn from the same seeded
Generator, so the whole file is reproducible from ``seed`` (real microdata
must use secure keys: ``tablesafe keys add``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tablesafe._errors import ParameterError
from tablesafe._protection_limits import check_number
from tablesafe.catalog._catalog import Catalog

__all__ = ["write_demo_data"]

_REGIONS = [
    (1, "North", 0.08, 0.010),
    (2, "North East", 0.05, 0.014),
    (3, "North West", 0.12, 0.008),
    (4, "Capital", 0.24, 0.005),
    (5, "Central", 0.16, 0.007),
    (6, "East", 0.11, 0.009),
    (7, "South West", 0.14, 0.008),
    (8, "Islands", 0.10, 0.012),
]
# Zones group regions (a level above REGION in the GEOGRAPHY hierarchy).
_ZONES = [
    ("N", "North", (1, 2, 3)),
    ("C", "Centre", (4, 5, 6)),
    ("S", "South and islands", (7, 8)),
]
_MARSTAT = [(1, "Never married"), (2, "Married or civil partner"), (3, "Widowed"), (4, "Divorced")]
_EDUC = [
    (1, "No qualification or too young"),
    (2, "Primary"),
    (3, "Lower secondary"),
    (4, "Upper secondary"),
    (5, "Post-secondary vocational"),
    (6, "Tertiary"),
]
_EMPSTAT = [(1, "Employed"), (2, "Unemployed"), (3, "Inactive"), (4, "Not applicable (under 15)")]
_OCC = [
    (0, "Not in employment"),
    (1, "Managers"),
    (2, "Professionals"),
    (3, "Technicians and associate professionals"),
    (4, "Clerical support workers"),
    (5, "Service and sales workers"),
    (6, "Skilled agricultural workers"),
    (7, "Craft and related trades workers"),
    (8, "Plant and machine operators"),
    (9, "Elementary occupations"),
]
_HHSIZE = [
    (1, "1 person"),
    (2, "2 persons"),
    (3, "3 persons"),
    (4, "4 persons"),
    (5, "5 persons"),
    (6, "6 or more persons"),
]
_TENURE = [("OWN", "Owner occupied"), ("RENT", "Private rented"), ("SOC", "Social rented")]
_AGEGRP = [
    (1, "0-14", range(0, 15)),
    (2, "15-24", range(15, 25)),
    (3, "25-34", range(25, 35)),
    (4, "35-44", range(35, 45)),
    (5, "45-54", range(45, 55)),
    (6, "55-64", range(55, 65)),
    (7, "65-74", range(65, 75)),
    (8, "75+", range(75, 91)),
]

REPLICATES = 80
_CHUNK = 1_000_000


def _pick(rng: np.random.Generator, probs: np.ndarray) -> np.ndarray:
    """Draw one category per row from row-wise probabilities (rows sum to 1)."""
    cum = np.cumsum(probs, axis=1)
    u = rng.random(probs.shape[0]) * cum[:, -1]
    out: np.ndarray = (u[:, None] > cum).sum(axis=1)
    return out


def _logistic(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = 1.0 / (1.0 + np.exp(-x))
    return out


def _chunk(rng: np.random.Generator, n: int, replicates: int) -> dict[str, np.ndarray]:
    """``n`` records: every column, drawn from ``rng`` in a fixed order."""
    region, age, female = _people(rng, n)
    a = age.astype(float)
    adult = age >= 15
    marstat = _marstat(rng, a, adult, female)
    educ = _educ(rng, a, adult, region)
    e = educ.astype(float)
    empstat = _empstat(rng, a, e, adult, female)
    occ = _occupation(rng, educ, empstat)
    hhsize = _household_size(rng, a, age, marstat)
    tenure = _tenure(rng, a, e, marstat, region, empstat)
    # Weights: inverse sampling fraction by region, times a non-response adjustment.
    frac = np.array([r[3] for r in _REGIONS])[region]
    nonresp = rng.lognormal(mean=0.0, sigma=0.18, size=n) * np.where(a < 30, 1.12, 1.0)
    weight = np.round(nonresp / frac, 4)

    out: dict[str, np.ndarray] = {
        "REGION": np.array([r[0] for r in _REGIONS], dtype=np.int64)[region],
        "SEX": np.where(female, 2, 1).astype(np.int64),
        "AGE": age.astype(np.int64),
        "MARSTAT": marstat.astype(np.int64),
        "HHSIZE": hhsize.astype(np.int64),
        "EDUC": educ.astype(np.int64),
        "EMPSTAT": empstat.astype(np.int64),
        "OCC": occ.astype(np.int64),
        "TENURE": tenure,
        "WEIGHT": weight,
    }
    if replicates:
        # Delete-a-group jackknife (JK1): record i's primary sampling unit falls in
        # one of R groups; replicate r drops group r and inflates the rest by R/(R-1).
        group = rng.integers(0, replicates, size=n)
        factor = replicates / (replicates - 1)
        for r in range(replicates):
            out[f"RW{r + 1}"] = np.where(group == r, 0.0, weight * factor)
    out["RKEY"] = rng.integers(0, 2**32, size=n, dtype=np.uint32)
    # Magnitudes, drawn after every other column so those stay as they were.
    out["INCOME"], out["HOURS"] = _income_hours(rng, a, e, occ, empstat, female)
    return out


def _people(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Region (index into the regions), age and whether female, for ``n`` people."""
    region_p = np.array([r[2] for r in _REGIONS])
    region = rng.choice(len(_REGIONS), size=n, p=region_p / region_p.sum())

    ages = np.arange(91)
    pyramid = np.exp(-((ages - 38) ** 2) / (2 * 30.0**2)) * np.where(
        ages > 70, 0.97 ** (ages - 70), 1
    )
    pyramid[90] = pyramid[85:90].sum() * 0.8  # the open 90+ band
    age = rng.choice(91, size=n, p=pyramid / pyramid.sum())

    female = rng.random(n) < np.clip(0.49 + np.maximum(age - 60, 0) * 0.006, 0, 0.75)
    return region, age, female


def _marstat(
    rng: np.random.Generator, a: np.ndarray, adult: np.ndarray, female: np.ndarray
) -> np.ndarray:
    """Marital status by age and sex (children never married)."""
    p_never = np.where(adult, _logistic(-(a - 31) / 4.5), 1.0)
    p_wid = np.where(adult, _logistic((a - 78) / 6) * (0.45 + 0.25 * female), 0.0)
    p_div = np.where(adult, 0.11 * _logistic((a - 38) / 6), 0.0)
    p_mar = np.clip(1 - p_never - p_wid - p_div, 0, 1)
    out: np.ndarray = _pick(rng, np.stack([p_never, p_mar, p_wid, p_div], axis=1)) + 1
    return out


def _educ(
    rng: np.random.Generator, a: np.ndarray, adult: np.ndarray, region: np.ndarray
) -> np.ndarray:
    """Education: children by school stage; adults by birth cohort and region."""
    n = a.size
    young = 1.0 + (a < 40) * 0.5 + (region == 3) * 0.6
    adult_p = np.stack(
        [
            0.06 + 0.10 * (a > 65),
            0.08 + 0.15 * (a > 65),
            0.18 * np.ones(n),
            0.30 * np.ones(n),
            0.14 * np.ones(n),
            0.24 * young * (a >= 21),
        ],
        axis=1,
    )
    child_p = np.stack(
        [
            (a < 7).astype(float) + 1e-9,
            ((a >= 7) & (a < 12)).astype(float),
            (a >= 12).astype(float),
            np.zeros(n),
            np.zeros(n),
            np.zeros(n),
        ],
        axis=1,
    )
    educ_p = np.where(adult[:, None], adult_p, child_p)
    educ_p[(a >= 15) & (a < 18), 3:] *= 0.1
    out: np.ndarray = _pick(rng, educ_p) + 1
    return out


def _empstat(
    rng: np.random.Generator, a: np.ndarray, e: np.ndarray, adult: np.ndarray, female: np.ndarray
) -> np.ndarray:
    """Employment status: employment peaks in mid-life and rises with education."""
    emp_lin = 2.2 - ((a - 42) / 14) ** 2 + 0.25 * (e - 3.5) - 0.25 * female
    p_emp = _logistic(emp_lin)
    p_unemp = (1 - p_emp) * np.clip(0.25 - 0.03 * (e - 3) - 0.003 * (a - 25), 0.03, 0.4)
    p_inact = 1 - p_emp - p_unemp
    emp_p = np.stack([p_emp, p_unemp, p_inact, np.zeros(a.size)], axis=1)
    emp_p[~adult] = [0, 0, 0, 1]
    out: np.ndarray = _pick(rng, emp_p) + 1
    return out


def _occupation(rng: np.random.Generator, educ: np.ndarray, empstat: np.ndarray) -> np.ndarray:
    """Occupation for the employed, by education (ISCO major groups); 0 for the others."""
    occ_by_educ = np.array(
        [
            [0.02, 0.01, 0.03, 0.07, 0.22, 0.08, 0.16, 0.13, 0.28],
            [0.02, 0.01, 0.04, 0.08, 0.24, 0.07, 0.18, 0.14, 0.22],
            [0.04, 0.03, 0.07, 0.11, 0.24, 0.04, 0.17, 0.13, 0.17],
            [0.07, 0.08, 0.14, 0.15, 0.20, 0.03, 0.12, 0.10, 0.11],
            [0.08, 0.12, 0.24, 0.13, 0.14, 0.02, 0.13, 0.07, 0.07],
            [0.14, 0.42, 0.19, 0.09, 0.08, 0.01, 0.03, 0.02, 0.02],
        ]
    )
    occ = _pick(rng, occ_by_educ[educ - 1]) + 1
    out: np.ndarray = np.where(empstat == 1, occ, 0)
    return out


def _household_size(
    rng: np.random.Generator, a: np.ndarray, age: np.ndarray, marstat: np.ndarray
) -> np.ndarray:
    """Household size: couples and families in mid-life are larger."""
    base = np.array([0.28, 0.34, 0.16, 0.14, 0.05, 0.03])
    hh_p = np.tile(base, (a.size, 1))
    hh_p[:, 0] *= np.where(marstat == 2, 0.05, 1.6) * np.where(age < 15, 0.0, 1.0)
    hh_p[:, 1] *= np.where(marstat == 2, 1.6, 0.7)
    fam = ((a >= 28) & (a <= 52)) | (age < 18)
    hh_p[:, 2:] *= np.where(fam, 2.2, 0.6)[:, None]
    out: np.ndarray = _pick(rng, hh_p) + 1
    return out


def _tenure(
    rng: np.random.Generator,
    a: np.ndarray,
    e: np.ndarray,
    marstat: np.ndarray,
    region: np.ndarray,
    empstat: np.ndarray,
) -> np.ndarray:
    """Housing tenure codes: owning rises with age, marriage and education."""
    own = _logistic((a - 35) / 9 + 0.4 * (marstat == 2) + 0.2 * (e - 3.5) - 0.6 * (region == 3))
    soc = (1 - own) * np.clip(0.45 - 0.06 * (e - 3) + 0.1 * (empstat == 2), 0.05, 0.8)
    tenure_idx = _pick(rng, np.stack([own, 1 - own - soc, soc], axis=1))
    out: np.ndarray = np.array([t[0] for t in _TENURE], dtype=object)[tenure_idx]
    return out


def _income_hours(
    rng: np.random.Generator,
    a: np.ndarray,
    e: np.ndarray,
    occ: np.ndarray,
    empstat: np.ndarray,
    female: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Annual income (skewed, zeros, a few very large values) and weekly hours worked.

    Employed people earn a lognormal wage rising with education, occupation
    and age; 0.05% of them earn a Pareto-tailed multiple (up to the bound
    of 5 million). Others have a small transfer income or nothing; children
    have none. Hours: full time near 40, part time near 20, zero when not
    employed.
    """
    n = a.size
    employed = empstat == 1
    occ_pay = np.array([0.0, 0.55, 0.4, 0.2, 0.0, -0.15, -0.3, -0.05, -0.05, -0.35])[occ]
    mid = np.clip(a - 18, 0, None)
    log_wage = 10.1 + 0.09 * (e - 3) + occ_pay + 0.03 * mid - 0.0005 * mid**2 - 0.12 * female
    wage = np.exp(log_wage + rng.normal(0.0, 0.55, n))
    top = rng.random(n) < 0.0005
    wage = np.where(top, wage * (1 + rng.pareto(1.2, n)) * 8, wage)
    transfer = np.where(rng.random(n) < 0.55, rng.gamma(2.0, 4500.0, n), 0.0)
    income = np.where(employed, wage, np.where(empstat == 4, 0.0, transfer))
    income = np.minimum(np.round(income), 5_000_000.0)
    part_time = rng.random(n) < np.where(female, 0.32, 0.11)
    hours = np.where(part_time, rng.normal(21, 6, n), rng.normal(40.5, 5.5, n))
    hours = np.where(employed, np.clip(np.round(hours * 2) / 2, 1.0, 98.0), 0.0)
    return income, hours


def demo_catalog(replicates: int = REPLICATES, data_file: str = "microdata.parquet") -> Catalog:
    """The catalog of the demo survey."""
    raw = {
        "dataset": _demo_dataset(replicates, data_file),
        "variables": _demo_variables(),
        "structural_zeros": [
            {"AGEGRP": [1], "MARSTAT": [2, 3, 4]},
            {"AGEGRP": [1], "EMPSTAT": [1, 2, 3]},
            {"AGEGRP": [2, 3, 4, 5, 6, 7, 8], "EMPSTAT": [4]},
        ],
        # Hierarchies over existing columns: no new data, same record keys.
        "hierarchies": [
            {"name": "GEOGRAPHY", "label": "Zones and regions", "levels": ["ZONE", "REGION"]},
            {"name": "AGE_TREE", "label": "Age", "levels": ["AGEGRP", "AGE5", "AGE"]},
        ],
        "magnitudes": [
            {
                "name": "INCOME",
                "label": "Annual income",
                "unit": "currency units",
                "lower": 0,
                "upper": 5_000_000,
                "negative": False,
            },
            {
                "name": "HOURS",
                "label": "Weekly hours worked",
                "unit": "hours",
                "lower": 0,
                "upper": 99,
                "negative": False,
            },
        ],
    }
    return Catalog.from_dict(raw)


def _demo_dataset(replicates: int, data_file: str) -> dict[str, Any]:
    """The catalog's ``[dataset]`` table (with JK1 replicate weights unless ``replicates`` is 0)."""
    ds: dict[str, Any] = {
        "title": "tablesafe demo survey (synthetic)",
        "citation": "tablesafe demo survey (synthetic records, no real person), "
        "written by `tablesafe demo-data`",
        "file": data_file,
        "record_key": "RKEY",
        "weight": "WEIGHT",
    }
    if replicates:
        ds["replicate_weights"] = [f"RW{r + 1}" for r in range(replicates)]
        ds["replicate_method"] = "JK1"
    return ds


def _demo_variables() -> list[dict[str, Any]]:
    """The catalog's classification variables, with their groupings."""

    def cats(items: list[Any]) -> list[dict[str, Any]]:
        return [{"code": c[0], "label": c[1]} for c in items]

    age_cats = [{"code": a, "label": str(a) if a < 90 else "90+"} for a in range(91)]
    age5 = [
        {
            "code": f"{lo:02d}-{lo + 4:02d}" if lo < 90 else "90+",
            "label": f"{lo} to {lo + 4}" if lo < 90 else "90 and over",
            "members": list(range(lo, min(lo + 5, 91))),
        }
        for lo in range(0, 91, 5)
    ]
    return [
        {
            "name": "REGION",
            "label": "Region",
            "categories": cats(_REGIONS),
            "groupings": [
                {
                    "name": "ZONE",
                    "label": "Zone (groups of regions)",
                    "groups": [
                        {"code": c, "label": lab, "members": list(m)} for c, lab, m in _ZONES
                    ],
                }
            ],
        },
        {"name": "SEX", "label": "Sex", "categories": cats([(1, "Male"), (2, "Female")])},
        {
            "name": "AGE",
            "label": "Age in single years",
            "categories": age_cats,
            "groupings": [
                {"name": "AGE5", "label": "Age in five-year bands", "groups": age5},
                {
                    "name": "AGEGRP",
                    "label": "Age group",
                    "groups": [
                        {"code": c, "label": lab, "members": list(r)} for c, lab, r in _AGEGRP
                    ],
                },
            ],
        },
        {"name": "MARSTAT", "label": "Marital status", "categories": cats(_MARSTAT)},
        {"name": "HHSIZE", "label": "Household size", "categories": cats(_HHSIZE)},
        {"name": "EDUC", "label": "Highest education", "categories": cats(_EDUC)},
        {"name": "EMPSTAT", "label": "Employment status", "categories": cats(_EMPSTAT)},
        {"name": "OCC", "label": "Occupation (ISCO major group)", "categories": cats(_OCC)},
        {"name": "TENURE", "label": "Housing tenure", "categories": cats(_TENURE)},
    ]


def write_demo_data(
    out_dir: str | Path,
    records: int = 100_000,
    *,
    seed: int = 2026,
    replicates: int = REPLICATES,
    fmt: str = "parquet",
) -> Path:
    """Write the demo survey and its catalog to ``out_dir``.

    Records are generated in chunks of one million, each from its own child
    of ``SeedSequence(seed)``, so memory stays bounded and the output depends
    only on ``seed``, ``records`` and ``replicates``.

    Args:
        out_dir: Folder to write ``microdata.parquet`` (or ``.csv``) and ``catalog.toml`` to.
        records: Number of records.
        seed: Seed of the generator.
        replicates: Number of JK1 replicate weights (0 for none).
        fmt: ``"parquet"`` or ``"csv"``.

    Returns:
        The folder written.
    """
    # Before any work: 10**14 records once took 17 GB before failing.
    records = check_number("demo-data.records", records, "records")
    replicates = check_number("demo-data.replicates", replicates, "replicates")
    if replicates == 1:
        raise ParameterError("replicates must be 0 or at least 2")
    if fmt not in ("parquet", "csv"):
        raise ParameterError(f"format must be parquet or csv, not {fmt!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data_name = f"microdata.{fmt}"
    target = out / data_name
    tmp = out / f".{data_name}.tmp"
    chunks = (records + _CHUNK - 1) // _CHUNK
    seqs = np.random.SeedSequence(seed).spawn(chunks)
    writer: Any = None
    try:
        for i, seq in enumerate(seqs):
            n = min(_CHUNK, records - i * _CHUNK)
            cols = _chunk(np.random.default_rng(seq), n, replicates)
            table = pa.table(
                {
                    k: pa.array(v, type=pa.string() if k == "TENURE" else None)
                    for k, v in cols.items()
                }
            )
            if fmt == "parquet":
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, compression="zstd")
                writer.write_table(table)
            else:
                import pyarrow.csv as pacsv

                if writer is None:
                    writer = pacsv.CSVWriter(tmp, table.schema)
                writer.write_table(table)
        writer.close()
        writer = None
        tmp.replace(target)
    finally:
        if writer is not None:
            writer.close()
        tmp.unlink(missing_ok=True)
    (out / "catalog.toml").write_text(demo_catalog(replicates, data_name).to_toml())
    return out
