"""Command line: `tablesafe cyclic perturb|posterior` and `tablesafe resample bootstrap|binomial`."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from tablesafe._cli import get_app, main
from tablesafe._errors import FormatError, ParameterError

runner = CliRunner()

PUBLISHED = "16,0,2,2\n21,11,9,14\n2,11,11,1\n11,13,8,3\n"


def invoke(*args):
    return runner.invoke(get_app(), [str(a) for a in args])


@pytest.fixture
def published(tmp_path):
    path = tmp_path / "published.csv"
    path.write_text(PUBLISHED)
    return path


def test_posterior_reproduces_the_slides(published):
    result = invoke(
        "cyclic", "posterior", published, "--alpha", 0.25, "--beta", 0.25, "--likelihood", "slides"
    )
    assert result.exit_code == 0, result.output
    assert "t(1,2) published 0, mode 0: 0: 0.71  1: 0.25  2: 0.04" in result.output
    assert (
        "t(1,4) published 2, mode 2: 0: 0.06  1: 0.25  2: 0.38  3: 0.25  4: 0.06" in result.output
    )
    assert "t(3,4) published 1, mode 1: 1: 0.71  2: 0.25  3: 0.04" in result.output
    assert (
        "t(4,4) published 3, mode 3: 1: 0.05  2: 0.29  3: 0.44  4: 0.21  5: 0.01" in result.output
    )


def test_posterior_json_and_prior(published, tmp_path):
    prior = tmp_path / "prior.csv"
    prior.write_text("row,col,value,weight\n1,2,0,0\n")
    result = invoke(
        "cyclic", "posterior", published, "--prior", prior, "--format", "json", "--tables"
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    cell = next(c for c in out["cells"] if c["cell"] == [1, 2])
    assert "0" not in cell["distribution"]
    assert sum(cell["distribution"].values()) == pytest.approx(1.0)
    assert out["possible_originals"] > 1 and out["likelihood"] == "exact"


def test_perturb_then_posterior_with_published_cycles(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("5,6,7\n8,9,10\n")
    result = invoke(
        "cyclic", "perturb", table, "--alpha", 0.3, "--beta", 0.2, "--seed", 4, "--format", "json"
    )
    assert result.exit_code == 0, result.output
    pub = json.loads(result.output)["published"]
    assert pub["alpha"] == 0.3 and len(pub["cycles"]) == 3
    perturbed = np.array(pub["table"])
    np.testing.assert_array_equal(perturbed.sum(axis=0), [13, 15, 17])
    np.testing.assert_array_equal(perturbed.sum(axis=1), [18, 27])
    (tmp_path / "p.csv").write_text("\n".join(",".join(map(str, r)) for r in pub["table"]))
    (tmp_path / "pub.json").write_text(result.output)
    post = invoke(
        "cyclic",
        "posterior",
        tmp_path / "p.csv",
        "--alpha",
        0.3,
        "--beta",
        0.2,
        "--cycles",
        tmp_path / "pub.json",
    )
    assert post.exit_code == 0, post.output
    assert post.output.count("published") == 6


def test_perturb_text_prints_table_and_parameters(published):
    result = invoke("cyclic", "perturb", published, "--seed", 1)
    assert result.exit_code == 0
    assert "# perturbed table" in result.output and "# cycle 4" in result.output
    assert "alpha 0.25, beta 0.25, gamma 0.5" in result.output


def test_three_way_long_table(tmp_path):
    rows = ["i,j,k,count"]
    rng = np.random.default_rng(1)
    for i in range(4):
        for j in range(4):
            for k in ("a", "b", "c"):
                rows.append(f"{i + 1},{j + 1},{k},{rng.integers(3, 9)}")
    path = tmp_path / "long.csv"
    path.write_text("\n".join(rows) + "\n")
    result = invoke("cyclic", "perturb", path, "--seed", 2)
    assert result.exit_code == 0, result.output
    assert "i,j,k,count" in result.output
    result = invoke("cyclic", "posterior", path, "--format", "json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert len(out["cells"]) == 48 and out["cells"][0]["name"] == "t(1,1,a)"
    result = invoke(
        "resample", "binomial", path, "--preserve", "k", "--seed", 1, "--format", "json"
    )
    assert result.exit_code == 0, result.output


def test_resample_commands(published):
    result = invoke("resample", "bootstrap", published, "--S", 3, "--M", 3, "--seed", 1)
    assert result.exit_code == 0, result.output
    assert "# released table" in result.output and "M 3" in result.output
    result = invoke(
        "resample",
        "binomial",
        published,
        "--S",
        2,
        "--preserve",
        "rows",
        "--seed",
        1,
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    pub = json.loads(result.output)["published"]
    np.testing.assert_array_equal(np.array(pub["table"]).sum(axis=1), [20, 55, 25, 35])
    assert pub["preserved"] == "margins of axis 0"
    assert np.array(pub["table"])[0, 1] == 0  # zeros stay zero


@pytest.mark.parametrize(
    ("content", "args", "error", "message"),
    [
        ("1,2\n3,-1\n", ("cyclic", "perturb"), ParameterError, "negative"),
        ("1,2.5\n3,1\n", ("cyclic", "posterior"), ParameterError, "whole numbers"),
        ("1,2,3\n", ("cyclic", "perturb"), ParameterError, "at least 2 x 2"),
        (
            "1,2\n3,4\n",
            ("cyclic", "perturb", "--alpha", "0.7", "--beta", "0.5"),
            ParameterError,
            "alpha \\+ beta",
        ),
        ("1,2\n3,4\n", ("resample", "bootstrap", "--S", "0"), ParameterError, "S must be"),
        ("1,2\n3,4\n", ("resample", "binomial", "--S", "-2"), ParameterError, "S must be"),
        ("1,2\n3,x\n", ("resample", "binomial"), FormatError, "not a count"),
        ("1,2\n3\n", ("cyclic", "perturb"), FormatError, "same number"),
        ("", ("cyclic", "perturb"), FormatError, "empty"),
        ("a,b,count\n1,1,2\n1,1,3\n", ("cyclic", "perturb"), FormatError, "twice"),
        (
            "1,2\n3,4\n",
            ("resample", "binomial", "--preserve", "layers"),
            ParameterError,
            "preserve",
        ),
    ],
)
def test_bad_input(tmp_path, content, args, error, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    result = invoke(*args[:2], path, *args[2:])
    assert isinstance(result.exception, error)
    with pytest.raises(error, match=message):
        raise result.exception


def test_main_maps_errors_to_exit_code_2(tmp_path, monkeypatch, capsys):
    path = tmp_path / "bad.csv"
    path.write_text("1,2\n3,-1\n")
    monkeypatch.setattr(sys, "argv", ["tablesafe", "cyclic", "perturb", str(path)])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("error: the table has negative counts")


def test_an_unknown_format_is_a_usage_error_naming_the_choices(tmp_path):
    """``--format`` is click's choice (one owner for every report command): exit code 2."""
    path = tmp_path / "t.csv"
    path.write_text("1,2\n3,4\n")
    result = invoke("cyclic", "perturb", path, "--format", "xml")
    assert result.exit_code == 2
    assert "'xml' is not one of 'text', 'json'" in result.output
