"""The putative (best-guess) reconstruction: L1-optimal by brute force, stronger than its baseline."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tablesafe._cli._methods import protection_from_options
from tablesafe._protection import Protection
from tablesafe.attacks import all_k_way_requests, reconstruction_attack
from tablesafe.catalog._dataset import Dataset
from test_audit_reconstruct import SERVED, _config
from test_server import ADMIN_KEY, USER_KEY

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _latent_class import SIZES, write_latent_class


@pytest.fixture(scope="session", autouse=True)
def _secret() -> None:
    import os

    os.environ.setdefault("TABLESAFE_SECRET", "putative-test-secret-0123456789abcdef")


@pytest.fixture(scope="session")
def small(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """300 records, 4 variables of 3, 4, 2 and 5 categories (120 cells)."""
    return write_latent_class(tmp_path_factory.mktemp("putative") / "d", 300, seed=28)


def _attack(dataset: Dataset, method: str | None, ranked: int = 0) -> Any:
    requests = all_k_way_requests(dataset.catalog, list(SIZES), 3)
    prot = Protection(None) if method is None else protection_from_options(method)
    return reconstruction_attack(dataset, requests, prot, time_limit=30, ranked=ranked)


@pytest.fixture(scope="session")
def results(small: Dataset) -> dict[str, Any]:
    return {m or "none": _attack(small, m) for m in (None, "ckm", "dp")}


def test_unprotected_best_guess_finds_at_least_the_provable_uniques(results):
    plain = results["none"]
    guess = plain.putative
    assert guess["found"] and guess["optimal"]
    # Unprotected, the published figures are exact: the guess meets every one of them.
    assert guess["l1_to_published"] == 0
    # A cell pinned provably holds its true count in every table meeting the figures.
    assert guess["uniques_exact_share"] >= plain.uniques_exact_share
    assert guess["cells_exact_share"] >= plain.cells_exact_share


@pytest.mark.parametrize("method", ["ckm", "dp"])
def test_protected_best_guess_beats_the_one_way_baseline(results, method):
    result = results[method]
    guess = result.putative
    assert result.uniques_exact_share == 0.0  # nothing provable under noise ...
    base = guess["baseline"]
    # ... yet the best guess gets far more right than the one-way margins' guess.
    assert guess["uniques_precision"] > base["uniques_precision"] + 0.1
    assert guess["uniques_precision"] > 1.5 * guess["base_rate"]
    assert guess["cells_exact_share"] > base["cells_exact_share"] + 0.15
    assert guess["l1_distance"] < base["l1_distance"]
    assert guess["uniques_exact_share"] > 0.15


def test_scores_count_what_they_say():
    from tablesafe.attacks._reconstruct._putative import score

    truth = np.array([0, 1, 1, 2, 3, 1])
    guess = np.array([0, 1, 2, 2, 1, 0])
    out = score(guess, truth)
    assert out["cells_exact_share"] == pytest.approx(3 / 6, abs=1e-6)
    assert out["records_exact_share"] == pytest.approx((0 + 1 + 2) / 8, abs=1e-6)
    assert out["uniques_exact_share"] == pytest.approx(1 / 3, abs=1e-6)
    assert out["uniques_claimed"] == 2
    assert out["uniques_precision"] == pytest.approx(1 / 2, abs=1e-6)
    assert out["l1_distance"] == 1 + 2 + 1


def _tiny_system(rng: np.random.Generator) -> tuple[Any, Any, list[Any], Any, Any]:
    """A 2 x 3 table: its row, column and total figures, noisy, with intervals of +-2."""
    from tablesafe.rules._ceiling._constraints import System

    truth = rng.integers(0, 3, 6)
    members = [np.array([0, 1, 2]), np.array([3, 4, 5])]
    members += [np.array([c, c + 3]) for c in range(3)] + [np.arange(6)]
    exact = np.array([truth[v].sum() for v in members], dtype=np.float64)
    values = np.maximum(exact + rng.integers(-2, 3, exact.size), 0)
    rows = np.concatenate([np.full(v.size, i) for i, v in enumerate(members)])
    system = System(
        alive=np.arange(6),
        rows=rows,
        cols=np.concatenate(members),
        lo=np.maximum(values - 2, 0),
        hi=values + 2,
    )
    return system, np.full(6, 6.0), members, values, exact


def test_best_guess_is_l1_optimal_by_brute_force():
    from tablesafe.rules._ceiling._closest import closest_table

    rng = np.random.default_rng(7)
    for _ in range(15):
        system, ub0, members, values, exact = _tiny_system(rng)
        guess, optimal = closest_table(system, ub0, members, values, time_limit=10)
        assert guess is not None and optimal

        # Every table with cells 0..6 (the bound), its figures' sums, feasibility and L1.
        points = np.array(list(itertools.product(range(7), repeat=6)))
        design = np.zeros((len(members), 6))
        for i, v in enumerate(members):
            design[i, v] = 1
        sums = points @ design.T
        ok = np.all((sums >= system.lo) & (sums <= system.hi), axis=1)
        l1 = np.abs(sums - values).sum(axis=1)
        mine = design @ guess
        assert np.all((mine >= system.lo) & (mine <= system.hi))
        assert np.abs(mine - values).sum() == l1[ok].min()
        # A perturbed re-solve (the ranked reconstruction's) is still among the closest.
        costs = 0.5 / (exact[-1] + 1) * rng.uniform(0.0, 1.0, 6)
        other, optimal = closest_table(
            system, ub0, members, values, time_limit=10, perturbation=costs
        )
        assert other is not None and optimal
        assert np.abs(design @ other - values).sum() == l1[ok].min()


def _noisy_system(rng: np.random.Generator, lik: Any) -> tuple[Any, Any, list[Any], Any]:
    """A 2 x 3 table's rows, columns and total, published through a ptable (``lik``)."""
    from tablesafe.rules._ceiling._constraints import System

    truth = rng.integers(0, 3, 6)
    members = [np.array([0, 1, 2]), np.array([3, 4, 5])]
    members += [np.array([c, c + 3]) for c in range(3)] + [np.arange(6)]
    prob = np.exp(lik.matrix(30))
    values = np.array(
        [rng.choice(prob.shape[1], p=prob[int(truth[v].sum())]) for v in members], dtype=float
    )
    hull = [lik.candidates(int(j))[0] for j in values]
    system = System(
        alive=np.arange(6),
        rows=np.concatenate([np.full(v.size, i) for i, v in enumerate(members)]),
        cols=np.concatenate(members),
        lo=np.array([h.min() for h in hull], dtype=float),
        hi=np.array([h.max() for h in hull], dtype=float),
    )
    return system, np.full(6, 6.0), members, values


def _log_posterior(x: Any, members: list[Any], values: Any, lik: Any, mu: Any) -> Any:
    """Per row of ``x``: the ptable's log-likelihood of ``values`` plus the weighted prior."""
    from scipy.special import gammaln

    from tablesafe.rules._ceiling._likely import PRIOR_WEIGHT

    sums = np.stack([x[:, v].sum(axis=1) for v in members], axis=1)
    log_p = lik.matrix(40)
    top = log_p.shape[0] - 1
    cols = np.broadcast_to(values.astype(int), sums.shape)
    ll = np.where(sums <= top, log_p[np.minimum(sums, top), cols], -np.inf)
    prior = (x * np.log(mu) - gammaln(x + 1)).sum(axis=1)
    return ll.sum(axis=1) + PRIOR_WEIGHT * prior


def test_most_probable_table_is_optimal_by_brute_force():
    from tablesafe.rules._ceiling._likely import (
        likeliest_table,
        prior_means,
        ptable_likelihood,
    )

    mech = protection_from_options("ckm").mechanism
    lik = ptable_likelihood(mech, 30)
    # Each true count's published values are a distribution (those within reach of 30).
    assert np.allclose(np.exp(lik.matrix(30)[:20]).sum(axis=1), 1.0)
    rng = np.random.default_rng(11)
    points = np.array(list(itertools.product(range(7), repeat=6)))
    for _ in range(12):
        system, ub0, members, values = _noisy_system(rng, lik)
        guess, optimal = likeliest_table(system, ub0, members, values, lik, time_limit=10)
        assert guess is not None and optimal
        mu = prior_means(6, members, values)

        best = _log_posterior(points, members, values, lik, mu).max()
        assert np.isfinite(best)
        mine = _log_posterior(guess[None, :], members, values, lik, mu)[0]
        assert mine == pytest.approx(best, abs=1e-6)


def test_a_figure_published_twice_is_one_observation():
    # Record-set consistency: the same cells carry the same noise, so repeating every
    # figure changes nothing (the L1 objective would count each twice).
    from tablesafe.rules._ceiling._likely import likeliest_table, ptable_likelihood

    lik = ptable_likelihood(protection_from_options("ckm").mechanism, 30)
    rng = np.random.default_rng(5)
    for _ in range(5):
        system, ub0, members, values = _noisy_system(rng, lik)
        once, _ = likeliest_table(system, ub0, members, values, lik, time_limit=10)
        twice, _ = likeliest_table(
            system, ub0, members + members, np.r_[values, values], lik, time_limit=10
        )
        assert once is not None and twice is not None
        assert once.tolist() == twice.tolist()


def test_the_best_guess_under_ckm_finds_the_uniques_the_l1_attack_found(small, results):
    # Issue 28's done-when: at least the L1 attack's 41% of sample uniques at 50% precision
    # (within a few points), here against the same file's L1-closest table too.
    from tablesafe.attacks._reconstruct._putative import score
    from tablesafe.rules._ceiling._closest import closest_table
    from tablesafe.rules._ceiling._constraints import figures

    guess = results["ckm"].putative
    assert guess["objective"] == "posterior" and guess["optimal"]
    assert guess["uniques_exact_share"] >= 0.38
    assert guess["uniques_precision"] >= 0.47
    cat = small.catalog
    _, cross, tables, intervals, system, ub0 = _ckm_three_way(small)
    members, values = figures(cat, cross, tables, intervals, system)
    l1, _ = closest_table(system, ub0, members, values, time_limit=30)
    assert l1 is not None
    theirs = score(l1, cross.truth)
    for key in ("uniques_exact_share", "uniques_precision", "cells_exact_share"):
        assert guess[key] >= theirs[key], key


def test_ranked_reconstruction_is_deterministic_and_ranks_true_uniques_first(small):
    a = _attack(small, "ckm", ranked=12).putative["ranked_precision"]
    b = _attack(small, "ckm", ranked=12).putative["ranked_precision"]
    assert a == b
    assert a["runs"] == 12
    assert a["claimed"] > 0
    # Uniques that recur across the near-optimal tables are more often true ones.
    assert a["top_10"] >= a["all"]


def test_cli_json_on_a_clean_stdout_carries_the_putative_block(small):
    import os
    import subprocess
    import sys

    data = ["attack", "reconstruct", str(small.path.parent)]
    args = [*data, "--all-k-way", "3", "--variables", ",".join(SIZES), "--method", "dp"]
    args += ["--ranked", "3"]
    env = {**os.environ, "TABLESAFE_SECRET": "putative-test-secret-0123456789abcdef"}
    # Two processes at once (each solves for seconds), and the text of a smaller attack.
    json_runs = [[sys.executable, "-m", "tablesafe", *args, "--format", "json"]] * 2
    text_args = [*data, "--all-k-way", "2", "--variables", ",".join(SIZES), "--method", "dp"]
    started = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for cmd in [*json_runs, [sys.executable, "-m", "tablesafe", *text_args]]
    ]
    outputs = [p.communicate() for p in started]
    assert [p.returncode for p in started] == [0, 0, 0], [err for _, err in outputs]
    docs = [json.loads(out) for out, _ in outputs[:2]]  # the whole stdout is the document
    for doc in docs:
        doc.pop("seconds")
        doc["unprotected"].pop("seconds")
    assert docs[0] == docs[1]  # same request, same figures
    guess = docs[0]["putative"]
    assert guess["found"] and guess["ranked_precision"]["runs"] == 3
    assert set(guess["baseline"]) >= {"cells_exact_share", "uniques_precision"}
    assert docs[0]["unprotected"]["putative"]["l1_to_published"] == 0
    text = outputs[2][0]
    assert "Best guess" in text and "one-way margins only" in text


def test_cli_ranked_out_of_range_is_a_typed_error(small):
    from click.testing import CliRunner

    from tablesafe._cli import get_app
    from tablesafe._errors import ParameterError

    args = ["attack", "reconstruct", str(small.path.parent), "--all-k-way", "2"]
    out = CliRunner().invoke(get_app(), [*args, "--variables", "A,B", "--ranked", "-1"])
    assert isinstance(out.exception, ParameterError)
    assert "--ranked" in str(out.exception)


def test_admin_api_and_audit_command_report_the_putative_block(demo_dir, tmp_path):
    from click.testing import CliRunner
    from fastapi.testclient import TestClient

    from tablesafe._cli import get_app
    from tablesafe._settings import load_site_config
    from tablesafe.server import create_app

    served_site = _config(demo_dir, tmp_path)
    with TestClient(create_app(load_site_config(served_site))) as c:
        for body in SERVED:
            r = c.post("/api/datasets/demo/tables", json=body, headers={"x-api-key": USER_KEY})
            assert r.status_code == 200, r.text
        url = "/api/admin/datasets/demo/reconstruction?time_limit=30"
        run = c.post(url, headers={"x-api-key": ADMIN_KEY})
        assert run.status_code == 200, run.text
        out = run.json()
    for block in (out["putative"], out["unprotected"]["putative"]):
        assert block["found"]
        assert 0 <= block["uniques_precision"] <= 1
        assert 0 <= block["baseline"]["cells_exact_share"] <= 1
    args = ["audit", "reconstruct", "--config", str(served_site), "--dataset", "demo"]
    cli = CliRunner().invoke(get_app(), [*args, "--no-store", "--format", "json"])
    assert cli.exit_code == 0, cli.output
    # The same figures; each block states its own time limit (the API's 30 s, the command's 60).
    theirs = json.loads(cli.stdout)["putative"]
    assert (out["putative"]["time_limit"], theirs["time_limit"]) == (30.0, 60.0)
    assert {**theirs, "time_limit": 30.0} == out["putative"]


def test_above_posterior_max_cells_the_best_guess_is_the_l1_closest_table(small, results):
    # A size rule, not a time rule: more open cells than posterior_max_cells take the L1
    # model (the posterior's found no table on issue 15's target in 223 s); the block says so.
    from tablesafe.attacks._reconstruct._putative import (
        POSTERIOR_MAX_CELLS,
        putative_attack,
        score,
    )
    from tablesafe.rules._ceiling._closest import closest_table
    from tablesafe.rules._ceiling._constraints import figures
    from tablesafe.rules._ceiling._likely import likelihood_of

    default = results["ckm"].putative
    assert default["objective"] == "posterior"
    assert default["posterior_max_cells"] == POSTERIOR_MAX_CELLS
    assert default["time_limit"] == 30.0
    cat = small.catalog
    prot, cross, tables, intervals, system, ub0 = _ckm_three_way(small)
    open_cells = int(system.alive.size)
    lik = likelihood_of(prot)

    def attack(limit: int) -> dict[str, Any]:
        return putative_attack(
            cat, cross, tables, intervals, system, ub0, time_limit=30, likelihood=lik,
            posterior_max_cells=limit,
        )  # fmt: skip

    at = attack(open_cells)  # the limit itself still takes the posterior
    assert at["objective"] == "posterior"
    assert {k: at[k] for k in ("uniques_exact_share", "uniques_precision")} == {
        k: default[k] for k in ("uniques_exact_share", "uniques_precision")
    }
    above = attack(open_cells - 1)
    assert above["objective"] == "l1" and above["posterior_max_cells"] == open_cells - 1
    members, values = figures(cat, cross, tables, intervals, system)
    l1, optimal = closest_table(system, ub0, members, values, time_limit=30)
    assert l1 is not None and optimal and above["optimal"]
    for key, value in score(l1, cross.truth).items():
        assert above[key] == value, key


def _ckm_three_way(small):
    """The 300-record file's four 3-way tables under ckm, as the audit reads them."""
    from tablesafe._builder import TableBuilder
    from tablesafe.attacks._reconstruct import _audit
    from tablesafe.attacks._reconstruct._truth import read_truth
    from tablesafe.rules._ceiling._constraints import constraint_system
    from tablesafe.rules._ceiling._cross import atoms_of, columns_of

    cat = small.catalog
    prot = protection_from_options("ckm")
    bound = _audit._count_requests(cat, all_k_way_requests(cat, list(SIZES), 3))
    columns = columns_of(cat, bound)
    cross = read_truth(small, columns, atoms_of(cat, [r.bind(cat) for r in bound], columns))
    tables, intervals = _audit._publish(
        TableBuilder(small, prot), bound, prot, min_cell_size=0, small_cell_action="suppress",
        progress=None,
    )  # fmt: skip
    system, ub0 = constraint_system(cat, cross, tables, intervals)
    return prot, cross, tables, intervals, system, ub0
