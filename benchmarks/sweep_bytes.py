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

Usage: python benchmarks/sweep_bytes.py [--tables 60] [--records 20000] [--out FILE]
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

try:
    from tablesafe.prepare import write_demo_data
except ImportError:  # a checkout from before tablesafe.prepare was public
    from tablesafe import write_demo_data
from tablesafe._settings import load_site_config
from tablesafe.server import create_app

SECRET_ENV = "TABLESAFE_SWEEP_SECRET"
FORMATS = ("json", "csv", "xlsx")


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


def site(data: Path, base: Path) -> Any:
    """The site: every profile a dataset of the same microdata, no guard, no cache."""
    os.environ.setdefault(SECRET_ENV, "sweep-secret-0123456789abcdef")
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
                    "path": str(data),
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
                for name, (prot, mags, rules) in PROFILES.items()
            ],
        }
    )


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


def sweep(tables: int, records: int) -> list[str]:
    """Every answer's line: profile, request number, format, status and body digest."""
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        data = write_demo_data(Path(tmp) / "demo", records, seed=7, replicates=10)
        with TestClient(create_app(site(data, Path(tmp)))) as client:
            for profile in PROFILES:
                described = client.get(f"/api/datasets/{profile}").json()
                rng = np.random.default_rng(2027)
                for i in range(tables):
                    request = body(rng, described)
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
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = sweep(args.tables, args.records)
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
