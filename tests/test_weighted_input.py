"""Bad settings and data for weighted figures: clear typed errors, 4xx in the one error shape."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tablesafe._errors import ConfigError, DataError, ParameterError, RequestError
from tablesafe._request import TableRequest
from tablesafe._rounding import Rounding
from tablesafe._settings import load_site_config
from tablesafe.engines import DuckDBEngine, MemoryEngine
from tablesafe.server import create_app
from test_server import USER_KEY, error_of, site
from tsdata import random_frame


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "0sf", "16sf", "1e999", "abc", ""])
def test_bad_roundings_are_refused(text):
    with pytest.raises(ParameterError, match="rounding|significant digits"):
        Rounding.parse(text)
    with pytest.raises(RequestError):
        TableRequest(("A",), rounding=text)


def test_bad_rounding_in_the_site_configuration(demo_dir, tmp_path):
    for bad in ("0", "-5", "nan"):
        with pytest.raises(ConfigError, match="rounding"):
            site(demo_dir, tmp_path, protection={"method": "ckm", "rounding": bad})
    with pytest.raises(ConfigError, match="weight_noise"):
        site(demo_dir, tmp_path, protection={"method": "ckm", "weight_noise": -1})


def test_server_answers_4xx_for_a_bad_rounding(demo_dir, tmp_path):
    with TestClient(create_app(site(demo_dir, tmp_path, protection={"method": "ckm"}))) as c:
        c.headers["x-api-key"] = USER_KEY
        r = c.post("/api/datasets/demo/tables", json={"dimensions": ["SEX"], "rounding": "0"})
        assert r.status_code == 400
        assert "rounding base must be a positive finite number" in error_of(r)["message"]
        ok = c.post(
            "/api/datasets/demo/tables", json={"dimensions": ["SEX"], "rounding": "1000"}
        ).json()
        assert all(cell["weighted"] % 1000 == 0 for cell in ok["cells"])


@pytest.mark.parametrize(
    ("roundings", "values", "expected"),
    [
        (["1"], [0.4, 0.6, 2.5, 1234.5], [0, 1, 2, 1234]),
        (["1000"], [1499.0, 1500.0, 123456.0], [1000, 2000, 123000]),
        (["0.1"], [0.26, 0.34, 1.04], [0.3, 0.3, 1.0]),
        (["3sf"], [123456.0, 0.0012345, 987.65], [123000.0, 0.00123, 988.0]),
        (["1", "100"], [149.4, 150.4], [100, 200]),
    ],
)
def test_rounding_by_hand(roundings, values, expected):
    out = np.asarray(values, dtype=float)
    for r in roundings:
        out = Rounding.parse(r).apply(out)
    assert out.tolist() == expected
    # Printed as the decimal itself (the nearest double to it).
    assert [repr(float(x)) for x in out] == [repr(float(x)) for x in expected]


def test_weights_outside_the_fixed_point_range(make_dataset):
    frame = random_frame(200, seed=3)
    frame.loc[5, "W"] = 2.0**33
    dataset = make_dataset(frame)
    for engine in (DuckDBEngine(), MemoryEngine()):
        with pytest.raises(DataError, match="below 4294967296"):
            engine.validate(dataset)
    frame = random_frame(3000, seed=3)
    frame["W"] = 2.0**31  # each allowed, but the total exceeds 2**36
    dataset = make_dataset(frame)
    for engine in (DuckDBEngine(), MemoryEngine()):
        with pytest.raises(DataError, match="sums to"):
            engine.validate(dataset)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_weights_are_refused(make_dataset, bad):
    frame = random_frame(200, seed=3)
    frame.loc[7, "W"] = bad
    dataset = make_dataset(frame)
    for engine in (DuckDBEngine(), MemoryEngine()):
        with pytest.raises(DataError, match="NaN or infinite"):
            engine.validate(dataset)


def test_site_rounding_is_canonical():
    cfg = load_site_config(
        data={"datasets": [{"name": "d", "path": ".", "protection": {"rounding": " 2SF "}}]}
    )
    assert cfg.datasets[0].protection.rounding == "2sf"
