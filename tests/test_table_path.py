"""The path of one served table, followed call by call (issue 27: "one path").

DESIGN's path of a table is request -> engine -> cell aggregates ->
mechanism -> additivity -> rules -> protected table. The functions that
run it (the builder's and the table service's) call into the stages; this
test records, with :func:`sys.setprofile`, the stage of every function they
call, in order, and counts the moves back to an earlier stage. The service
keeps its own work (cache, sliver guard, audit): the guard reads the
records' key sketches from the engine once the table exists, which is one
move back by design.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from tablesafe._request import Item, TableRequest
from tablesafe._settings import load_site_config
from tablesafe.catalog._catalog import Catalog, Variable
from tablesafe.cells._aggregates import CellAggregates
from tablesafe.cells._plan import MagnitudePlan, TabulationPlan
from tablesafe.mechanisms._magnitudes import MagnitudeProtection
from tablesafe.service import Principal
from tablesafe.service._bodies import TableBody
from tablesafe.service._service import TableService

SRC = Path(__file__).resolve().parents[1] / "src" / "tablesafe"
#: The functions that run the path: their calls are followed (the builder's loop
#: over the statistics runs each statistic's module).
RUNNERS = {SRC / "_builder.py", SRC / "server" / "_service.py", *SRC.glob("statistics/*.py")}
#: The stages in the path's order; a module's stage is the first that names it.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("request", ("catalog/", "_request.py", "_settings.py", "rules/_request")),
    ("engine", ("engines/",)),
    ("cells", ("cells/",)),
    ("mechanism", ("ptable/", "mechanisms/_additivity.py")),  # additivity: next stage
    ("additivity", ("mechanisms/_additivity.py",)),
    ("rules", ("rules/",)),
    ("output", ("output/",)),
]
#: The values handed down the path (and the settings): reading them is no move.
DATA = (
    TableRequest,
    TabulationPlan,
    CellAggregates,
    Catalog,
    Variable,
    MagnitudeProtection,
    Item,
    MagnitudePlan,
)
#: The rules' checks of the request (the admission's first steps): they run before
#: any microdata is read.
REQUEST_CHECKS = {
    "check_request_limits",
    "check_grouping_limits",
    "check_groupings",
    "check_plan",
    "check_plan_limits",
    "refused_before",
}
#: Helpers every stage uses (errors, random streams, seeds, roundings) and the
#: server's own modules are no stage.
NO_STAGE = ("_errors.py", "_lazy.py", "_random.py", "_rounding.py", "_seeds.py", "_keys.py")


def _stage(path: Path, frame: FrameType) -> int | None:
    rel = path.relative_to(SRC).as_posix()
    if rel.startswith(("server/", "_protection")) or rel in NO_STAGE:
        return None
    if isinstance(frame.f_locals.get("self"), DATA):
        return None  # reading a value handed down (the request, plan, cells, catalog)
    if frame.f_code.co_name in REQUEST_CHECKS:
        return 0
    if rel.startswith("mechanisms/_additivity.py"):
        return 4
    if rel.startswith("mechanisms/"):
        return 3
    for i, (_, prefixes) in enumerate(STAGES):
        if rel.startswith(prefixes):
            return i
    return None


def _follow(run: Callable[[], Any]) -> list[tuple[int, str]]:
    """The stages (index, callee) the runners call into while ``run`` runs, repeats merged."""
    seen: list[tuple[int, str]] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call" or frame.f_back is None:
            return
        caller = Path(frame.f_back.f_code.co_filename)
        callee = Path(frame.f_code.co_filename)
        if caller not in RUNNERS or callee in RUNNERS or SRC not in callee.parents:
            return
        stage = _stage(callee, frame)
        if stage is not None and (not seen or seen[-1][0] != stage):
            seen.append((stage, f"{callee.relative_to(SRC)}:{frame.f_code.co_name}"))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return seen


@pytest.fixture(scope="module")
def service(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    site = load_site_config(
        data={
            "base": str(tmp_path_factory.mktemp("path")),
            "server": {"audit_db": "audit.sqlite", "cache_tables": 0},
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": {"method": "ckm"},
                    "rules": {"min_cell_size": 3, "sliver_min_difference": 5},
                }
            ],
        }
    )
    svc = TableService(site)
    yield svc
    svc.close()


@pytest.mark.parametrize(
    "body",
    [
        {"dimensions": ["REGION", "SEX"], "statistic": "both"},
        {
            "dimensions": ["G", "SEX"],
            "universe": {"AGEGRP": [3, 4, 5]},
            "statistic": "count,sum:INCOME,mean:HOURS",
            "groupings": [
                {
                    "name": "G",
                    "variable": "EDUC",
                    "other": "other",
                    "groups": [{"code": "low", "members": [1, 2]}],
                }
            ],
        },
    ],
    ids=["plain", "universe-grouping-magnitudes"],
)
def test_a_served_table_moves_back_to_an_earlier_stage_at_most_3_times(
    service: TableService, body: dict[str, Any]
) -> None:
    who = Principal("path-test", "user", 10**6)
    path = _follow(lambda: service.table(who, "demo", TableBody(**body).to_request()))
    back = [(a, b) for a, b in itertools.pairwise(path) if b[0] < a[0]]
    # The path reaches the engine, the mechanism and the rules, in that order.
    stages = [s for s, _ in path]
    assert stages.index(1) < stages.index(3) < stages.index(5), path
    assert len(back) <= 3, "\n".join(f"{a[1]} -> {b[1]}" for a, b in back)
