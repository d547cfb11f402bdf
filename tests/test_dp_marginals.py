"""dp-marginals: the whole budget spent once, every table read from one model (issue 40).

The sampler is checked against the discrete Gaussian's own probabilities
(chi-square, draws from a fixed Generator's seeds), the accountant against
the zCDP bound the discrete Gaussian meets (Canonne, Kamath & Steinke 2020),
the model's marginals against the full joint distribution they come from
(brute force over the small test catalog's every combination), the tables
against each other and against the truth (the stated margins of error
cover at least 90% of the counts they are stated for), and the service's
ledger, cache, state store and two processes against the claims of
docs/dp-marginals.md. Fitting a model takes JAX a while: the release is
made once per module and kept in a state store the tests share.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tablesafe import Dataset, TableBuilder, TableRequest
from tablesafe._errors import ConfigError, ParameterError, RequestError
from tablesafe._protection import Protection
from tablesafe._release import Release, open_release
from tablesafe.attacks import averaging_attack, zero_attack
from tablesafe.mechanisms._discrete import KeyedBits, discrete_gaussian, gaussian_pmf
from tablesafe.mechanisms._marginal_model import MarginalModel
from tablesafe.mechanisms._marginals import (
    DPMarginals,
    calibrate,
    measure,
    measurement_plan,
    model_domain,
)
from tablesafe.rules._admission import dataset_identity
from tablesafe.rules._ledger import summary
from tablesafe.rules._ledger_pld import epsilon_at, release_descriptor
from tablesafe.state import SQLiteState
from tsdata import RANDOM_CATALOG, random_frame, write_dataset

SECRET = b"a-secret-of-at-least-16-bytes"

CATALOG = {
    **RANDOM_CATALOG,
    "structural_zeros": [{"A": [4], "D": [2]}],
    "magnitudes": [{"name": "X", "label": "Hours", "unit": "hours", "lower": 0, "upper": 99}],
}
BINS = (0.0, 1.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0, 60.0, 70.0, 99.0)
SPEC = DPMarginals(4.0, weight_range=(5.0, 50.0), bins={"X": BINS}, iterations=400)


def _frame(n: int = 3000) -> pd.DataFrame:
    frame = random_frame(n, seed=11)
    rng = np.random.default_rng(5)
    # Hours depend on A: a relation the 2-way marginals hold.
    frame["X"] = np.round(rng.gamma(4.0, 4.0 + 3.0 * frame["A"].to_numpy()), 0).clip(0, 99)
    return frame


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The test dataset, a state store holding its release, and the release."""
    root = tmp_path_factory.mktemp("dpm")
    frame = _frame()
    dataset = write_dataset(root / "data", frame, CATALOG)
    store = SQLiteState(root / "state.sqlite")
    builder = TableBuilder(dataset, Protection(SPEC, secret=SECRET))
    builder.release_store = store
    release = builder.release()
    assert release is not None
    yield {"root": root, "dataset": dataset, "frame": frame, "store": store,
           "builder": builder, "release": release}  # fmt: skip
    store.close()


def _truth(dataset: Dataset) -> TableBuilder:
    return TableBuilder(dataset, Protection(None))


# -- the sampler and the accountant -------------------------------------------------------


def _streams(seed: int, n: int) -> list[KeyedBits]:
    rng = np.random.default_rng(seed)
    return [KeyedBits(rng.bytes(32)) for _ in range(n)]


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(9, 4), Fraction(146, 1)])
def test_discrete_gaussian_is_exact(sigma2):
    n = 8000
    draws = np.array([discrete_gaussian(b, sigma2) for b in _streams(int(sigma2 * 4), n)])
    reach = int(12 * math.sqrt(sigma2)) + 2
    support = np.arange(-reach, reach + 1)
    expected = n * np.array([gaussian_pmf(int(y), float(sigma2)) for y in support])
    # Bins of at least 20 expected draws, the tails pooled into the outer ones.
    edges, acc = [], 0.0
    for y, e in zip(support, expected, strict=True):
        acc += e
        if acc >= 20:
            edges.append(y)
            acc = 0.0
    edges[-1] = reach
    observed = np.bincount(np.searchsorted(edges, np.clip(draws, -reach, reach)))
    want = np.array(
        [e.sum() for e in np.split(expected, np.searchsorted(support, edges[:-1], "right"))]
    )
    want *= n / want.sum()
    assert stats.chisquare(observed, want).pvalue > 1e-3
    # The variance is close to sigma**2 (the discrete Gaussian's is a little below it).
    assert abs(draws.var() / float(sigma2) - 1) < 0.1


def test_discrete_gaussian_refuses_a_zero_sigma():
    with pytest.raises(ValueError, match="positive"):
        discrete_gaussian(KeyedBits(b"x"), Fraction(0))


def test_calibrate_spends_at_most_the_budget_and_no_less_than_needed():
    from tablesafe.mechanisms._marginals import _pld_epsilon

    for k, eps, delta in [(10, 1.0, 1e-6), (65, 4.0, 1e-9)]:
        sigma2 = calibrate(k, eps, delta)
        assert _pld_epsilon(sigma2, k, delta) <= eps
        assert _pld_epsilon(sigma2 - Fraction(1, 1000), k, delta) > eps
        # Each measurement is 1/(2 sigma^2)-zCDP (CKS 2020, Theorem 14): the zCDP
        # conversion (Bun & Steinke 2016, Prop. 1.3) is a looser bound on the same noise.
        rho = k / (2 * float(sigma2))
        assert rho + 2 * math.sqrt(rho * math.log(1 / delta)) > eps


def test_measurements_are_keyed_and_repeatable(site):
    release: Release = site["release"]
    frame = site["frame"]
    domain, plan = release.domain, release.plan
    records = {"A": np.searchsorted([1, 2, 3, 4], frame["A"])}
    one = measure(records, domain, [("A",)], release.sigma2, b"k" * 32)
    assert np.array_equal(one[0], measure(records, domain, [("A",)], release.sigma2, b"k" * 32)[0])
    other = measure(records, domain, [("A",)], release.sigma2, b"j" * 32)
    assert not np.array_equal(one[0], other[0])
    # The release's measurements are its plan's, noisy around the truth by sigma.
    truth = np.bincount(records["A"], minlength=4)
    noise = np.concatenate([release.measured[plan.index(("A",))] - truth])
    assert np.all(np.abs(noise) < 6 * release.sigma)


def test_the_plan_is_chosen_before_the_data_and_within_the_model_size(site):
    dataset: Dataset = site["dataset"]
    domain = model_domain(dataset.catalog, SPEC)
    plan = measurement_plan(dataset.catalog, domain, SPEC)
    assert plan == site["release"].plan
    ones = [c for c in plan if len(c) == 1]
    assert {c[0] for c in ones} == {a for a, _ in domain.attributes}
    small = DPMarginals(4.0, weight_range=(5.0, 50.0), bins={"X": BINS}, max_model_mib=0.001)
    fewer = measurement_plan(dataset.catalog, domain, small)
    assert set(fewer) < set(plan)


# -- the model ------------------------------------------------------------------------------


def test_model_marginals_are_those_of_its_full_joint(site):
    model = site["release"].model
    attrs = tuple(dict.fromkeys(a for c in model.cliques for a in c))
    joint = model.marginal(attrs)
    assert joint.sum() == pytest.approx(model.total)
    rng = np.random.default_rng(3)
    for _ in range(12):
        k = int(rng.integers(1, 4))
        want = tuple(rng.choice(attrs, k, replace=False))
        gone = tuple(i for i, a in enumerate(attrs) if a not in want)
        brute = np.transpose(
            joint.sum(axis=gone), [[a for a in attrs if a in want].index(a) for a in want]
        )
        assert np.allclose(model.marginal(want), brute, rtol=1e-9, atol=1e-6)
    for clique, arr in zip(model.cliques, model.marginals, strict=True):
        assert np.allclose(model.marginal(clique), arr)


def _tree_model(rng: np.random.Generator) -> tuple[MarginalModel, tuple[str, ...], np.ndarray]:
    """A random junction tree's model, its attributes, and the joint distribution it holds.

    Each new clique is part of an earlier one (the separator) and fresh
    attributes, so the cliques keep the running intersection; the joint is a
    product of random positive potentials on the cliques (counts of 1,000 in all),
    which the cliques' marginals over their separators give back.
    """
    cliques: list[tuple[str, ...]] = [("a0", "a1", "a2")]
    edges: list[tuple[int, int]] = []
    while len(cliques) < 7:
        up = int(rng.integers(len(cliques)))
        k = int(rng.integers(1, len(cliques[up])))
        sep = tuple(rng.choice(cliques[up], k, replace=False))
        n = sum(len(c) for c in cliques)
        cliques.append(sep + tuple(f"a{n + i}" for i in range(int(rng.integers(1, 3)))))
        edges.append((up, len(cliques) - 1))
    attrs = tuple(dict.fromkeys(a for c in cliques for a in c))
    sizes = {a: int(rng.integers(2, 4)) for a in attrs}
    joint = np.ones([sizes[a] for a in attrs])
    for c in cliques:
        potential = rng.uniform(0.2, 1.0, [sizes[a] for a in c])
        joint = joint * _on(potential, c, attrs)
    joint *= 1000.0 / joint.sum()
    marginals = tuple(_sum_to(joint, attrs, c) for c in cliques)
    model = MarginalModel(tuple(cliques), marginals, tuple(edges), 1000.0)
    return model, attrs, joint


def _on(arr: np.ndarray, own: tuple[str, ...], attrs: tuple[str, ...]) -> np.ndarray:
    """``arr`` (axes ``own``) broadcast over ``attrs``."""
    order = sorted(own, key=attrs.index)
    moved = np.transpose(arr, [own.index(a) for a in order])
    return moved.reshape([moved.shape[order.index(a)] if a in own else 1 for a in attrs])


def _sum_to(joint: np.ndarray, attrs: tuple[str, ...], want: tuple[str, ...]) -> np.ndarray:
    summed = joint.sum(axis=tuple(i for i, a in enumerate(attrs) if a not in want))
    left = [a for a in attrs if a in want]
    return np.transpose(summed, [left.index(a) for a in want])


def test_model_marginals_are_those_of_a_random_trees_joint():
    rng = np.random.default_rng(17)
    for _ in range(8):
        model, attrs, joint = _tree_model(rng)
        for _ in range(10):
            want = tuple(rng.choice(attrs, int(rng.integers(1, 5)), replace=False))
            assert np.allclose(model.marginal(want), _sum_to(joint, attrs, want), rtol=1e-9)
        assert np.allclose(model.marginal(attrs), joint, rtol=1e-9)


def test_a_marginal_across_many_cliques_stays_small():
    # A root clique of six attributes, and six cliques that each add one attribute to
    # one of them: the marginal of the six added attributes. Multiplying every
    # message before summing takes 4**12 cells (134 MB; a demo table asked 53 GiB so),
    # summing each attribute out once its factors are multiplied at most 4**7.
    import tracemalloc

    rng = np.random.default_rng(2)
    root = ("r0", "r1", "r2", "r3", "r4", "r5")
    joint_root = rng.uniform(0.5, 1.0, (4,) * 6)
    joint_root *= 1000.0 / joint_root.sum()
    cliques, marginals, given = [root], [joint_root], []
    for i, r in enumerate(root):
        p = rng.uniform(0.1, 1.0, (4, 4))
        p /= p.sum(axis=1, keepdims=True)  # P(f | r)
        given.append(p)
        cliques.append((r, f"f{i}"))
        marginals.append(_sum_to(joint_root, root, (r,))[:, None] * p)
    model = MarginalModel(tuple(cliques), tuple(marginals), tuple((0, i) for i in range(1, 7)),
                          1000.0)  # fmt: skip
    fresh = tuple(f"f{i}" for i in range(6))
    tracemalloc.start()
    try:
        out = model.marginal(fresh)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 4**8  # bytes: a few arrays of 4**7 doubles
    assert out.shape == (4,) * 6 and out.sum() == pytest.approx(1000.0)
    by_hand = np.einsum("ab,ac,bd->cd", _sum_to(joint_root, root, ("r0", "r1")), *given[:2])
    assert np.allclose(_sum_to(out, fresh, ("f0", "f1")), by_hand, rtol=1e-9)


def test_release_round_trips_through_bytes(site):
    release: Release = site["release"]
    again = Release.from_bytes(release.to_bytes(), release.spec, release.domain, release.digest)
    assert again.plan == release.plan and again.sigma2 == release.sigma2
    for a, b in zip(again.model.marginals, release.model.marginals, strict=True):
        assert np.array_equal(a, b)


# -- tables ---------------------------------------------------------------------------------


def test_a_figure_is_the_same_in_every_table_that_publishes_it(site):
    builder: TableBuilder = site["builder"]
    ab = builder.build(TableRequest(("A", "B"), statistic="both"))
    ba = builder.build(TableRequest(("B", "A"), statistic="both", margins="none"))
    b_in_a = builder.build(TableRequest(("B",), universe={"A": [1]}, statistic="both"))
    a_only = builder.build(TableRequest(("A",), statistic="both"))
    assert np.array_equal(ab.counts[:-1, :-1], ba.counts[:-1, :-1].T)
    assert np.array_equal(ab.counts[0, :], b_in_a.counts)
    assert np.array_equal(ab.counts[:, -1], a_only.counts)
    assert np.allclose(ab.weighted[:, -1], a_only.weighted)
    # A grouping is the model's sum over its codes: CG's "lo" is C in 0..3.
    cg = builder.build(TableRequest(("CG",), statistic="count"))
    c = builder.build(TableRequest(("C",), universe={"C": [0, 1, 2, 3]}, statistic="count"))
    assert cg.counts[0] == c.counts[-1]


def test_tables_are_close_to_the_truth_within_their_margins(site):
    builder: TableBuilder = site["builder"]
    truth = _truth(site["dataset"])
    covered = inside = 0
    for dims in [("A",), ("B", "C"), ("A", "D"), ("CG", "E"), ("B", "D", "E")]:
        for universe in [{}, {"A": [1, 2]}, {"E": [10]}]:
            if set(universe) & set(dims):
                continue
            req = TableRequest(dims, universe=universe, statistic="count")
            pub, true = builder.build(req), truth.build(req)
            margin = np.array(pub.metadata["release"]["count_margin_of_error"], dtype=float)
            has = ~np.isnan(margin) & pub.computed
            covered += int(has.sum())
            inside += int((np.abs(pub.counts - true.counts)[has] <= margin[has] + 0.5).sum())
    assert covered > 100
    assert inside / covered >= 0.9


def test_weighted_figures_percentages_and_means(site):
    builder: TableBuilder = site["builder"]
    truth = _truth(site["dataset"])
    req = TableRequest(("A",), statistic="weighted,mean:X,percent:total")
    pub, true = builder.build(req), truth.build(req)
    assert pub.weighted is not None and pub.percentages is not None
    # The large cells' weighted counts and mean hours are within 10% (bins of the weight
    # and of the hours: each record at its bin's midpoint).
    big = true.weighted[:3] > 5000
    assert np.all(np.abs(pub.weighted[:3][big] / true.weighted[:3][big] - 1) < 0.1)
    mean = pub.magnitudes["mean_X_weighted"]
    assert np.all(np.abs(mean[:3] / true.magnitudes["mean_X_weighted"][:3] - 1) < 0.1)
    # Percentages are of the model's weighted counts: they add up to 100.
    assert pub.percentages["percent_total"][:-1].sum() == pytest.approx(100, abs=0.05)


def test_what_it_does_not_publish_is_refused_naming_what_it_does(site):
    builder: TableBuilder = site["builder"]
    for req, what in [
        (TableRequest(("A",), replicates=True), "no standard errors"),
        (TableRequest(("A",), statistic="count,median:X"), "no medians"),
    ]:
        with pytest.raises(RequestError, match="counts, weighted counts, percentages") as err:
            builder.build(req)
        assert what in str(err.value)
    plain = TableBuilder(site["dataset"], Protection(DPMarginals(4.0), secret=SECRET))
    with pytest.raises(RequestError, match="ask for statistic count"):
        plain.build(TableRequest(("A",), statistic="weighted"))
    with pytest.raises(RequestError, match="not mean:X"):
        plain.build(TableRequest(("A",), statistic="count,mean:X"))


def test_a_secret_is_needed():
    with pytest.raises(ParameterError, match="secret"):
        Protection(DPMarginals(4.0))


# -- attacks --------------------------------------------------------------------------------


def test_averaging_gains_nothing(site):
    builder: TableBuilder = site["builder"]
    truth = _truth(site["dataset"])
    result = averaging_attack(
        builder.build,
        truth.build,
        None,  # every form publishes one value: the intruder's likelihood does not matter
        method="dp-marginals",
        variable="C",
        targets=[0, 1],
        pad=[2, 3, 4, 5, 6, 7, 8, 9],
        universe={},
        second="B",
        grouping_of="E",
        grouping_codes=[10, 20, 30],
        tables=40,
    )
    assert result.refused == 0
    assert all(c.distinct == 1 for c in result.cells)
    assert all(c.estimate_all == c.estimate_first for c in result.cells)


def test_zero_attack_stays_within_the_stated_figures(site):
    builder: TableBuilder = site["builder"]
    truth = _truth(site["dataset"])
    requests = [
        TableRequest(("C", "B", "E"), universe={"A": [a]}, statistic="count") for a in (1, 2, 3)
    ]
    requests += [
        TableRequest(("C", "B", "D"), universe={"E": [e]}, statistic="count") for e in (10, 20, 30)
    ]
    result = zero_attack(builder.build, truth.build, requests, method="dp-marginals",
                         epsilon=SPEC.epsilon, delta=SPEC.delta)  # fmt: skip
    assert result.zeros + result.ones > 20
    assert result.holds()


def test_the_attack_commands_read_a_sites_release(site, monkeypatch):
    import json

    import tomli_w
    from click.testing import CliRunner

    import tablesafe._release as rel
    from tablesafe._cli import get_app

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the release was fitted again")

    # The commands read the release the site's state store keeps (the server's).
    monkeypatch.setattr(rel, "fit", refuse)
    config = site["root"] / "site.toml"
    config.write_text(tomli_w.dumps(_site(site["root"])))
    env = {"TS_DPM_SECRET": SECRET.decode()}
    common = [str(site["root"] / "data"), "--config", str(config), "--format", "json"]
    averaging = CliRunner().invoke(
        get_app(),
        ["attack", "averaging", *common, "--variable", "C", "--targets", "0,1", "--pad", "2..9",
         "--second", "B", "--grouping-of", "E", "--magnitude", "X", "--tables", "12"],
        env=env,
    )  # fmt: skip
    assert averaging.exit_code == 0, averaging.output
    (result,) = json.loads(averaging.output)
    assert result["refused"] == 0 and result["cells"]
    assert all(c["distinct"] == 1 and c["sum_distinct"] == 1 for c in result["cells"])
    assert all(c["estimate_all"] == c["estimate_first"] for c in result["cells"])
    zeros = CliRunner().invoke(
        get_app(), ["attack", "zeros", *common, "--variables", "A,B,C,D"], env=env
    )
    assert zeros.exit_code == 0, zeros.output
    (result,) = json.loads(zeros.output)
    assert (result["epsilon"], result["delta"]) == (SPEC.epsilon, SPEC.delta)
    assert result["stated_figures_hold"]


# -- the service ----------------------------------------------------------------------------


def _site_config(root: Path, **rules: object) -> object:
    from tablesafe._settings import load_site_config

    return load_site_config(data={"base": str(root), **_site(root, **rules)})


def _site(root: Path, **rules: object) -> dict[str, object]:
    """The site's settings (as its TOML file holds them): the test dataset, its state store."""
    return {
        "server": {"title": "t", "audit_db": str(root / "state.sqlite"), "cache_tables": 0},
        "datasets": [
            {
                "name": "rand",
                "path": str(root / "data"),
                "protection": {
                    "method": "dp-marginals",
                    "epsilon": 4.0,
                    "secret_env": "TS_DPM_SECRET",
                    "marginals": {
                        "weight_range": [5.0, 50.0],
                        "bins": {"X": list(BINS)},
                        "iterations": 400,
                    },
                },
                "rules": {"min_universe_size": 0, **rules},
            }
        ],
    }


def test_the_ledger_shows_one_spend_whatever_the_tables(site, monkeypatch):
    from tablesafe.service import Principal
    from tablesafe.service._service import TableService

    monkeypatch.setenv("TS_DPM_SECRET", SECRET.decode())
    config = _site_config(site["root"], privacy_budget_epsilon=4.0,
                          privacy_budget_epsilon_per_key=4.0)  # fmt: skip
    service = TableService(config)
    try:
        dims = ["A", "B", "C", "D", "E"]
        tables = [TableRequest(p, statistic="count") for p in itertools.permutations(dims, 2)]
        for who in ("ann", "bob"):
            for req in tables:
                service.table(Principal(who, "user", 10**9), "rand", req)
        identity = service.identity("rand")
        with service.state.transaction(identity) as tx:
            dataset_account = summary(tx.ledger.dataset)
            ann = summary(tx.ledger.key("ann"))
            # Stated at the release's own delta, no record's loss passes the site's total.
            at_release = summary(tx.ledger.dataset, SPEC.delta)["epsilon_spent"]
        assert dataset_account["tables"] == 1 and dataset_account["figures"] == 1
        # The accountant states the release's discrete Gaussians at the site's delta
        # (1e-6): at most the release's epsilon, which holds at its own delta 1e-9.
        release: Release = site["release"]
        descriptor = release_descriptor(4.0, SPEC.delta, str(release.sigma2), len(release.plan))
        spent = dataset_account["epsilon_spent"]
        assert spent == pytest.approx(epsilon_at({descriptor: 1}, 1e-6))
        assert 3.0 < spent <= 4.0
        assert epsilon_at({descriptor: 1}, SPEC.delta) <= 4.0 + 0.05  # the grid of 0.01
        assert ann["epsilon_spent"] == spent
        assert 3.9 < at_release <= SPEC.epsilon
    finally:
        service.close_engines()


def test_a_restart_and_another_process_serve_the_same_bytes(site, monkeypatch):
    from tablesafe.service import Principal
    from tablesafe.service._service import TableService

    monkeypatch.setenv("TS_DPM_SECRET", SECRET.decode())
    req = TableRequest(("B", "CG"), universe={"A": [1, 2]}, statistic="weighted,mean:X")
    service = TableService(_site_config(site["root"]))
    try:
        here = service.table(Principal("ann", "user", 10**9), "rand", req).to_json_bytes()
    finally:
        service.close_engines()
    # Another process on the same state store reads the release (its fit would refuse).
    script = textwrap.dedent(
        f"""
        import sys, os
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import tablesafe.mechanisms._marginal_model as mm
        def refuse(*a, **k):
            raise SystemExit("the release was fitted again")
        mm.fit = refuse
        import tablesafe._release as rel
        rel.fit = refuse
        from test_dp_marginals import _site_config
        from tablesafe import TableRequest
        from tablesafe.service import Principal
        from tablesafe.service._service import TableService
        from pathlib import Path
        config = _site_config(Path({str(site["root"])!r}))
        service = TableService(config)
        req = TableRequest(("B", "CG"), universe={{"A": [1, 2]}}, statistic="weighted,mean:X")
        sys.stdout.buffer.write(service.table(Principal("bob", "user", 10**9), "rand", req).to_json_bytes())
        """
    )
    env = {**__import__("os").environ, "TS_DPM_SECRET": SECRET.decode()}
    there = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, env=env, check=True
    ).stdout
    assert there == here


def test_the_state_store_keeps_the_first_release(backend):
    one, two = backend(), backend()
    try:
        assert one.load_release("identity", "digest") is None
        assert one.store_release("identity", "digest", b"first") == b"first"
        # Another process that made it at the same time serves the stored one.
        assert two.store_release("identity", "digest", b"second") == b"first"
        assert two.load_release("identity", "digest") == b"first"
        assert two.load_release("identity", "other") is None
    finally:
        one.close()
        two.close()


def test_the_release_is_made_once_per_identity(site):
    builder: TableBuilder = site["builder"]
    identity = dataset_identity(builder.engine, site["dataset"])
    again = open_release(builder, identity, site["store"])
    assert again.digest == site["release"].digest
    assert np.array_equal(again.measured[0], site["release"].measured[0])


def test_site_settings_refuse_what_cannot_work(site, monkeypatch):
    monkeypatch.setenv("TS_DPM_SECRET", SECRET.decode())
    with pytest.raises(ConfigError, match="below the release's epsilon"):
        _site_config(site["root"], privacy_budget_epsilon=3.0)
    with pytest.raises(ConfigError, match="publishes no standard errors"):
        _site_config(site["root"], max_rse=30)
    with pytest.raises(ConfigError, match="remove putative_uniques_ceiling"):
        _site_config(site["root"], putative_uniques_ceiling=0.02)
    monkeypatch.delenv("TS_DPM_SECRET")
    from tablesafe._settings import ProtectionSettings

    with pytest.raises(ValueError, match="needs secret_env or secret_file"):
        ProtectionSettings(method="dp-marginals")


def test_a_check_decides_as_the_request_and_spends_nothing(site, monkeypatch):
    """The pre-flight check of a dp-marginals site (issue 40): the ledger, then the release.

    A key not yet given the release is told what its first table costs and that
    the universe-size rule waits for the request (no check reads a release the
    key was not charged for); once given it, every check answers as the request.
    """
    from tablesafe._errors import RefusedError
    from tablesafe.service import Principal
    from tablesafe.service._service import TableService

    monkeypatch.setenv("TS_DPM_SECRET", SECRET.decode())
    service = TableService(_site_config(site["root"], min_universe_size=300))
    cora = Principal("cora", "user", 10**9)
    identity = service.identity("rand")
    requests = [
        TableRequest(("B",), universe={"A": [a], "C": [c]}, statistic="count")
        for a in (1, 2, 3)
        for c in (0, 5)
    ] + [TableRequest(("B", "D"), universe={"A": [1, 2]}, statistic="count")]
    try:
        first = service.check(cora, "rand", requests[-1])
        assert first.passes and first.undecided == ("universe_size",)
        assert first.ledger is not None and first.ledger.new_figures == 1
        with service.state.transaction(identity) as tx:
            assert summary(tx.ledger.key("cora"))["figures"] == 0
        service.table(cora, "rand", requests[-1])
        outcomes = set()
        for req in requests:
            verdict = service.check(cora, "rand", req)
            assert verdict.undecided == () and verdict.ledger.new_figures == 0
            try:
                table = service.table(cora, "rand", req)
            except RefusedError as exc:  # the real request's refusal, word for word
                assert verdict.refusal is not None
                assert (type(exc), str(exc)) == (type(verdict.refusal), str(verdict.refusal))
                # ... with a way forward the same rules answer (a wider universe).
                assert exc.alternatives
                assert set(exc.alternatives[0].kinds) <= {"wider", "universe"}
                assert service.table(cora, "rand", exc.alternatives[0].request) is not None
                outcomes.add("refused")
            else:
                assert verdict.passes, verdict.refusal
                assert verdict.cells == int(table.computed.sum())
                outcomes.add("answered")
        assert outcomes == {"refused", "answered"}
    finally:
        service.close_engines()
