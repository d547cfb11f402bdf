"""The protection profiles the request sweeps serve, one dataset each.

Shared by ``tests/test_request_fuzz.py`` and ``benchmarks/sweep_bytes.py``
(plain data, no tablesafe import: the sweep also runs against older
checkouts).
"""

from __future__ import annotations

from typing import Any

Profile = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]


def profiles(secret_env: str) -> dict[str, Profile]:
    """(protection, magnitudes, rules) per profile; keyed seeds read ``secret_env``."""
    return {
        "none": ({"method": "none"}, {}, {}),
        "ckm": ({"method": "ckm"}, {}, {}),
        "ckm-keyed": ({"method": "ckm", "seeds": "keyed", "secret_env": secret_env}, {}, {}),
        "ckm-independent": ({"method": "ckm", "additivity": "independent"}, {}, {}),
        "ckm-ipf": ({"method": "ckm", "additivity": "ipf", "rounding": "100"}, {}, {}),
        "dp": ({"method": "dp", "epsilon": 1.0, "cap": 5}, {"method": "dp"}, {}),
        "pram": ({"method": "pram"}, {"sensitive_action": "suppress"}, {}),
        "q": ({"method": "q", "rate": 0.05}, {"mean_rounding": "1", "rounding": "2sf"}, {}),
        "q-records": (
            {"method": "q-records", "seeds": "keyed", "secret_env": secret_env},
            {"method": "dp", "epsilon": 0.5},
            {},
        ),
        "ckm-small": (
            {"method": "ckm", "js": 1, "variance": 2.0},
            {"sensitive_action": "suppress"},
            {"min_cell_size": 5},
        ),
        "dp-less-than": (
            {"method": "dp", "epsilon": 2.0, "cap": 3},
            {},
            {"min_cell_size": 4, "small_cell_action": "show_less_than"},
        ),
        # The precision rule (np) and quantiles published from small cells.
        "ckm-precision": (
            {"method": "ckm", "seeds": "keyed", "secret_env": secret_env},
            {"quantile_window": 3, "quantile_min_count": 10},
            {"max_rse": 30.0, "min_effective_count": 20},
        ),
        "q-flag": (
            {"method": "q", "rate": 0.05},
            {},
            {"max_rse": 50.0, "unreliable_action": "flag"},
        ),
    }
