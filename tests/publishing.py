"""A site serving the demo survey under the protections whose flags the publishing formats carry.

Shared by tests/test_jsonstat.py, tests/test_sdmx.py and tests/test_publish.py:
``lt`` (cell-key method, counts 1 to 4 shown as "<5", dominated sums and means
blanked), ``blank`` (cell-key method, counts 1 and 2 left blank, dominated
sums and means flagged only) and ``none`` (no protection, no rules).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from tablesafe._settings import load_site_config
from tablesafe.catalog._magnitudes import read_magnitude_column
from tablesafe.server import create_app

RULES = {"min_universe_size": 20, "sliver_min_difference": 0, "max_cells": 20_000}
PROFILES: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    "lt": (
        {"method": "ckm"},
        {"sensitive_action": "suppress"},
        {"min_cell_size": 5, "small_cell_action": "show_less_than"},
    ),
    "blank": ({"method": "ckm"}, {}, {"min_cell_size": 3}),
    "none": ({"method": "none"}, {}, {"min_cell_size": 0}),
}

#: Requests that between them have every flag: structural zeros (AGEGRP by
#: MARSTAT), small cells, dominated sums, layers, a hierarchy level (AGE5),
#: a catalog grouping (ZONE), a custom grouping, margins all, total and none.
REQUESTS: list[dict[str, Any]] = [
    {
        "dimensions": ["AGEGRP", "MARSTAT"],
        "universe": {"REGION": [1, 2]},
        "statistic": "both,mean:INCOME,sum:HOURS",
    },
    {"dimensions": ["ZONE", "SEX", "TENURE"], "margins": "total", "statistic": "count"},
    {"dimensions": ["AGE5", "OCC"], "universe": {"SEX": [2]}, "margins": "none"},
    {
        "dimensions": ["AGEB", "EDUC"],
        "statistic": "weighted,sum:INCOME",
        "groupings": [
            {
                "name": "AGEB",
                "variable": "AGEGRP",
                "label": "Age band",
                "groups": [
                    {"code": "young", "label": "Under 35", "members": [1, 2, 3]},
                    {"code": "middle", "label": "35 to 64", "members": [4, 5, 6]},
                ],
                "other": "65 and over",
            }
        ],
    },
]


def site_config(demo_dir: Path, base: Path) -> Any:
    """Every profile a dataset of the demo survey (no guard, tables up to 20,000 cells)."""
    return load_site_config(
        data={
            "base": str(base),
            "server": {"audit_db": "audit.sqlite", "rate_limit_per_minute": 100_000},
            "datasets": [
                {
                    "name": name,
                    "path": str(demo_dir),
                    "protection": prot,
                    "magnitudes": mags,
                    "rules": {**RULES, **rules},
                }
                for name, (prot, mags, rules) in PROFILES.items()
            ],
        }
    )


def client(demo_dir: Path, base: Path) -> TestClient:
    """A test client of the site (use it as a context manager)."""
    return TestClient(create_app(site_config(demo_dir, base)))


def flagged_status(cell: dict[str, Any], statistic: str, shown_less_than: bool) -> str | None:
    """The JSON-stat status the JSON format's flags give one cell's statistic, or ``None``."""
    if cell.get("structural_zero"):
        return "M"
    if cell.get("suppressed"):
        return cell[statistic] if shown_less_than else "Q"
    parts = read_magnitude_column(statistic)
    if parts is not None and cell.get(f"sensitive_{parts[1]}"):
        return "d"
    return None
