"""The dry run of the admission and the nearest passing alternatives (issue 40, DESIGN 13).

A dry run (``TableService.check``) decides as the real request would at that
moment and writes nothing; a refused or partly withheld table carries up to
five alternatives, nearest first, each answered in full when asked.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tablesafe._errors import (
    BudgetExhausted,
    RefusedError,
    RequestError,
    RiskCeilingExceeded,
    TooManyCells,
    UserError,
)
from tablesafe._request import TableRequest
from tablesafe._settings import load_site_config
from tablesafe.catalog._dataset import Dataset
from tablesafe.rules._alternatives import MAX_ALTERNATIVES, Search, nearest, request_body
from tablesafe.rules._dry_run import Verdict
from tablesafe.service import Principal
from tablesafe.service._bodies import TableBody
from tablesafe.service._service import TableService

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _sessions import research_session
from test_risk_gate import small  # noqa: F401  (the latent-class survey: a fixture)

SECRET_ENV = "TS_ALTERNATIVES_SECRET"
os.environ.setdefault(SECRET_ENV, "alternatives-test-secret-0123456789abcdef")
CKM = {
    "method": "ckm",
    "max_deviation": 3,
    "variance": 1.0,
    "seeds": "keyed",
    "secret_env": SECRET_ENV,
}
DP = {"method": "dp", "epsilon": 1.0, "cap": 40, "seeds": "keyed", "secret_env": SECRET_ENV}
#: The demo site's rules (demo/site.toml).
DEMO_RULES = {
    "max_dimensions": 3,
    "min_universe_size": 50,
    "min_cell_size": 3,
    "max_cells": 2000,
    "sliver_min_difference": 10,
}
WHO = Principal("user1", "user", 10**9)


def _site(demo_dir: Path, tmp: Path, protection: dict, keys: tuple[dict, ...] = (), **rules):
    return load_site_config(
        data={
            "base": str(tmp),
            "server": {"title": "t", "audit_db": "state.sqlite", "cache_tables": 0},
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": protection,
                    "rules": {**DEMO_RULES, **rules},
                }
            ],
            **({"keys": list(keys)} if keys else {}),
        }
    )


def _service(demo_dir: Path, tmp: Path, protection: dict = CKM, **rules) -> TableService:
    return TableService(_site(demo_dir, tmp, protection, **rules))


def _request(body: dict[str, Any]) -> TableRequest:
    return TableBody.model_validate(body).to_request()


def _state_bytes(tmp: Path, name: str = "state.sqlite") -> dict[str, bytes]:
    """The state store's content: the database and its write-ahead log (not ``-shm``,
    SQLite's shared-memory index of readers, which every read marks)."""
    paths = [tmp / name, tmp / f"{name}-wal"]
    return {p.name: p.read_bytes() for p in paths if p.exists()}


def _asked(service: TableService, request: TableRequest) -> tuple[str, Any]:
    """The real request's outcome: ("answered", withheld cells) or (error type, message)."""
    try:
        table = service.table(WHO, "demo", request)
    except UserError as exc:
        return type(exc).__name__, str(exc)
    withheld = table.withheld if table.withheld is not None else np.zeros(0, dtype=bool)
    return "answered", int(withheld.sum())


def _verdict(verdict: Verdict) -> tuple[str, Any]:
    if verdict.refusal is not None:
        return type(verdict.refusal).__name__, str(verdict.refusal)
    return "answered", len(verdict.withheld)


# -- the dry run ---------------------------------------------------------------------------------


def test_a_dry_run_decides_as_the_real_request_and_writes_nothing(demo_dir, tmp_path):
    """A researcher's session (benchmarks/_sessions.py) on the demo site's rules: before
    each table, a dry run; it leaves the state store byte-identical, and its verdict (the
    refusal's type and words, or how many cells are withheld) is the real request's."""
    service = _service(demo_dir, tmp_path)
    outcomes = set()
    try:
        # Tables first asked, then asked again under the account that grew since.
        for body in research_session(40, seed=3) + research_session(10, seed=3):
            request = _request(body)
            before = _state_bytes(tmp_path)
            verdict = service.check(WHO, "demo", request)
            assert _state_bytes(tmp_path) == before, body
            got = _asked(service, request)
            assert _verdict(verdict) == got, body
            outcomes.add(got[0])
    finally:
        service.close()
    # The session met both answers and refusals.
    assert "answered" in outcomes and len(outcomes) > 1


def test_a_dry_run_spends_and_publishes_nothing_where_the_real_request_would(demo_dir, tmp_path):
    """A sliver and a DP site with a budget: the dry runs' state is byte-identical, and the
    table is then refused or answered as the dry run said."""
    service = _service(demo_dir, tmp_path, sliver_min_difference=50)
    wide = _request({"dimensions": ["SEX"], "universe": {"AGE": list(range(30, 41))}})
    sliver = _request(
        {"dimensions": ["SEX"], "universe": {"AGE": list(range(30, 41)), "MARSTAT": [1, 2, 4]}}
    )
    try:
        assert _asked(service, wide)[0] == "answered"
        before = _state_bytes(tmp_path)
        verdict = service.check(WHO, "demo", sliver)
        assert _state_bytes(tmp_path) == before
        assert isinstance(verdict.refusal, RefusedError)
        assert _asked(service, sliver) == _verdict(verdict)
    finally:
        service.close()


def test_on_a_budgeted_site_a_dry_run_reads_no_protected_figure(demo_dir, tmp_path):
    """Where the ledger accounts the noise, the rules that read protected figures are left
    undecided (decided when asked); the ledger decides, its cost stated, nothing spent."""
    service = _service(demo_dir, tmp_path, DP, privacy_budget_epsilon=3)
    try:
        for dims in (["SEX"], ["REGION"], ["TENURE"]):
            assert _asked(service, TableRequest(tuple(dims), statistic="count"))[0] == "answered"
        before = _state_bytes(tmp_path)
        fresh = service.check(WHO, "demo", TableRequest(("MARSTAT",), statistic="count"))
        again = service.check(WHO, "demo", TableRequest(("SEX",), statistic="count"))
        assert _state_bytes(tmp_path) == before
    finally:
        service.close()
    assert isinstance(fresh.refusal, BudgetExhausted)
    assert fresh.ledger is not None and fresh.ledger.new_figures > 0
    assert fresh.ledger.budget == 3 and fresh.ledger.epsilon is not None
    assert fresh.ledger.epsilon > 3
    # A table given before: nothing new, and the account's stored decision is read.
    assert again.passes and again.ledger is not None and again.ledger.new_figures == 0
    assert "universe_size" in again.undecided and "account" not in again.undecided


# -- the suggestions: a function of the published figures and the request ------------------------


#: A universe of fewer than 50 records (the demo site's min_universe_size) in one region, whose
#: zone holds more (on tests' demo data: 42 widowed in region 2, 228 in its zone).
REFUSED = {"dimensions": ["SEX", "AGEGRP"], "universe": {"REGION": [2], "MARSTAT": [3]}}


def test_the_suggestions_are_a_function_of_the_published_state_and_the_request(demo_dir, tmp_path):
    """Two processes on byte copies of one state store, one of which checked other tables
    first (its memory differs), give the same suggestions for the same request."""
    first = _service(demo_dir, tmp_path)
    try:
        for body in research_session(15, seed=5):
            _asked(first, _request(body))
    finally:
        first.close()
    copy = tmp_path / "copy"
    copy.mkdir()
    for name, data in _state_bytes(tmp_path).items():
        (copy / name).write_bytes(data)
    busy, fresh = _service(demo_dir, tmp_path), _service(demo_dir, copy)
    request = _request(REFUSED)
    try:
        for body in research_session(10, seed=6):
            busy.check(WHO, "demo", _request(body))
        refusal = busy.check(WHO, "demo", request).refusal
        assert refusal is not None
        one = [a.to_dict() for a in busy.alternatives(WHO, "demo", request, refusal)]
        two = [a.to_dict() for a in fresh.alternatives(WHO, "demo", request, refusal)]
        again = [a.to_dict() for a in busy.alternatives(WHO, "demo", request, refusal)]
    finally:
        busy.close()
        fresh.close()
    assert one and one == two == again


# -- every refusal kind, and a partly withheld table ---------------------------------------------


def _refused_with_a_way_forward(service: TableService, request: TableRequest, kind: type) -> None:
    """``request`` is refused with ``kind``, its alternatives are nearest first, each
    request valid, and the nearest one, asked for real, is answered with no cell withheld."""
    with pytest.raises(kind) as caught:
        service.table(WHO, "demo", request)
    offered = caught.value.alternatives
    assert 1 <= len(offered) <= MAX_ALTERNATIVES, caught.value
    distances = [a.distance for a in offered]
    assert distances == sorted(distances)
    for a in offered:
        body = a.to_dict()
        assert _request(body["request"]) == a.request and body["change"]
    assert _asked(service, offered[0].request) == ("answered", 0)


def test_too_many_cells_gets_coarser_categories_first(demo_dir, tmp_path):
    service = _service(demo_dir, tmp_path)
    try:
        request = TableRequest(("AGE", "OCC", "SEX"))
        _refused_with_a_way_forward(service, request, TooManyCells)
        with pytest.raises(TooManyCells) as caught:
            service.table(WHO, "demo", request)
    finally:
        service.close()
    nearest_one = caught.value.alternatives[0]
    assert nearest_one.request.dimensions == ("AGE5", "OCC", "SEX")
    assert nearest_one.kinds == ("coarser",)
    # AGEGRP is two levels up: never offered beside AGE5, which already passes.
    assert all("AGEGRP" not in a.request.dimensions for a in caught.value.alternatives)


def test_too_many_dimensions_gets_one_dimension_fewer(demo_dir, tmp_path):
    service = _service(demo_dir, tmp_path, max_dimensions=2)
    try:
        _refused_with_a_way_forward(service, TableRequest(("SEX", "TENURE", "ZONE")), RequestError)
        with pytest.raises(RequestError) as unknown:
            service.table(WHO, "demo", TableRequest(("NOPE",)))
    finally:
        service.close()
    assert unknown.value.alternatives == ()  # nothing near a variable the catalog lacks


def test_a_universe_too_small_gets_a_wider_universe(demo_dir, tmp_path):
    service = _service(demo_dir, tmp_path)
    try:
        _refused_with_a_way_forward(service, _request(REFUSED), RefusedError)
    finally:
        service.close()


def test_a_table_past_the_withheld_share_gets_a_table_that_passes(demo_dir, tmp_path):
    service = _service(demo_dir, tmp_path, sliver_min_difference=50)
    try:
        wide = {"dimensions": ["SEX"], "universe": {"AGE": list(range(30, 41))}}
        assert _asked(service, _request(wide))[0] == "answered"
        sliver = {"dimensions": ["SEX"], "universe": {**wide["universe"], "MARSTAT": [1, 2, 4]}}
        _refused_with_a_way_forward(service, _request(sliver), RefusedError)
    finally:
        service.close()


def test_an_exhausted_budget_gets_a_table_of_figures_already_given(demo_dir, tmp_path):
    service = _service(demo_dir, tmp_path, DP, privacy_budget_epsilon=3)
    try:
        for dims in (("SEX",), ("REGION",), ("TENURE",)):
            assert _asked(service, TableRequest(dims, statistic="count"))[0] == "answered"
        request = TableRequest(("REGION", "SEX"), statistic="count")
        _refused_with_a_way_forward(service, request, BudgetExhausted)
    finally:
        service.close()


def test_a_table_past_the_risk_ceiling_gets_one_that_adds_less(small, tmp_path):  # noqa: F811
    """tests/test_risk_gate.py's refusal: three of the four three-way tables of a small
    latent-class survey, then the fourth, which raises the best guess's stable uniques past
    a ceiling between the shares without and with it."""
    from test_risk_gate import THREE_WAY, _share

    first, last = THREE_WAY[:3], THREE_WAY[3]
    ceiling = (_share(small, first) + _share(small, [*first, last])) / 2
    service = _service(
        small.path.parent, tmp_path, {"method": "ckm"},
        min_universe_size=0, min_cell_size=0, sliver_min_difference=0,
        putative_uniques_ceiling=ceiling,
    )  # fmt: skip
    try:
        for dims in first:
            body = {"dimensions": list(dims), "statistic": "count"}
            assert _asked(service, _request(body))[0] == "answered"
            # The ceiling reads what was served from the audit log (the HTTP gate's row).
            service.state.record(
                key_id=WHO.id, endpoint="POST /api/datasets/demo/tables", status=200,
                outcome="ok", client="test", dataset="demo", request=body,
            )  # fmt: skip
        request = TableRequest(last, statistic="count")
        before = _state_bytes(tmp_path)
        verdict = service.check(WHO, "demo", request)
        assert _state_bytes(tmp_path) == before  # a dry run stores no refusal
        assert isinstance(verdict.refusal, RiskCeilingExceeded)
        _refused_with_a_way_forward(service, request, RiskCeilingExceeded)
    finally:
        service.close()


def test_a_partly_withheld_table_gets_tables_answered_in_full(demo_dir, tmp_path):
    """SEX by AGEGRP, then the same without one employment status of which one age group
    holds a few records (tests/test_account.py): cells are withheld; its alternatives
    are answered in full."""
    from test_guard import _dimension_sliver

    data = pd.read_parquet(demo_dir / "microdata.parquet", columns=["AGE", "SEX", "EMPSTAT"])
    groups = Dataset.open(demo_dir).catalog.variable("AGEGRP")
    where = {a: c for c, ms in zip(groups.codes, groups.members, strict=True) for a in ms}
    data["AGEGRP"] = data["AGE"].map(where)
    status, _, _ = _dimension_sliver(data, 10)
    codes = [int(s) for s in sorted(data["EMPSTAT"].unique()) if s != status]
    service = _service(demo_dir, tmp_path, max_withheld_share=1.0)
    body = {"dimensions": ["SEX", "AGEGRP"], "universe": {"EMPSTAT": codes}}
    try:
        assert _asked(service, TableRequest(("SEX", "AGEGRP")))[0] == "answered"
        table = service.answer(WHO, "demo", TableBody.model_validate(body), alternatives=True)
        check = service.check_body(WHO, "demo", TableBody.model_validate(body))
        offered = table.alternatives
        assert check["passes"] and check["withheld"]
        assert check["alternatives"] == [a.to_dict() for a in offered]
        assert table.withheld is not None and int(table.withheld.sum()) == len(check["withheld"])
        assert offered and _asked(service, offered[0].request) == ("answered", 0)
    finally:
        service.close()


# -- the search itself ---------------------------------------------------------------------------


def test_the_order_is_the_documented_nearest(demo_dir):
    """With a dry run that answers every table of at most 200 cells (a rule of the test's own),
    the search gives the order docs/decisions.md states: cost, then the kinds of the steps,
    then the most cells; a table that makes a nearer one's changes and more never comes."""
    catalog = Dataset.open(demo_dir).catalog
    request = TableRequest(("AGE", "REGION"), universe={"SEX": (1,)})

    def cells(r: TableRequest) -> int:
        return int(np.prod([len(catalog.variable(d).categories) + 1 for d in r.dimensions]))

    def dry_run(r: TableRequest) -> Verdict:
        return Verdict(None if cells(r) <= 200 else RefusedError("too many"), cells(r))

    got = nearest(catalog, request, Search(lambda _: None, dry_run, max_dry_runs=1000))
    # AGE5 x REGION: 21 x 9 cells, one step (AGE by ZONE has 101 x 4: too many). A wider
    # universe changes no cell count; AGEGRP and ZONE, on top of AGE5, make AGE5's change
    # and more. Next: one dimension fewer (cost 3), the more cells first.
    dims = [a.request.dimensions for a in got]
    assert dims == [("AGE5", "REGION"), ("AGE",), ("REGION",)]
    assert all(cells(a.request) <= 200 for a in got)
    keys = [(a.distance, tuple(sorted(a.kinds))) for a in got]
    assert [k[0] for k in keys] == sorted(k[0] for k in keys)
    # No alternative makes every change of a nearer one and more.
    for i, a in enumerate(got):
        assert not any(set(b.changes) <= set(a.changes) for b in got[:i])


def test_a_search_runs_at_most_its_dry_runs(demo_dir):
    catalog = Dataset.open(demo_dir).catalog
    runs = []

    def refuse(r: TableRequest) -> Verdict:
        runs.append(r)
        return Verdict(RefusedError("no"))

    request = TableRequest(("AGE", "OCC", "SEX"), universe={"REGION": (1,)})
    assert nearest(catalog, request, Search(lambda _: None, refuse, max_dry_runs=7)) == []
    assert len(runs) == 7
    assert len({json.dumps(request_body(r), sort_keys=True) for r in runs}) == 7


def test_request_bodies_read_back_into_the_same_request(demo_dir):
    bodies = [
        *research_session(100, seed=1),
        {"dimensions": ["SEX", "AGE5"], "margins": "none", "se": True, "unit": "person"},
        {"dimensions": ["SEX"], "statistic": "count,median:INCOME,quantile:INCOME:0.9"},
        {"dimensions": ["SEX"], "rounding": "1000", "statistic": "weighted,sum:INCOME"},
    ]
    for body in bodies:
        request = _request(body)
        assert _request(request_body(request)) == request, body


def test_the_rate_limit_stops_a_search(demo_dir, tmp_path):
    """Each dry run of a search is counted against the key's rate limit: a key at its limit
    gets the refusal with no alternatives rather than more work done for it."""
    service = _service(demo_dir, tmp_path)
    tight = Principal("tight", "user", 3)
    try:
        request = TableRequest(("AGE", "OCC", "SEX"))
        first = service.alternatives(tight, "demo", request, TooManyCells("too many"))
        later = service.alternatives(tight, "demo", request, TooManyCells("too many"))
    finally:
        service.close()
    assert len(first) <= 3 and later == ()


def test_a_site_may_offer_none(demo_dir, tmp_path):
    service = _service(demo_dir, tmp_path, alternatives_max_dry_runs=0)
    try:
        with pytest.raises(TooManyCells) as caught:
            service.table(WHO, "demo", TableRequest(("AGE", "OCC", "SEX")))
    finally:
        service.close()
    assert caught.value.alternatives == ()


def test_copying_the_state_store_copies_its_suggestions(demo_dir, tmp_path):
    """The published state alone, restarted: shutil's copy of the files, a new process."""
    first = _service(demo_dir, tmp_path)
    try:
        _asked(first, _request({"dimensions": ["SEX"], "universe": {"REGION": [3]}}))
        before = [a.to_dict() for a in first.alternatives(WHO, "demo", _request(REFUSED))]
    finally:
        first.close()
    copy = tmp_path / "restarted"
    copy.mkdir()
    for path in (tmp_path / "state.sqlite", tmp_path / "state.sqlite-wal"):
        if path.exists():
            shutil.copy(path, copy / path.name)
    second = _service(demo_dir, copy)
    try:
        after = [a.to_dict() for a in second.alternatives(WHO, "demo", _request(REFUSED))]
    finally:
        second.close()
    assert before and before == after


# -- the HTTP API: the pre-flight check and the error body ---------------------------------------


def test_the_pre_flight_check_over_http(demo_dir, tmp_path):
    """POST .../tables:check answers as the dry run does, publishes nothing (the table's own
    request is answered afterwards as checked), writes its own audit row (not a table
    served) and is rate-limited as every request; a refusal's error body carries the same
    alternatives, each of which the API answers."""
    from fastapi.testclient import TestClient

    from tablesafe.server import create_app, hash_key

    key = "ts_alternatives_key_0123456789abcdef"
    user = {"id": "k1", "hash": hash_key(key), "role": "user", "rate_limit_per_minute": 60}
    site = _site(demo_dir, tmp_path, CKM, keys=(user,))
    with TestClient(create_app(site)) as client:
        client.headers["x-api-key"] = key
        check = client.post("/api/datasets/demo/tables:check", json=REFUSED)
        refused = client.post("/api/datasets/demo/tables", json=REFUSED)
        unknown = client.post("/api/datasets/demo/tables:check", json={"dimensions": ["NOPE"]})
        taken = client.post(
            "/api/datasets/demo/tables", json=check.json()["alternatives"][0]["request"]
        )
        state = client.app.state.service.state  # type: ignore[attr-defined]
        rows = state.query(key_id="k1", limit=1000)
        served = state.served_tables("demo")
        limited = [
            client.post("/api/datasets/demo/tables:check", json={"dimensions": ["SEX"]}).status_code
            for _ in range(60)
        ]
    assert check.status_code == 200
    answer = check.json()
    assert answer["passes"] is False and answer["refusal"]["type"] == "RefusedError"
    assert answer["refusal"] == refused.json()["error"] and answer["cells"] == 27
    assert answer["alternatives"] and answer["alternatives"] == refused.json()["alternatives"]
    assert refused.status_code == 403 and taken.status_code == 200
    assert unknown.status_code == 200 and unknown.json()["refusal"]["status"] == 400
    assert unknown.json()["alternatives"] == []
    endpoints = [r["endpoint"] for r in rows]
    assert endpoints.count("POST /api/datasets/demo/tables:check") == 2
    # Only the table asked for real was served (the check's row is its own endpoint).
    assert [body["dimensions"] for _, body in served] == [
        answer["alternatives"][0]["request"]["dimensions"]
    ]
    assert 429 in limited


# -- the command line ----------------------------------------------------------------------------


def test_the_command_line_prints_a_refusals_alternatives(demo_dir, tmp_path):
    """docs/cli.md's example: with --config, a table over max_cells is answered with the
    error and the nearest alternatives as options; the nearest, run, builds its table."""
    import subprocess

    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    config = tmp_path / "site.toml"
    config.write_text(
        "[[datasets]]\n"
        'name = "demo"\n'
        f"path = {json.dumps(str(demo_dir))}\n"
        "[datasets.protection]\n"
        'method = "ckm"\n'
        "[datasets.rules]\n" + "".join(f"{k} = {v}\n" for k, v in DEMO_RULES.items())
    )
    command = [sys.executable, "-m", "tablesafe", "table", str(demo_dir)]
    asked = ["--rows", "AGE", "--cols", "OCC", "--layers", "SEX", "--config", str(config)]
    refused = subprocess.run(command + asked, capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and refused.stdout == ""
    lines = refused.stderr.splitlines()
    assert lines[0].startswith("error: the table would have 3,036 cells")
    assert lines[2] == "  1. Age in five-year bands (AGE5) instead of Age in single years (AGE)"
    options = lines[3].split()
    assert options == ["--rows", "AGE5", "--cols", "OCC", "--layers", "SEX", "--statistic", "both"]
    built = subprocess.run(
        [*command, *options, "--config", str(config)], capture_output=True, text=True, env=env
    )
    assert built.returncode == 0 and "by Age in five-year bands" in built.stdout
    # Without a site's rules nothing is refused that an alternative would mend.
    plain = subprocess.run([*command, "--rows", "NOPE"], capture_output=True, text=True, env=env)
    assert plain.returncode == 2 and len(plain.stderr.splitlines()) == 1
