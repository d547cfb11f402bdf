"""The privacy ledger served (issue 28): budgets over HTTP, the state store, the report.

The store tests run on SQLite and on a real PostgreSQL (tests/_postgres.py),
two stores on one database standing for two processes or replicas.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

import tablesafe as ts
from tablesafe._cli import app as cli
from tablesafe.mechanisms import dp_geometric
from tablesafe.rules._admission import dataset_identity
from tablesafe.rules._ledger import BudgetExhausted, Budgets, table_figures
from tablesafe.rules._ledger_pld import ACCOUNTANT, epsilon_at, ptable_descriptor
from tablesafe.server import create_app
from tablesafe.service._ledger import NOT_DP, ledger_report
from test_server import ADMIN_KEY, USER_KEY, error_of, site

SECRET = "ledger-server-secret-0123456789"
#: A cap of 40: the dp ptable's chance of an outcome only one neighbouring count can give (about
#: e^-40 a figure) stays far below the ledger's delta of 1e-6, so its epsilon is finite.
DP = {"method": "dp", "epsilon": 1.0, "cap": 40, "seeds": "keyed", "secret_env": "TS_LEDGER_SECRET"}
DELTA = 1e-6


def _eps(n: int) -> float:
    """The accountant's epsilon at the ledger's delta of a record in ``n`` of DP's figures."""
    return epsilon_at({ptable_descriptor(dp_geometric(1.0, cap=40)): n}, DELTA)


ONE_WAY = ["SEX", "REGION", "TENURE", "MARSTAT", "EDUC", "EMPSTAT", "OCC", "HHSIZE"]


@pytest.fixture(autouse=True)
def _secret(monkeypatch):
    monkeypatch.setenv("TS_LEDGER_SECRET", SECRET)


def _table(client, dims, key=USER_KEY, fmt="csv", **body):
    return client.post(
        f"/api/datasets/demo/tables?format={fmt}",
        json={"dimensions": dims, "statistic": "count", **body},
        headers={"x-api-key": key},
    )


def test_a_dp_site_answers_three_tables_of_epsilon_1_and_refuses_a_fourth(demo_dir, tmp_path):
    # The default rules (min_universe_size 50, the sliver guard): the universe-size rule reads
    # each table's own total, a sum of its inner cells, so it spends nothing more.
    rules = {"privacy_budget_epsilon": 3}
    config = site(demo_dir, tmp_path, protection=DP, rules=rules)
    with TestClient(create_app(config)) as client:
        first = _table(client, ["SEX"])
        assert first.status_code == 200
        assert _table(client, ["REGION"]).status_code == 200
        assert _table(client, ["TENURE"], key=ADMIN_KEY).status_code == 200
        fourth = _table(client, ["MARSTAT"])
        assert fourth.status_code == 403
        err = error_of(fourth)
        assert err["type"] == "BudgetExhausted"
        assert "epsilon 4 at delta 1e-06" in err["message"]
        assert "budget of epsilon 3" in err["message"]
        assert f"3 spent, {3 - _eps(3):.4g} left" in err["message"]
        assert "already published are still answered at no cost" in err["message"]
        again = _table(client, ["SEX"])
        assert again.status_code == 200 and again.content == first.content
        # Another key, a table already published: free for the dataset.
        assert _table(client, ["SEX"], key=ADMIN_KEY).content == first.content
        admin = client.get(
            "/api/admin/datasets/demo/ledger", headers={"x-api-key": ADMIN_KEY}
        ).json()
    report = ledger_report(config, ts_state(config), "demo")
    assert report == admin
    # Three figures of epsilon 1 composed: epsilon at the site's delta, a probability.
    assert report["epsilon_spent"] == _eps(3) and round(_eps(3), 6) == 2.999997  # attacks.md
    assert report["epsilon_left"] == 3 - _eps(3)
    assert report["delta"] == DELTA and report["accountant"] == ACCOUNTANT
    assert report["budget"] == {"epsilon": 3, "epsilon_per_key": None, "delta": DELTA}
    assert report["tables"] == 3 and report["exact"]
    assert report["figures_without_epsilon_per_record"] == 0
    # A one-way table of counts publishes its inner cells (aggregate additivity): a record is
    # in one of each table's; the margins are sums of them.
    assert report["figures_per_record"] == 3
    records = report["records"]
    assert records["records"] == 20_000 and records["epsilon_max"] == pytest.approx(_eps(3))
    assert records["distribution"] == [{"epsilon": pytest.approx(_eps(3)), "records": 20_000}]
    keys = {k["key_id"]: k for k in report["keys"]}
    # user1 was given SEX and REGION, admin1 TENURE and SEX.
    assert keys["user1"]["epsilon_spent"] == keys["admin1"]["epsilon_spent"] == _eps(2)
    assert keys["user1"]["tables"] == 2 and keys["admin1"]["tables"] == 2
    assert "note" not in report


def test_the_universe_size_rule_reads_no_figure_of_its_own(demo_dir, tmp_path):
    rules = {"privacy_budget_epsilon": 2, "min_universe_size": 20}
    config = site(demo_dir, tmp_path, protection=DP, rules=rules)
    with TestClient(create_app(config)) as client:
        assert _table(client, ["REGION"]).status_code == 200
        # Inside a universe: its records are in one inner cell of each table, nothing more.
        for reg in (1, 2):
            inside = _table(client, ["SEX"], universe={"REGION": [reg]})
            assert inside.status_code == 200, inside.text
        assert error_of(_table(client, ["TENURE"]))["type"] == "BudgetExhausted"
    report = ledger_report(config, ts_state(config), "demo")
    assert report["epsilon_spent"] == _eps(2) and report["figures_per_record"] == 2
    # Records outside REGION 1 and 2 were in the REGION table's cells only.
    spread = [d["epsilon"] for d in report["records"]["distribution"]]
    assert spread == [pytest.approx(_eps(1)), pytest.approx(_eps(2))]


def ts_state(config):
    from tablesafe.state import open_state

    return open_state(config)


def test_a_per_key_budget_counts_what_the_key_was_given(demo_dir, tmp_path):
    rules = {
        "privacy_budget_epsilon": 10,
        "privacy_budget_epsilon_per_key": 2,
        "min_universe_size": 0,
    }
    config = site(demo_dir, tmp_path, protection=DP, rules=rules)
    with TestClient(create_app(config)) as client:
        assert _table(client, ["SEX"]).status_code == 200
        assert _table(client, ["REGION"]).status_code == 200
        refused = _table(client, ["TENURE"])
        assert error_of(refused)["type"] == "BudgetExhausted"
        assert "this API key's privacy budget of epsilon 2" in error_of(refused)["message"]
        assert "this key was already given are still answered" in error_of(refused)["message"]
        # The admin key has its own budget; the tables the user was given cost it too.
        for dims in (["SEX"], ["REGION"]):
            assert _table(client, dims, key=ADMIN_KEY).status_code == 200
        assert _table(client, ["TENURE"], key=ADMIN_KEY).status_code == 403
        assert _table(client, ["SEX"]).status_code == 200


def test_weighted_figures_are_counted_without_an_epsilon(demo_dir, tmp_path):
    config = site(demo_dir, tmp_path, protection=DP, rules={"min_universe_size": 0})
    with TestClient(create_app(config)) as client:
        assert _table(client, ["SEX"], statistic="both").status_code == 200
    report = ledger_report(config, ts_state(config), "demo")
    assert report["epsilon_spent"] == _eps(1) and report["figures_per_record"] == 2
    assert report["figures_without_epsilon_per_record"] == 1
    assert [(k["kind"], k["epsilon"], k["figures"]) for k in report["kinds"]] == [
        ("count", 1.0, 2),
        ("weighted", None, 2),
    ]


def test_a_site_that_is_not_dp_says_its_figures_are_a_bound(demo_dir, tmp_path):
    ckm = {"method": "ckm", "seeds": "keyed", "secret_env": "TS_LEDGER_SECRET"}
    config = site(demo_dir, tmp_path, protection=ckm)
    with TestClient(create_app(config)) as client:
        for dims in (["SEX"], ["REGION"]):
            assert _table(client, dims).status_code == 200
    report = ledger_report(config, ts_state(config), "demo")
    assert report["note"] == NOT_DP
    assert report["kinds"][0]["kind"] == "count" and not report["kinds"][0]["dp"]
    # Each figure has a chance of 0.63 of an outcome only one neighbouring count gives
    # (docs/attacks.md): no epsilon holds at a delta of 1e-6 (null in JSON), while delta
    # stays the probability it is stated at; basic composition summed it past 1.
    assert report["kinds"][0]["delta"] > 0.5 and report["figures_per_record"] >= 2
    assert report["epsilon_spent"] is None and report["delta"] == DELTA
    assert report["budget"]["epsilon"] is None


def test_a_budget_needs_an_epsilon_per_figure(demo_dir, tmp_path):
    from tablesafe._errors import ConfigError

    with pytest.raises(ConfigError, match="a privacy budget needs a mechanism"):
        site(demo_dir, tmp_path, rules={"privacy_budget_epsilon": 3})


def test_audit_ledger_prints_the_report(demo_dir, tmp_path):
    rules = {"privacy_budget_epsilon": 3, "min_universe_size": 0}
    config = site(demo_dir, tmp_path, protection=DP, rules=rules)
    with TestClient(create_app(config)) as client:
        for dims in (["SEX"], ["REGION"]):
            assert _table(client, dims).status_code == 200
    path = tmp_path / "site.toml"
    path.write_text(_toml(demo_dir))
    runner = CliRunner()
    out = runner.invoke(cli, ["audit", "ledger", "--config", str(path), "--dataset", "demo",
                              "--format", "json"])  # fmt: skip
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["epsilon_spent"] == _eps(2) and doc["epsilon_left"] == 3 - _eps(2)
    text = runner.invoke(cli, ["audit", "ledger", "--config", str(path), "--dataset", "demo"])
    assert text.exit_code == 0 and "epsilon spent" in text.output


def _toml(demo_dir):
    return f"""
[server]
audit_db = "audit.sqlite"
[[datasets]]
name = "demo"
path = "{demo_dir}"
[datasets.protection]
method = "dp"
epsilon = 1.0
cap = 40
seeds = "keyed"
secret_env = "TS_LEDGER_SECRET"
[datasets.rules]
min_universe_size = 0
privacy_budget_epsilon = 3
"""


# -- the state store: atomic with the guard, across threads and stores ----------------------


@pytest.fixture(scope="module")
def figures_of(demo_dir):
    data = ts.Dataset.open(demo_dir)
    prot = ts.Protection(dp_geometric(1.0, cap=40), seeds="keyed", secret=SECRET.encode())
    builder = ts.TableBuilder(data, prot)
    identity = dataset_identity(builder.engine, data)
    out = {}
    for name in (*ONE_WAY, "AGEGRP"):
        built = builder.run(ts.TableRequest((name,), statistic="count"))
        out[name] = table_figures(built.plan, built.table, prot, data.catalog)
    return identity, out


def _spend(store, identity, key, figures, budgets):
    try:
        with store.transaction(identity) as tx:
            if tx.ledger.check(key, figures, budgets):
                tx.spend(key, figures, "demo")
        return True
    except BudgetExhausted:
        return False


def test_simultaneous_tables_cannot_both_spend_the_last_of_a_budget(backend, figures_of):
    identity, figures = figures_of
    stores = [backend(), backend()]
    start = threading.Barrier(len(ONE_WAY))

    def ask(i):
        start.wait()
        return _spend(stores[i % 2], identity, f"k{i}", figures[ONE_WAY[i]], Budgets(epsilon=3))

    with ThreadPoolExecutor(len(ONE_WAY)) as pool:
        answered = sum(pool.map(ask, range(len(ONE_WAY))))
    assert answered == 3
    # What each store reads back: three tables, every record at epsilon 3.
    for store in stores:
        rows = store.ledger_rows(identity)
        assert len(rows) == 3
        assert not _spend(store, identity, "late", figures["AGEGRP"], Budgets(epsilon=3))
        # A table already published is free, whichever store serves it.
        key, table = rows[0][1], rows[0][3]
        assert _spend(store, identity, key, table, Budgets(epsilon=3))
    assert len(stores[0].ledger_rows(identity)) == 3


def test_a_refused_transaction_writes_nothing(backend, figures_of):
    identity, figures = figures_of
    store = backend()
    with pytest.raises(RuntimeError), store.transaction(identity) as tx:
        assert tx.ledger.check("k", figures["SEX"], Budgets())
        tx.spend("k", figures["SEX"], "demo")
        raise RuntimeError("the guard refused")
    assert store.ledger_rows(identity) == []
    assert _spend(store, identity, "k", figures["SEX"], Budgets(epsilon=1))
    assert len(backend().ledger_rows(identity)) == 1


def test_a_store_from_before_the_ledger_gains_it_and_keeps_its_rows(tmp_path, figures_of):
    import sqlite3

    from tablesafe.state import SQLiteState
    from tablesafe.state._sqlite import MIGRATIONS

    identity, figures = figures_of
    path = tmp_path / "state.sqlite"
    con = sqlite3.connect(path)
    MIGRATIONS[0](con)  # the schema's version 1: no ledger
    con.execute(
        "INSERT INTO requests (time, key_id, endpoint, status, outcome) "
        "VALUES ('2025-01-01T00:00:00.000+00:00', 'old', 'GET /api/datasets', 200, 'ok')"
    )
    con.execute("PRAGMA user_version = 1")
    con.commit()
    con.close()
    store = SQLiteState(path)
    try:
        assert [r["key_id"] for r in store.query()] == ["old"]
        assert _spend(store, identity, "k", figures["SEX"], Budgets(epsilon=1))
        assert [row[1:3] for row in store.ledger_rows(identity)] == [("k", "demo")]
    finally:
        store.close()
    con = sqlite3.connect(path)
    (size,) = con.execute("SELECT length(digests) FROM ledger_tables").fetchone()
    con.close()
    assert size == 8 * figures["SEX"].digests.size  # 8 bytes a figure


def test_a_refusal_by_the_universe_size_rule_spends_the_tables_figures(demo_dir, tmp_path):
    rules = {"privacy_budget_epsilon": 1, "min_universe_size": 50}
    config = site(demo_dir, tmp_path, protection=DP, rules=rules)
    tiny = {"AGE": [90], "REGION": [1], "SEX": [2]}
    with TestClient(create_app(config)) as client:
        first = _table(client, ["TENURE"], universe=tiny)
        assert error_of(first)["type"] == "RefusedError"
        assert "universe is too small" in error_of(first)["message"]
        # The refusal is a function of the table's figures (its total is their sum): they are
        # in the ledger as if it were answered, and the same refusal again spends nothing.
        assert error_of(_table(client, ["TENURE"], universe=tiny))["type"] == "RefusedError"
        report = client.get("/api/admin/datasets/demo/ledger", headers={"x-api-key": ADMIN_KEY})
        assert report.json()["epsilon_spent"] == _eps(1) and report.json()["tables"] == 1
        tenure = ts.Dataset.open(demo_dir).catalog.variables["TENURE"].categories
        assert report.json()["figures"] == len(tenure)
        # Another universe holding some of its records would take them to 2: the budget
        # answers, whatever the universe's size.
        wider = {"AGE": [90], "REGION": [1]}
        assert error_of(_table(client, ["TENURE"], universe=wider))["type"] == "BudgetExhausted"
        # A universe sharing no record with it fits (parallel composition).
        other = {"AGE": [90], "REGION": [2], "SEX": [2]}
        assert error_of(_table(client, ["SEX"], universe=other))["type"] == "RefusedError"
