"""A fixed sweep of table requests over HTTP, hashed: the same bytes before and after a change.

Issue 27 asks for a redesign that changes no published byte. This script
builds the demo survey (``--records``, 20,000 by default, seed 7), serves
it under every protection profile of ``tests/profiles.py`` (the fuzz
test's; one dataset each), draws ``--tables`` random requests per profile from the
catalog the server describes (a fixed numpy Generator: 1 to 3 dimensions,
universes, custom groupings, sums and means, margins, roundings) and asks
each in JSON, CSV and XLSX. It prints one line per answer (profile, request
number, format, status, SHA-256 of the body) and a digest of them all.

It talks to the server only through ``tablesafe.server.create_app`` and the
HTTP API, so the same script runs against an older checkout: put its
``src`` first on ``PYTHONPATH`` and compare the two outputs with ``diff``.

``--wide`` also draws the statistics the default sweep leaves out
(percentages, medians and quantiles, standard errors) and serves a second
dataset (``tests/tsdata.py``'s random records) with item non-response in a
magnitude and a household unit, under a few of the profiles: the figures of
every statistic, of bases and of another unit; and the demo under the rules
that read what was published (the account of published figures, the
putative-risk ceiling), its tables asked in order.

Usage: python benchmarks/sweep_bytes.py [--tables 60] [--records 20000] [--wide] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from profiles import profiles
from tsdata import RANDOM_CATALOG, random_frame

try:
    from tablesafe.prepare import write_demo_data
except ImportError:  # a checkout from before tablesafe.prepare was public
    from tablesafe import write_demo_data
from tablesafe._settings import load_site_config
from tablesafe.server import create_app

SECRET_ENV = "TABLESAFE_SWEEP_SECRET"
FORMATS = ("json", "csv", "xlsx")
#: The profiles the wide sweep also serves its second dataset under.
WIDE_PROFILES = ("ckm-keyed", "dp", "q-records", "ckm-precision", "ckm-small")
#: The rules the wide sweep also serves the demo under (as ckm-keyed): what was
#: published decides (the account of published figures, the putative-risk ceiling).
SHARED_RULES = {
    "account": {"sliver_min_difference": 5},
    "ceiling": {"putative_uniques_ceiling": 0.005},
}
#: The second dataset's missing code of X (item non-response).
MISSING = -9.0


def _accepted(profile: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> bool:
    """Whether this checkout's settings take a profile (an older one lacks newer settings)."""
    prot, mags, rules = profile
    os.environ.setdefault(SECRET_ENV, "sweep-secret-0123456789abcdef")
    dataset = {"name": "p", "path": ".", "protection": prot, "magnitudes": mags, "rules": rules}
    try:
        load_site_config(data={"base": ".", "datasets": [dataset]})
    except Exception:  # any checkout's refusal, whatever its type
        return False
    return True


PROFILES = {name: p for name, p in profiles(SECRET_ENV).items() if _accepted(p)}


def site(data: Path, base: Path, wide: Path | None = None) -> Any:
    """The site: every profile a dataset of the same microdata, no guard, no cache.

    With ``wide`` (the second dataset's folder), also ``WIDE_PROFILES`` over it,
    each named ``wide-PROFILE``.
    """
    os.environ.setdefault(SECRET_ENV, "sweep-secret-0123456789abcdef")
    served = [(name, data, p) for name, p in PROFILES.items()]
    if wide is not None:
        served += [(f"wide-{n}", wide, PROFILES[n]) for n in WIDE_PROFILES if n in PROFILES]
        prot, mags, _ = PROFILES["ckm-keyed"]
        served += [(name, data, (prot, mags, rules)) for name, rules in SHARED_RULES.items()]
    return load_site_config(
        data={
            "base": str(base),
            "server": {
                "audit_db": "audit.sqlite",
                "cache_tables": 0,
                "rate_limit_per_minute": 1_000_000,
            },
            "engine": {"kind": "duckdb", "cube_cache": True},
            "datasets": [
                {
                    "name": name,
                    "path": str(folder),
                    "protection": prot,
                    "magnitudes": mags,
                    "rules": {
                        "min_universe_size": 20,
                        "max_dimensions": 4,
                        "sliver_min_difference": 0,
                        "max_cells": 6000,
                        **rules,
                    },
                }
                for name, folder, (prot, mags, rules) in served
            ],
        }
    )


def wide_data(folder: Path, records: int) -> Path:
    """The second dataset: random records, X with item non-response, persons in households."""
    import pandas as pd

    frame = random_frame(records, 11)
    rng = np.random.default_rng(12)
    x = np.round(rng.lognormal(4, 1, records).clip(0, 1000), 2)
    x[rng.random(records) < 0.08] = np.nan
    x[rng.random(records) < 0.08] = MISSING
    frame["X"] = x
    size = rng.integers(1, 6, records)
    households = np.repeat(np.arange(records), size)[:records]
    keys = rng.integers(0, 2**32, records, dtype=np.uint32)
    frame["HHID"] = households + 1000
    frame["HHKEY"] = keys[households]
    frame["HHW"] = rng.uniform(20, 200, records)[households]
    # A and D are the household's: every member holds its first member's.
    for column in ("A", "D"):
        frame[column] = pd.Series(frame[column].to_numpy()[households])
    catalog = dict(RANDOM_CATALOG)
    catalog["magnitudes"] = [
        {"name": "X", "label": "Spending", "lower": 0, "upper": 1000, "missing": [MISSING]}
    ]
    catalog["units"] = [
        {
            "unit": "household",
            "id": "HHID",
            "record_key": "HHKEY",
            "weight": "HHW",
            "variables": ["A", "D"],
        }
    ]
    from tablesafe.catalog._catalog import Catalog

    folder.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(folder / "microdata.parquet", index=False)
    (folder / "catalog.toml").write_text(Catalog.from_dict(catalog).to_toml())
    return folder


def body(rng: np.random.Generator, described: dict[str, Any]) -> dict[str, Any]:
    """One random table request over a dataset the server describes."""
    cats = [v for v in described["variables"] if v.get("categories")]
    names = [str(v["name"]) for v in cats]
    dims = [str(d) for d in rng.choice(names, size=int(rng.integers(1, 4)), replace=False)]
    out: dict[str, Any] = {"dimensions": dims}
    universe: dict[str, list[Any]] = {}
    for _ in range(int(rng.integers(0, 3))):
        v = cats[int(rng.integers(len(cats)))]
        codes = [c["code"] for c in v["categories"]]
        k = int(rng.integers(1, len(codes) + 1))
        universe[str(v["name"])] = [codes[i] for i in sorted(rng.choice(len(codes), k, False))]
    if universe:
        out["universe"] = universe
    if rng.random() < 0.2:
        v = next(c for c in cats if c["name"] == dims[0])
        codes = [c["code"] for c in v["categories"]]
        if len(codes) >= 3:
            half = len(codes) // 2
            out["groupings"] = [
                {
                    "name": "G1",
                    "variable": dims[0],
                    "groups": [{"code": "a", "members": codes[:half]}],
                }
            ]
            out["dimensions"] = ["G1", *dims[1:]]
    continuous = [str(m["name"]) for m in described.get("magnitudes", [])]
    statistic = str(rng.choice(["count", "weighted", "both"]))
    if continuous and rng.random() < 0.4:
        kind = str(rng.choice(["sum", "mean"]))
        statistic += f",{kind}:{continuous[int(rng.integers(len(continuous)))]}"
    out["statistic"] = statistic
    out["margins"] = str(rng.choice(["all", "none", "total"]))
    if rng.random() < 0.2:
        out["rounding"] = str(rng.choice(["10", "2sf", "1000"]))
    return out


def wide_body(rng: np.random.Generator, described: dict[str, Any]) -> dict[str, Any]:
    """One random request of the wide sweep: :func:`body`, then statistics it leaves out."""
    out = body(rng, described)
    continuous = [str(m["name"]) for m in described.get("magnitudes", [])]
    extra = []
    if rng.random() < 0.4:
        kinds = ["column", "total"] + (["row"] if len(out["dimensions"]) > 1 else [])
        extra.append(f"percent:{rng.choice(kinds)}")
    if continuous and rng.random() < 0.3:
        var = continuous[int(rng.integers(len(continuous)))]
        extra.append(str(rng.choice([f"median:{var}", f"quantile:{var}:0.9"])))
    if continuous and rng.random() < 0.3:
        var = continuous[int(rng.integers(len(continuous)))]
        extra.append(f"{rng.choice(['sum', 'mean'])}:{var}")
    if extra:
        out["statistic"] = ",".join([out["statistic"], *extra])
    if any(e.startswith("percent:") for e in extra) and rng.random() < 0.8:
        out["margins"] = "all"  # the denominators' margins
    if described["weighted"] and rng.random() < 0.4:
        out["se"] = True
    units = described.get("units", [])
    if len(units) > 1 and rng.random() < 0.25:
        household = [str(v["name"]) for v in described["variables"] if v["name"] in ("A", "D")]
        out = {
            "dimensions": household[: int(rng.integers(1, 3))],
            "unit": units[1],
            "statistic": str(rng.choice(["count", "weighted", "both", "weighted,percent:total"])),
            "margins": out["margins"],
        }
    return out


def sweep(tables: int, records: int, wide: bool = False) -> list[str]:
    """Every answer's line: profile, request number, format, status and body digest."""
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        data = write_demo_data(Path(tmp) / "demo", records, seed=7, replicates=10)
        second = wide_data(Path(tmp) / "wide", records // 4) if wide else None
        served = list(PROFILES)
        if wide:
            served += [f"wide-{n}" for n in WIDE_PROFILES if n in PROFILES]
            served += list(SHARED_RULES)
        with TestClient(create_app(site(data, Path(tmp), second))) as client:
            for profile in served:
                described = client.get(f"/api/datasets/{profile}").json()
                rng = np.random.default_rng(2027)
                for i in range(tables):
                    request = wide_body(rng, described) if wide else body(rng, described)
                    for fmt in FORMATS:
                        r = client.post(
                            f"/api/datasets/{profile}/tables", params={"format": fmt}, json=request
                        )
                        digest = hashlib.sha256(r.content).hexdigest()[:16]
                        lines.append(f"{profile} {i} {fmt} {r.status_code} {digest}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=60)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--wide", action="store_true", help="every statistic, bases, units")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = sweep(args.tables, args.records, args.wide)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    statuses: dict[str, int] = {}
    for line in lines:
        status = line.split()[3]
        statuses[status] = statuses.get(status, 0) + 1
    print(f"answers: {len(lines)}, by status: {json.dumps(statuses, sort_keys=True)}")
    print(f"digest of them all: {hashlib.sha256(text.encode()).hexdigest()}")


if __name__ == "__main__":
    main()
