"""Footnotes and flags: every published form of a table says what was done to it."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from tablesafe import Dataset, TableBuilder, TableRequest
from tablesafe._cli._methods import protection_from_options
from tablesafe._errors import CatalogError
from tablesafe._protection import Protection, Rounding
from tablesafe._settings import RuleSettings, load_site_config
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._magnitudes import magnitude_column
from tablesafe.mechanisms._variance import replicate_se
from tablesafe.output._footnotes import footnote_lines
from tablesafe.rules._rules import apply_small_cell_rule
from tablesafe.server import create_app

CKM = {"method": "ckm", "max_deviation": 3, "variance": 1.0, "seeds": "cellkey"}
BODY = {"dimensions": ["AGEGRP", "SEX"], "universe": {"REGION": [1, 2]}, "statistic": "both"}


def make_client(demo_dir, tmp_path, protection, rules=None):
    site = load_site_config(
        data={
            "base": str(tmp_path),
            "server": {"audit_db": "audit.sqlite"},
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": protection,
                    "rules": {
                        "min_universe_size": 20,
                        "min_cell_size": 3,
                        "small_cell_action": "show_less_than",
                        **(rules or {}),
                    },
                }
            ],
        }
    )
    return TestClient(create_app(site))


@pytest.fixture
def ckm_client(demo_dir, tmp_path):
    with make_client(demo_dir, tmp_path, CKM) as c:
        yield c


def test_json_meta_states_the_protection_flags_and_citation(ckm_client, demo_dir):
    doc = ckm_client.post("/api/datasets/demo/tables", json=BODY).json()
    notes = doc["meta"]["footnotes"]
    text = " ".join(notes["statement"])
    assert "cell-key method" in text
    assert "changed slightly" in text and "deliberate" in text
    assert "add up" in text  # totals and additivity
    assert "rounded to whole units" in text  # the site's rounding of weighted figures
    assert 'shown as "<3"' in text  # the small-cell rule
    citation = Catalog.from_toml(demo_dir / "catalog.toml").citation
    assert citation and notes["citation"] == citation
    # The statement is plain text: the catalog's Markdown backticks are dropped.
    assert f"Source: {citation.replace('`', '')}" in text and "`" not in text
    assert set(notes["flags"]) == {"structural_zero", "suppressed"}
    # Every flag the legend explains is a column of the cells, and no other flag is.
    assert {"structural_zero", "suppressed"} <= set(doc["cells"][0])
    assert "perturbed" not in doc["cells"][0] and "adjusted" not in doc["cells"][0]


def test_footnotes_reveal_nothing_about_the_cells(ckm_client):
    """The statement depends on the settings and the request's form, never on the data."""
    a = ckm_client.post("/api/datasets/demo/tables", json=BODY).json()
    other = {**BODY, "dimensions": ["EDUC", "TENURE"], "universe": {"REGION": [4]}}
    b = ckm_client.post("/api/datasets/demo/tables", json=other).json()
    assert a["meta"]["footnotes"] == b["meta"]["footnotes"]
    text = json.dumps(a["meta"]["footnotes"])
    for key in ("RKEY", "secret", "seed", "cell_key"):
        assert key not in text
    # No published number (count or weighted figure) appears in the statement.
    numbers = {str(c[s]) for c in a["cells"] for s in ("n", "weighted") if c[s] is not None}
    words = set(text.replace('"', " ").replace(",", " ").replace(".", " ").split())
    assert not {n for n in numbers if len(n) > 2} & words


def test_csv_ends_with_the_footnotes_and_the_cells_read_back(ckm_client):
    doc = ckm_client.post("/api/datasets/demo/tables", json=BODY).json()
    text = ckm_client.post("/api/datasets/demo/tables?format=csv", json=BODY).text
    plain = ckm_client.post("/api/datasets/demo/tables?format=csv&footnotes=false", json=BODY).text
    assert text.startswith(plain) and "#" not in plain
    tail = text[len(plain) :].splitlines()
    assert tail[0] == ""
    # The universe in words first (issue 30), then the footnotes.
    assert [t.removeprefix("# ") for t in tail[1:]] == [
        f"Universe: {doc['meta']['universe_label']}.",
        *footnote_lines(doc["meta"]["footnotes"]),
    ]
    cells = pd.read_csv(io.StringIO(text), comment="#")
    pd.testing.assert_frame_equal(cells, pd.read_csv(io.StringIO(plain)))
    assert cells["n"].tolist() == [c["n"] for c in doc["cells"]]


def test_xlsx_about_sheet_starts_with_the_footnotes(ckm_client):
    doc = ckm_client.post("/api/datasets/demo/tables", json=BODY).json()
    raw = ckm_client.post("/api/datasets/demo/tables?format=xlsx", json=BODY).content
    about = pd.read_excel(io.BytesIO(raw), sheet_name="about", header=None)
    items = dict(zip(about[0], about[1], strict=True))
    assert items["Title"] == doc["meta"]["title"]
    assert items["Universe"] == doc["meta"]["universe_label"]
    # The statement, then the flag legend: the CSV's lines, sentence by sentence.
    lines = footnote_lines(doc["meta"]["footnotes"])
    notes = [
        v if k == "Note" else f"{k}: {v}."
        for k, v in zip(about[0], about[1], strict=True)
        if k == "Note" or str(k).startswith("Flag ")
    ]
    assert notes == lines
    assert "Mechanism" in items and "{" not in " ".join(map(str, about[1]))


def test_unprotected_tables_say_so(demo_dir, tmp_path):
    with make_client(demo_dir, tmp_path, {"method": "none"}, {"min_cell_size": 0}) as c:
        notes = c.post("/api/datasets/demo/tables", json=BODY).json()["meta"]["footnotes"]
    text = " ".join(notes["statement"])
    assert "no protection" in text and "changed slightly" not in text
    assert set(notes["flags"]) == {"structural_zero"}  # no small-cell rule, no such flag


def test_independent_additivity_warns_that_totals_may_not_add_up(demo_dir, tmp_path):
    with make_client(demo_dir, tmp_path, {**CKM, "additivity": "independent"}) as c:
        notes = c.post("/api/datasets/demo/tables", json=BODY).json()["meta"]["footnotes"]
    assert any("may not equal the sum of their cells" in s for s in notes["statement"])


def test_catalog_citation_round_trips_and_is_checked():
    raw = {
        "dataset": {"title": "T", "citation": "Office (2026), Survey [data set]"},
        "variables": [{"name": "A", "categories": [{"code": 1}]}],
    }
    cat = Catalog.from_dict(raw)
    assert cat.citation == "Office (2026), Survey [data set]"
    import tomllib

    assert Catalog.from_dict(tomllib.loads(cat.to_toml())).citation == cat.citation
    with pytest.raises(CatalogError, match="citation must be a string"):
        Catalog.from_dict({**raw, "dataset": {"citation": 3}})


# -- every sentence of every table's footnotes, checked against the table ------------------------

SECRET = b"footnote-secret-0123456789abcdef"
#: Small cells (for the small-cell rule) among large ones.
DIMS = ("REGION", "OCC")
UNIVERSE = {"AGE": [60, 61, 62, 63, 64]}
MAGS = ("sum:INCOME", "mean:HOURS")
#: (method, additivity) pairs: every method, every additivity a cell-wise method takes.
METHODS = [
    (m, a)
    for m in ("ckm", "dp", "pram", "q", "ptable")
    for a in ("aggregate", "independent", "ipf")
] + [("none", "aggregate"), ("q-records", "aggregate"), ("ckm-dynamic", "aggregate")]
STATISTICS = ["count", "weighted", "both"]
#: The default suite: every method and statistic (aggregate), and the cell-key method with
#: every additivity; the other methods' independent and ipf tables are system tests.
FAST = {(m, a) for m, a in METHODS if a == "aggregate" or m == "ckm"}


@pytest.fixture(scope="module")
def ptable_file(tmp_path_factory):
    """A drop/add-up-to-q ptable in a file named like another method: the name is no guide."""
    from tablesafe.mechanisms import drop_add_q
    from tablesafe.ptable._io import write_ptable

    path = tmp_path_factory.mktemp("pt") / "dp.csv"
    write_ptable(drop_add_q(rate=0.05, cap=3), path)
    return path


def _protection(method: str, additivity: str, ptable_file) -> Protection:
    if method == "ptable":
        base = protection_from_options(f"ptable:{ptable_file}")
    elif method == "q-records":
        from tablesafe.mechanisms import drop_add_records

        return Protection(drop_add_records(rate=0.01), seeds="keyed", secret=SECRET)
    elif method == "ckm-dynamic":
        # Li & Krenzke's seeds (the workbench's): a cell's draw depends on its table.
        base = Protection(protection_from_options("ckm").mechanism, seeds="dynamic", secret=SECRET)
    else:
        base = protection_from_options(method)
    return replace(base, additivity=additivity)


class Case:
    """A protected table, its truth and what the footnotes' checks need."""

    def __init__(self, demo, method, additivity, statistic, ptable_file, rules):
        self.method, self.additivity, self.statistic = method, additivity, statistic
        self.protection = _protection(method, additivity, ptable_file)
        mags = () if statistic == "weighted" else MAGS
        self.request = TableRequest(
            DIMS,
            universe=UNIVERSE,
            statistic=statistic,
            magnitudes=mags,
            replicates=statistic == "both",
        )
        self.builder = TableBuilder(demo, self.protection)
        table = self.builder.build(self.request)
        self.table = apply_small_cell_rule(table, rules) if rules is not None else table
        self.truth = TableBuilder(demo, Protection(None)).tabulate(self.request).aggregates
        self.notes = self.table.footnotes()
        self.frame = self.table.to_frame()
        self.demo = demo

    def inner(self, arr):
        return arr[tuple(slice(0, d.size) for d in self.table.dimensions)]

    def column(self, kind, name):
        """A sum's or mean's column: ``sum_INCOME``, or ``sum_INCOME_weighted`` when weighted."""
        return magnitude_column(kind, name, weighted=self.statistic != "count")

    def adds_up(self, arr) -> bool:
        """Every margin equals the sum of the inner cells it covers (whole units: exactly)."""
        inner = self.inner(arr).astype(float)
        rows, cols = inner.shape
        margins = (arr[:rows, cols], arr[rows, :cols], arr[rows, cols])
        sums = (inner.sum(axis=1), inner.sum(axis=0), inner.sum())
        return all(np.allclose(a, b, rtol=0, atol=1e-6) for a, b in zip(margins, sums, strict=True))

    def same_records_elsewhere(self) -> dict[str, np.ndarray]:
        """The same inner cells (the same records) from a table of another form."""
        region = self.table.dimensions[0].codes[0]
        other = TableRequest(
            DIMS[1:],
            universe={**UNIVERSE, "REGION": [region]},
            statistic=self.statistic,
            replicates=self.request.replicates,
        )
        return self.builder.build(other).statistics()


def _check_protection(case, m):
    words = {
        "none": "no protection",
        "ckm": "the cell-key method",
        "ckm-dynamic": "the cell-key method",
        "dp": "differential privacy",
        "pram": "PRAM",
        "q": "drop/add-up-to-q, cell by cell",
        "q-records": "records are dropped from or added to",
        "ptable": "a perturbation table read from dp.csv",
    }[case.method]
    assert words in m.group(1)


def _check_changed(case, m):
    stats = case.table.statistics()
    true = {"n": case.truth.n, "weighted": case.truth.weight_sum}
    changed = [
        not np.allclose(stats[k][case.table.computed], true[k][case.table.computed])
        for k in ("n", "weighted")
        if k in stats
    ]
    assert any(changed)
    if "the same cell always" in m.group(0):
        # The same records (row 1 of the table, and OCC within that region): the same values.
        other = case.same_records_elsewhere()
        for k in ("n", "weighted"):
            if k in stats:
                np.testing.assert_array_equal(other[k][:-1], stats[k][0, :-1])
    else:
        again = case.builder.build(case.request).statistics()
        for k, v in stats.items():
            np.testing.assert_array_equal(again[k], v)


def _check_counts_add_up(case, m):
    assert case.adds_up(case.table.counts)


def _check_independent(case, m):
    # "may not": on this table they do not (the warning is warranted).
    assert not case.adds_up(case.table.counts)


def _check_derived(case, m):
    stats = case.table.statistics()
    key = "n" if "n" in stats else "weighted"
    true = case.truth.n if key == "n" else case.truth.weight_sum
    shares = stats[key][:-1, 0] / stats[key][-1, 0]
    assert not np.allclose(shares, true[:-1, 0] / true[-1, 0], rtol=0, atol=1e-12)


def _check_weighted(case, m):
    w = case.table.weighted
    computed = case.table.computed
    rounding = Rounding.parse(case.table.rounding)
    np.testing.assert_array_equal(rounding.apply(w[computed]), w[computed])
    if "sums of their cells" in m.group(0):
        assert case.adds_up(w)


def _check_exact_weighted(case, m):
    # An unprotected table's weighted figures: the true sums of weights, rounded as
    # stated, each once (totals too: "each total is the exact total, rounded once").
    _check_weighted(case, m)
    rounding = Rounding.parse(case.table.rounding)
    computed = case.table.computed
    truth = rounding.apply(case.truth.weight_sum[computed])
    np.testing.assert_array_equal(case.table.weighted[computed], truth)
    assert "each total is the exact total, rounded once" in m.group(0)


def _check_se(case, m):
    k = int(m.group(1))
    se = case.table.se
    shown = ~np.isnan(se)
    assert np.array_equal(shown, case.table.computed & (case.table.counts >= k))
    assert shown.any()


def _check_se_perturbation(case, m):
    # The sampling part alone, from the table's replicate figures: the published
    # standard error is never below it (within the rounding), and above it somewhere.
    table = case.table
    design = case.builder.dataset.catalog.replicates
    sampling = replicate_se(table.weighted, table.replicate_weighted, design)
    shown = ~np.isnan(table.se)
    assert np.all(table.se[shown] >= sampling[shown] - 1)
    assert np.any(table.se[shown] > sampling[shown] + 1)


def _check_ci(case, m):
    low = case.table.ci_low[~np.isnan(case.table.ci_low)]
    assert low.size and (low >= 0).all()


def _check_small_cells(case, m):
    k = int(m.group(1)) + 1
    counts = case.table.counts
    expected = case.table.computed & (counts >= 1) & (counts < k)
    assert np.array_equal(case.table.suppressed, expected) and expected.any()
    shown = case.frame.loc[case.frame["suppressed"], "n"]
    assert (shown == f"<{k}").all()
    if m.group(2):  # "and totals include them"
        assert case.adds_up(counts)


def _check_ckm_magnitudes(case, m):
    floor_share = float(m.group(1))
    got = case.table.statistics()[case.column("sum", "INCOME")]
    truth = case.truth.magnitudes["INCOME"]
    cells = case.table.computed & (case.table.counts > 0)
    moved = np.abs(got - truth.total)[cells]
    assert np.all(moved >= floor_share * truth.top[0][cells] - 0.5)  # rounded to whole units
    nonzero = cells & (truth.total != 0)
    assert np.all(np.sign(got[nonzero]) == np.sign(truth.total[nonzero]))


def _check_sums(case, m):
    got = case.table.statistics()[case.column("sum", "INCOME")]
    cells = case.table.computed
    np.testing.assert_array_equal(np.rint(got[cells]), got[cells])  # whole units
    assert not case.adds_up(got)


def _check_means(case, m):
    stats = case.table.statistics()
    mean = stats[case.column("mean", "HOURS")]
    # The same sums and weighted counts published at full precision (a rounding of 1e-9):
    # the protected figures before rounding.
    full = TableBuilder(
        case.builder.dataset,
        replace(case.builder.protection, rounding="1e-9"),
        magnitudes=replace(case.builder.magnitude_protection, rounding="1e-9"),
    ).build(
        TableRequest(DIMS, universe=UNIVERSE, statistic=case.statistic, magnitudes=("sum:HOURS",))
    )
    sums = full.statistics()[case.column("sum", "HOURS")]
    weighted = "weighted" in m.group(1)
    den = (full.weighted if weighted else full.counts).astype(float)
    ok = case.table.computed & (den > 0)
    # The protected sum over the protected denominator, rounded once to 0.01.
    assert np.all(np.abs(mean[ok] - sums[ok] / den[ok]) <= 0.005 + 1e-9)
    assert weighted == (m.group(1) == "protected weighted counts before rounding")


def _check_exact_magnitudes(case, m):
    got = case.table.statistics()[case.column("sum", "INCOME")]
    truth = case.truth.magnitudes["INCOME"].total
    cells = case.table.computed
    np.testing.assert_array_equal(got[cells], np.rint(truth[cells]))


def _check_source(case, m):
    citation = Catalog.from_toml(case.demo.path.parent / "catalog.toml").citation
    assert m.group(1) == citation.replace("`", "")


CHECKS = [
    (r"Protection: (.+)\.", _check_protection),
    (r"Values have been changed slightly .* for every user\.", _check_changed),
    (r"Totals of counts are the sums of the protected cells, so they add up .*", _check_counts_add_up),
    (r"Totals of counts were protected on their own .* cells add up to their totals .*", _check_counts_add_up),
    (r"Each count, totals included, was protected on its own, .*", _check_independent),
    (r"Totals may not add up across tables, and figures derived from them .*", _check_derived),
    (r"Weighted figures are estimates derived from the protected counts.*", _check_weighted),
    (r"Weighted figures are the exact sums of the survey weights, .*", _check_exact_weighted),
    (r"Standard errors and 95% confidence intervals are shown only where the protected count is at least (\d+)\.", _check_se),
    (r"Standard errors add the variance the protection adds .* to the sampling variance from the replicate weights\.", _check_se_perturbation),
    (r"A weighted count cannot be negative, so an interval .* starts at 0\.", _check_ci),
    (r'Protected counts from 1 to (\d+) are shown as "<\d+"(, and totals include them)?\.', _check_small_cells),
    (r"cell-key method for magnitudes: .* every sum moves by at least ([\d.]+) of its largest contribution and never changes its sign.*", _check_ckm_magnitudes),
    (r"Sums and means of continuous variables are exact \(no protection\)\.", _check_exact_magnitudes),
    (r"Sums \(INCOME\) are rounded to whole units; each cell and each total is protected on its own.*", _check_sums),
    (r"Sums \(INCOME\) are rounded to whole units\.", _check_exact_magnitudes),
    (r"Means \(HOURS\) are the protected sums over the (protected (?:weighted counts before rounding|counts)), rounded to a multiple of 0\.01\.", _check_means),
    (r"Source: (.+)", _check_source),
]  # fmt: skip


@pytest.fixture(scope="module")
def demo(demo_dir):
    return Dataset.open(demo_dir)


@pytest.mark.parametrize("statistic", STATISTICS)
@pytest.mark.parametrize(
    ("method", "additivity"),
    [pytest.param(*c, marks=[] if c in FAST else [pytest.mark.system]) for c in METHODS],
)
def test_every_sentence_holds_for_its_table(demo, ptable_file, method, additivity, statistic):
    rules = RuleSettings(min_cell_size=3, small_cell_action="show_less_than")
    case = Case(
        demo, method, additivity, statistic, ptable_file, rules if statistic != "weighted" else None
    )
    lines = footnote_lines(case.notes)
    assert not any("`" in line for line in lines)
    for sentence in case.notes["statement"]:
        matched = [(p, f) for p, f in CHECKS if re.fullmatch(p, sentence)]
        assert len(matched) == 1, f"no single check for: {sentence}"
        pattern, check = matched[0]
        check(case, re.fullmatch(pattern, sentence))
    # The legend explains exactly the flag columns the table has.
    flag_columns = {
        c
        for c in case.frame.columns
        if c in ("structural_zero", "suppressed") or c.startswith("sensitive_")
    }
    assert set(case.notes["flags"]) == flag_columns
    for column, meaning in case.notes["flags"].items():
        assert not meaning.startswith(column), meaning  # no "suppressed: suppressed"
    # The magnitudes' statement (the page shows it) is in the footnotes, so in the CSV too.
    mags = case.table.metadata.get("magnitudes", {})
    if mags.get("statement"):
        assert mags["statement"] in case.notes["statement"]
        assert f"# {mags['statement']}\n" in case.table.to_csv(footnotes=True)
