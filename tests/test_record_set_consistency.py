"""Record-set consistency (DESIGN decision 2, issue 25): the same records get the same value.

The attacks of issue 25 as tests: averaging equivalent tables (widened
universes, dimension orders, one-category groupings, margins) recovers
nothing under cell-key and keyed seeds and does under Li & Krenzke's dynamic
seeds; DP's stated (epsilon, delta) holds between empty and one-record cells;
empty cells are drawn from their canonical definitions.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import tablesafe as ts
from tablesafe._errors import ParameterError, RequestError
from tablesafe._protection import Protection
from tablesafe._seeds import canonical_definitions, definition_words, keyed_words
from tablesafe.attacks._averaging import averaging_attack, likelihoods
from tablesafe.attacks._zeros import definition_attack, zero_attack
from tablesafe.mechanisms import dp_geometric, drop_add_q, drop_add_records, pram_shlomo_young
from tablesafe.mechanisms._ptable_cache import cached_destatis

SECRET = b"record-set-consistency-secret-01"
TARGETS = list(range(81, 90))  # AGE 81..89 in REGION 2: counts 0..5 by SEX
PAD = list(range(20, 61))


@pytest.fixture(scope="module")
def demo(demo_dir):
    return ts.Dataset.open(demo_dir)


def _truth(dataset):
    return ts.TableBuilder(dataset, Protection(None)).build


def _attack(dataset, prot, tables=40, magnitude="INCOME"):
    educ = list(dataset.catalog.variable("EDUC").codes)
    return averaging_attack(
        ts.TableBuilder(dataset, prot).build,
        _truth(dataset),
        prot.effective_mechanism(),
        method=f"{prot.describe()['name']}/{prot.seeds}",
        variable="AGE",
        targets=TARGETS,
        pad=PAD,
        universe={"REGION": [2]},
        second="SEX",
        grouping_of="EDUC",
        grouping_codes=educ,
        magnitude=magnitude,
        tables=tables,
        rng=np.random.default_rng(3),
    )


CONSISTENT = {
    "ckm-cellkey": lambda: Protection(cached_destatis(3, 1.0, 0)),
    "ckm-keyed": lambda: Protection(cached_destatis(3, 1.0, 0), seeds="keyed", secret=SECRET),
    "dp-keyed": lambda: Protection(dp_geometric(1.0, cap=5), seeds="keyed", secret=SECRET),
    "q-cellkey-secret": lambda: Protection(drop_add_q(rate=0.05), secret=SECRET),
    "pram-keyed": lambda: Protection(pram_shlomo_young(), seeds="keyed", secret=SECRET),
    "q-records-keyed": lambda: Protection(drop_add_records(rate=0.2), seeds="keyed", secret=SECRET),
}


@pytest.mark.parametrize("name", sorted(CONSISTENT))
def test_averaging_equivalent_tables_gives_one_value_per_cell(demo, name):
    prot = CONSISTENT[name]()
    result = _attack(demo, prot)
    assert result.refused == 0
    assert len(result.cells) == 2 * len(TARGETS)
    # Some target cells are small (0..5 records), so the attack has something to find.
    assert any(0 < c.true <= 3 for c in result.cells)
    for cell in result.cells:
        assert cell.distinct == 1, cell
        assert cell.estimate_all == cell.estimate_first, cell
        assert cell.sum_distinct == 1, cell
        assert cell.sum_error_mean == pytest.approx(cell.sum_error_first)


def test_averaging_under_dynamic_seeds_recovers_counts(demo):
    # The "before": Li & Krenzke's seeds hash the universe's key sum, so every
    # widened universe draws afresh and the estimate improves with the tables.
    prot = Protection(cached_destatis(3, 1.0, 0), seeds="dynamic", secret=SECRET)
    result = _attack(demo, prot, tables=60)
    nonzero = [c for c in result.cells if c.true > 0]
    assert all(c.distinct > 1 for c in nonzero)
    assert sum(c.estimate_all == c.true for c in nonzero) > sum(
        c.estimate_first == c.true for c in nonzero
    )
    assert sum(c.estimate_all == c.true for c in nonzero) >= 0.8 * len(nonzero)
    assert sum(c.sum_distinct > 1 for c in nonzero) >= 0.5 * len(nonzero)


def test_likelihoods_are_the_ptable_rows():
    ptable = dp_geometric(1.0, cap=5)
    for y in (0, 1, 4):
        lik = likelihoods(ptable, y)
        for n in (0, 1, 3, 9):
            assert lik[n] == pytest.approx(ptable.distribution(n).get(y, 0.0))
    records = drop_add_records(rate=0.2)
    lik = likelihoods(records, 10)
    q = int(records.q(np.array([10]))[0])
    assert lik[10] == pytest.approx(1 / (2 * q + 1))
    assert lik[10 + 3 * q + 5] == 0


# -- canonical definitions of cells ------------------------------------------------------------


def _definitions(dataset, request, secret=SECRET):
    builder = ts.TableBuilder(dataset, Protection(None))
    plan, _ = builder.plans(request.coerced(dataset.catalog))
    shape = plan.shape
    keyed = {}
    for idx in np.ndindex(*shape):
        mask = np.zeros(shape, dtype=bool)
        mask[idx] = True
        keyed[idx] = builder.definitions(plan, mask)[0]
    return plan, keyed


def _by_codes(plan, keyed):
    out = {}
    for idx, d in keyed.items():
        cell = frozenset(
            (dim.column, dim.codes[i] if i < len(dim.codes) else "_T")
            for dim, i in zip(plan.dimensions, idx, strict=True)
        )
        out[cell] = d
    return out


def test_equivalent_requests_give_the_same_definitions(demo):
    cat = demo.catalog
    all_sex = list(cat.variable("SEX").codes)
    a = ts.TableRequest(("AGEGRP", "SEX"), universe={"REGION": [1, 2, 3]})
    b = ts.TableRequest(("SEX", "AGEGRP"), universe={"SEX": all_sex, "ZONE": ["N"]}, margins="none")
    zone_n = set(cat.variable("ZONE").source_codes("N"))
    assert zone_n == {1, 2, 3}
    da = _by_codes(*_definitions(demo, a))
    db = _by_codes(*_definitions(demo, b))
    assert da == db


def test_different_cells_have_different_definitions(demo):
    request = ts.TableRequest(("AGEGRP", "EDUC", "SEX"), universe={"REGION": [4]})
    _, keyed = _definitions(demo, request)
    assert len(set(keyed.values())) == len(keyed)
    other = ts.TableRequest(("AGEGRP", "EDUC", "SEX"), universe={"REGION": [5]})
    _, keyed2 = _definitions(demo, other)
    assert not set(keyed.values()) & set(keyed2.values())


def test_canonical_definitions_by_brute_force():
    # Two dimensions on columns A and B, a universe on A and C; codes 0..3 each.
    all_codes = {c: [0, 1, 2, 3] for c in "ABC"}
    dims = [("B", [(0,), (1, 2)]), ("A", [(0,), (1,), (3,)])]
    universe = [("A", (0, 1, 3)), ("C", (0, 1, 2, 3))]
    coords = tuple(np.array(x) for x in zip(*itertools.product(range(3), range(4)), strict=True))
    got = canonical_definitions(dims, universe, all_codes, coords)
    for (i, j), d in zip(itertools.product(range(3), range(4)), got, strict=True):
        b = {0, 1, 2} if i == 2 else set(dims[0][1][i])
        a = {0, 1, 3} if j == 3 else set(dims[1][1][j])
        expect = b"".join(
            json.dumps([col, [f"i{c}" for c in sorted(allowed)]], separators=(",", ":")).encode()
            for col, allowed in sorted({"A": a & {0, 1, 3}, "B": b}.items())
            if allowed != {0, 1, 2, 3}
        )
        assert d == expect  # C names every code: it restricts nothing


def test_empty_cells_do_not_share_draws():
    defs = [f"cell {i}".encode() for i in range(500)]
    u = definition_words(defs, SECRET, b"count")[:, 0]
    assert len(set(u.tolist())) == 500
    assert np.all((u > 0) & (u < 1))
    # The same definition, the same draw; another secret or stream, others.
    again = definition_words(defs[:3], SECRET, b"count")[:, 0]
    assert np.array_equal(again, u[:3])
    assert not np.array_equal(definition_words(defs[:3], SECRET, b"weight")[:, 0], u[:3])
    assert not np.array_equal(
        definition_words(defs[:3], b"another-secret-0123", b"count")[:, 0], u[:3]
    )


def test_keyed_words_depend_on_the_record_set_only():
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 2**32, size=(6, 4), dtype=np.uint32)
    n = rng.integers(1, 50, size=(6, 4))
    u = keyed_words(keys, n, SECRET, b"count")[0]
    flat = keyed_words(keys.ravel(), n.ravel(), SECRET, b"count")[0]
    assert np.array_equal(u.ravel(), flat)  # shape and position do not matter
    perm = rng.permutation(24)
    shuffled = keyed_words(keys.ravel()[perm], n.ravel()[perm], SECRET, b"count")[0]
    assert np.array_equal(shuffled, flat[perm])
    other_n = keyed_words(keys, n + 1, SECRET, b"count")[0]
    assert not np.any(other_n == u)
    with pytest.raises(ParameterError, match="16 bytes"):
        keyed_words(keys, n, b"short", b"count")


# -- DP at zero --------------------------------------------------------------------------------

VARIABLES = ["REGION", "SEX", "AGEGRP", "MARSTAT", "HHSIZE", "EDUC", "EMPSTAT", "OCC", "TENURE"]


@pytest.mark.parametrize(
    ("seeds", "secret"), [("cellkey", SECRET), ("keyed", SECRET), ("cellkey", None)]
)
def test_dp_figures_hold_between_empty_and_one_record_cells(demo, seeds, secret):
    prot = Protection(dp_geometric(1.0, cap=5), seeds=seeds, secret=secret)
    figures = prot.describe()
    requests = [ts.TableRequest(c) for c in itertools.combinations(VARIABLES, 3)][:40]
    result = zero_attack(
        ts.TableBuilder(demo, prot).build,
        _truth(demo),
        requests,
        method=seeds,
        epsilon=figures["epsilon"],
        delta=figures["delta"],
    )
    assert result.zeros > 500 and result.ones > 100
    assert result.holds()
    if secret is None:
        # No secret to key an empty cell's draw to: zeros stay 0, and the stated
        # delta says what a non-zero tells about a one-record cell.
        assert result.zeros_nonzero == 0
        assert figures["delta"] > 0.5
        assert figures["zeros"] == "kept at 0"
    else:
        # Empty cells are perturbed like any other: row 0 of the ptable.
        expect = 1 - prot.mechanism.distribution(0)[0]
        assert abs(result.p0 - expect) < 4 * np.sqrt(expect * (1 - expect) / result.zeros)
        assert figures["delta"] < 0.01


def test_stated_figures_of_kept_zeros_are_the_ptable_with_row_zero_fixed():
    ptable = dp_geometric(1.0, cap=5)
    fixed = ptable.fixing_zero()
    assert fixed.distribution(0) == {0: 1.0}
    for n in (1, 2, 7):
        assert fixed.distribution(n) == ptable.distribution(n)
    stated = Protection(ptable).describe()
    assert stated["delta"] == pytest.approx(float(f"{fixed.privacy().delta:.6g}"))
    # delta between 0 and 1: everything a one-record cell publishes that is not 0.
    assert fixed.pair_privacy(0, 1.0).delta == pytest.approx(1 - ptable.distribution(1)[0])
    # A ptable that already keeps zeros (the cell-key method) is unchanged.
    ckm = cached_destatis(3, 1.0, 0)
    assert ckm.fixing_zero() is ckm
    assert Protection(ckm).describe() == {**ckm.describe(), "seeds": "cellkey"}
    sampled = ptable.to_sampled(256).fixing_zero()
    assert sampled.sampled is not None and not sampled.sampled[0].any()


@pytest.mark.parametrize("method", ["ckm", "dp"])
def test_definition_attack_measures_what_remains(demo, method):
    # docs/attacks.md, "Asking a cell under several definitions". Under the
    # cell-key method a one-record cell keeps its record set's value in every
    # definition (record-set consistency), and an empty one stays 0. Under DP
    # every definition draws afresh (DESIGN decision 2: DP keyed by
    # definition), for one record as for none: the attack tells them apart no
    # better than chance.
    mech = dp_geometric(1.0, cap=5) if method == "dp" else cached_destatis(3, 1.0, 0)
    prot = Protection(mech, seeds="keyed", secret=SECRET)
    base = ts.TableRequest(("AGE", "SEX"), universe={"REGION": [2], "AGE": list(range(70, 90))})
    result = definition_attack(
        ts.TableBuilder(demo, prot).build,
        _truth(demo),
        base,
        variable="EDUC",
        codes=list(demo.catalog.variable("EDUC").codes),
        method=f"{method}/keyed",
    )
    assert result.ones > 0 and result.zeros > 0
    if method == "ckm":
        # A one-record cell keeps one value in all but at most one definition.
        assert result.ones_flagged == result.ones
    else:
        # Fresh draws agree only by chance, for one record as for none.
        assert result.ones_flagged < result.ones
        assert result.zeros_flagged < result.zeros


def test_empty_cells_published_non_zero_keep_one_value_in_every_table(demo):
    # Under DP an empty cell may be published as 1 or more; its weighted figure
    # and its sums must not come from the margins around it (which change with
    # the universe), or differing values would tell that it is empty.
    prot = Protection(dp_geometric(1.0, cap=5), seeds="keyed", secret=SECRET)
    builder = ts.TableBuilder(demo, prot)
    truth = _truth(demo)
    seen: dict[tuple, set] = {}
    checked = 0
    old = list(range(60, 91))
    for extra in ([], [30], [31, 45], [22, 50, 58]):
        request = ts.TableRequest(
            ("AGE", "SEX"),
            universe={"REGION": [2], "EMPSTAT": [1], "AGE": old + extra},
            statistic="both",
            magnitudes=("sum:INCOME",),
        )
        pub, true = builder.build(request), truth(request)
        for i, age in enumerate(pub.dimensions[0].codes):
            for j, sex in enumerate(pub.dimensions[1].codes):
                if age in old and true.counts[i, j] == 0 and pub.counts[i, j] > 0:
                    key = (age, sex)
                    value = (
                        pub.counts[i, j],
                        pub.weighted[i, j],
                        pub.magnitudes["sum_INCOME_weighted"][i, j],
                    )
                    seen.setdefault(key, set()).add(value)
                    checked += 1
    assert checked >= 4  # some empty target cells were published non-zero
    assert all(len(v) == 1 for v in seen.values()), seen


# -- refusals on protected values ---------------------------------------------------------------


@pytest.mark.parametrize("additivity", ["aggregate", "independent"])
@pytest.mark.parametrize(
    "prot",
    [
        {"mechanism": cached_destatis(3, 1.0, 0)},
        {"mechanism": cached_destatis(3, 1.0, 0), "seeds": "keyed", "secret": SECRET},
        {"mechanism": dp_geometric(1.0, cap=5), "seeds": "keyed", "secret": SECRET},
    ],
    ids=["ckm-cellkey", "ckm-keyed", "dp-keyed"],
)
def test_universe_size_rule_decides_on_the_tables_published_total(demo, prot, additivity):
    # The rule reads the table's own protected total (or the sum of its inner cells when
    # it shows no total): a function of the figures it publishes, nothing more.
    from tablesafe._settings import RuleSettings
    from tablesafe.rules._rules import table_universe_size

    options = {k: v for k, v in prot.items() if k != "mechanism"}
    protection = Protection(prot["mechanism"], additivity=additivity, **options)
    builder = ts.TableBuilder(demo, protection)
    for dims, universe in [
        (("SEX",), {"REGION": [2], "AGE": list(range(80, 91))}),
        (("EDUC", "SEX"), {"REGION": [2], "AGE": list(range(80, 91))}),
        (("MARSTAT",), {"REGION": [3], "EMPSTAT": [2]}),
    ]:
        for margins in ("all", "none"):
            request = ts.TableRequest(dims, universe=universe, margins=margins)
            built = builder.run(request)
            counts, computed = built.table.counts, built.table.computed
            assert counts is not None
            inner = tuple(slice(0, s - 1) for s in counts.shape)
            shown = counts[(-1,) * len(dims)] if margins == "all" else counts[inner].sum()
            size = table_universe_size(built.table)
            assert size == shown
            if additivity == "aggregate":
                assert size == counts[inner][computed[inner]].sum()
            if protection.describe()["name"] == "ckm":
                # Each noisy figure it adds up is within the ptable's D of its true count.
                noisy = (
                    1 if additivity == "independent" and margins == "all" else computed[inner].sum()
                )
                truth = built.aggregates.universe_n
                assert abs(size - truth) <= protection.describe()["D"] * noisy
            # The rule refuses below the total and answers at it.
            for minimum, refused in ((size, False), (size + 1, True)):
                ruled = ts.TableBuilder(
                    demo, protection, rules=RuleSettings(min_universe_size=minimum)
                )
                if refused:
                    with pytest.raises(ts.RefusedError, match="universe is too small"):
                        ruled.run(request)
                else:
                    assert ruled.run(request).table.counts.tolist() == counts.tolist()


def _universe_site(demo_dir, tmp_path, minimum):
    from tablesafe._settings import SiteConfig

    (tmp_path / "secret").write_text(SECRET.decode())
    return SiteConfig.model_validate(
        {
            "base": str(tmp_path),
            "server": {"audit_db": str(tmp_path / f"audit{minimum}.sqlite")},
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": {"method": "ckm", "seeds": "keyed", "secret_file": "secret"},
                    "rules": {"min_universe_size": minimum, "sliver_min_difference": 0},
                }
            ],
        }
    )


def test_universe_size_refusals_follow_the_published_total(demo_dir, tmp_path):
    from fastapi.testclient import TestClient

    from tablesafe.server import create_app

    bodies = [
        {"dimensions": dims, "universe": {"REGION": [reg], "AGE": list(range(82, 91))}}
        for reg in range(1, 9)
        for dims in (["SEX"], ["EDUC"], ["SEX", "MARSTAT"])
    ]
    # The totals every table would publish: a site without the rule answers them all.
    with TestClient(create_app(_universe_site(demo_dir, tmp_path, 0))) as client:
        totals = []
        for body in bodies:
            r = client.post("/api/datasets/demo/tables", json=body)
            assert r.status_code == 200, r.text
            cells = r.json()["cells"]
            (total,) = [c["n"] for c in cells if all(c[d] == "_T" for d in body["dimensions"])]
            totals.append(total)
    with TestClient(create_app(_universe_site(demo_dir, tmp_path, 40))) as client:
        # Twice, the second time in reverse order: the same request, the same decision.
        for order in (bodies, bodies[::-1]):
            for body in order:
                r = client.post("/api/datasets/demo/tables", json=body)
                total = totals[bodies.index(body)]
                assert r.status_code == (200 if total >= 40 else 403), (body, total, r.text)
    assert min(totals) < 40 <= max(totals)


def test_q_records_choose_the_same_records_in_every_table(demo):
    # Record-level drop/add-up-to-q: the count stream and the record order are
    # keyed to the cell's record set, so the weighted figure (the weights of the
    # records kept or duplicated) is the same in every table of the same records.
    prot = Protection(drop_add_records(rate=0.2), seeds="keyed", secret=SECRET)
    builder = ts.TableBuilder(demo, prot)
    seen: dict[tuple, set] = {}
    for dims, extra in ((("AGE", "SEX"), []), (("SEX", "AGE"), [30, 41]), (("AGE", "SEX"), [55])):
        request = ts.TableRequest(
            dims, universe={"REGION": [2], "AGE": TARGETS + extra}, statistic="both"
        )
        table = builder.build(request)
        names = [d.name for d in table.dimensions]
        a, s = names.index("AGE"), names.index("SEX")
        for idx in np.ndindex(*(len(d.codes) for d in table.dimensions)):
            age = table.dimensions[a].codes[idx[a]]
            if age in TARGETS:
                key = (age, table.dimensions[s].codes[idx[s]])
                seen.setdefault(key, set()).add((table.counts[idx], table.weighted[idx]))
    assert len(seen) == 2 * len(TARGETS)
    assert all(len(v) == 1 for v in seen.values()), seen
    # Some cells had records dropped or duplicated, so the choice was exercised.
    truth = _truth(demo)(ts.TableRequest(("AGE", "SEX"), universe={"REGION": [2], "AGE": TARGETS}))
    changed = sum(
        next(iter(v))[0] != truth.counts[TARGETS.index(k[0]), [1, 2].index(k[1])]
        for k, v in seen.items()
    )
    assert changed > 0


# -- the commands --------------------------------------------------------------------------------


def _run(args, env=None):
    from click.testing import CliRunner

    from tablesafe._cli import get_app

    return CliRunner().invoke(get_app(), args, env=env or {"TABLESAFE_SECRET": SECRET.decode()})


def test_cli_attack_averaging(demo_dir):
    common = [
        "attack",
        "averaging",
        str(demo_dir),
        "--variable",
        "AGE",
        "--targets",
        "81..89",
        "--pad",
        "20..60",
        "--second",
        "SEX",
        "--universe",
        "REGION=2",
        "--magnitude",
        "INCOME",
        "--tables",
        "12",
        "--format",
        "json",
    ]
    result = _run([*common, "--method", "ckm,dp"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert [r["method"] for r in doc] == ["ckm/keyed", "dp/keyed"]
    for r in doc:
        assert r["tables"] == 12 and r["target_cells"] == 18
        assert r["most_distinct_values"] == 1
        assert r["exact_after_all_tables"] == r["exact_after_one_table"]
    before = json.loads(_run([*common, "--method", "ckm", "--seeds", "dynamic"]).output)
    assert before[0]["most_distinct_values"] > 1
    bad = _run([*common[:6], "81..x", *common[7:]])
    assert isinstance(bad.exception, RequestError) and "a range is LO..HI" in str(bad.exception)


def test_cli_attack_zeros(demo_dir):
    result = _run(
        [
            "attack",
            "zeros",
            str(demo_dir),
            "--variables",
            "AGEGRP,REGION,SEX,EDUC,OCC",
            "--method",
            "dp",
            "--epsilon",
            "1",
            "--cap",
            "5",
            "--exclude",
            "EDUC",
            "--base",
            "AGE*SEX",
            "--universe",
            "REGION=2",
            "--format",
            "json",
        ]
    )
    assert result.exit_code == 0, result.output
    (doc,) = json.loads(result.output)
    assert doc["stated_figures_hold"] is True
    assert doc["empty_cells"] > 0 and doc["one_record_cells"] > 0
    assert doc["definitions"]["definitions"] == 6
    alone = _run(["attack", "zeros", str(demo_dir), "--exclude", "EDUC"])
    assert isinstance(alone.exception, RequestError)
    assert "--exclude and --base go together" in str(alone.exception)


def test_averaging_through_the_recommended_site(demo_dir, tmp_path):
    # The done-when of issue 25: on a site configured as the docs recommend
    # (keyed seeds, the small-cell rule, the sliver guard), asking the same
    # small cells in many equivalent forms gives each one published value.
    from fastapi.testclient import TestClient

    from tablesafe._settings import load_site_config
    from tablesafe.server import create_app

    (tmp_path / "secret").write_text(SECRET.decode())
    site = load_site_config(
        data={
            "base": str(tmp_path),
            "server": {"audit_db": "audit.sqlite"},
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": {"method": "ckm", "seeds": "keyed", "secret_file": "secret"},
                    "rules": {
                        "min_universe_size": 50,
                        "min_cell_size": 3,
                        "small_cell_action": "show_less_than",
                        "sliver_min_difference": 10,
                    },
                }
            ],
        }
    )
    rng = np.random.default_rng(11)
    seen: dict[tuple, set] = {}
    answered = 0
    with TestClient(create_app(site)) as client:
        for t in range(40):
            extra = sorted(rng.choice(PAD, size=int(rng.integers(2, 7)), replace=False).tolist())
            dims = ["AGE", "SEX"] if t % 2 == 0 else ["SEX", "AGE"]
            body = {
                "dimensions": dims,
                "universe": {"REGION": [2], "AGE": TARGETS + extra},
                "margins": ("all", "none", "total")[t % 3],
                "statistic": "count,sum:INCOME",
            }
            r = client.post("/api/datasets/demo/tables", json=body)
            assert r.status_code in (200, 403), r.text
            if r.status_code != 200:
                continue
            answered += 1
            for cell in r.json()["cells"]:
                if cell["AGE"] in TARGETS and cell["SEX"] != "_T":
                    value = (cell["n"], cell["sum_INCOME"], cell["suppressed"])
                    seen.setdefault((cell["AGE"], cell["SEX"]), set()).add(json.dumps(value))
    assert answered >= 30
    assert len(seen) == 2 * len(TARGETS)
    values = [json.loads(next(iter(v))) for v in seen.values()]
    assert all(c is not None and s is not None for c, s, _ in values)
    assert all(len(v) == 1 for v in seen.values()), seen
