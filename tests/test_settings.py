"""The settings registry: every setting has a description and is documented."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tablesafe._errors import ConfigError
from tablesafe._settings import (
    ApiKeySettings,
    DatasetSettings,
    EngineSettings,
    MarginalSettings,
    ProtectionSettings,
    RuleSettings,
    ServerSettings,
    SiteConfig,
    StateSettings,
    load_site_config,
)

DOC = (Path(__file__).parent.parent / "docs" / "site-config.md").read_text()
MODELS = [
    ServerSettings,
    EngineSettings,
    ProtectionSettings,
    MarginalSettings,
    RuleSettings,
    DatasetSettings,
    ApiKeySettings,
    StateSettings,
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_setting_is_described_and_documented(model):
    for name, field in model.model_fields.items():
        assert field.description, f"{model.__name__}.{name} has no description"
        assert f"| `{name}` |" in DOC, f"{model.__name__}.{name} is not in docs/site-config.md"


def test_demo_site_configuration_is_valid():
    site = load_site_config(Path(__file__).parent.parent / "demo" / "site.toml")
    assert site.datasets[0].name == "demo"
    assert site.datasets[0].protection.secret_file


def test_secret_from_a_file(tmp_path):
    (tmp_path / "secret").write_text("s3cret-s3cret-s3cret\n")
    site = SiteConfig.model_validate(
        {
            "base": str(tmp_path),
            "datasets": [
                {
                    "name": "d",
                    "path": "x",
                    "protection": {"seeds": "keyed", "secret_file": "secret"},
                }
            ],
        }
    )
    assert site.secret(site.datasets[0]) == b"s3cret-s3cret-s3cret"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[server\n", "not valid TOML"),
        ("base = '/'\n[[datasets]]\nname='d'\npath='x'\n", "'base' is set by tablesafe"),
        ("[[datasets]]\nname='D!'\npath='x'\n", "datasets.0.name"),
        (
            "[[datasets]]\nname='d'\npath='x'\n[datasets.protection]\nmethod='ptable'\n",
            "ptable_file",
        ),
        ("[[datasets]]\nname='d'\npath='x'\n[datasets.protection]\nseeds='dynamic'\n", "secret"),
        (
            "[[datasets]]\nname='d'\npath='x'\n[datasets.rules]\nmax_dimensions=9\n",
            "max_dimensions",
        ),
        ("[[datasets]]\nname='d'\npath='x'\n[[keys]]\nid='a'\nhash='md5:1'\n", "keys.0.hash"),
    ],
)
def test_bad_site_files(tmp_path, text, message):
    path = tmp_path / "site.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_site_config(path)


def test_missing_site_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_site_config(tmp_path / "nope.toml")


def test_a_site_cannot_serve_dynamic_seeds(tmp_path):
    # Li & Krenzke's dynamic seeds give a record set a fresh draw per table
    # (docs/attacks.md, averaging): the workbench may use them, a site may not.
    (tmp_path / "secret").write_text("s3cret-s3cret-s3cret\n")
    with pytest.raises(ValidationError, match="seeds = 'dynamic' cannot be served"):
        SiteConfig.model_validate(
            {
                "base": str(tmp_path),
                "datasets": [
                    {
                        "name": "d",
                        "path": "x",
                        "protection": {"seeds": "dynamic", "secret_file": "secret"},
                    }
                ],
            }
        )


def test_the_dataset_a_site_serves_from_a_folder(tmp_path):
    site = SiteConfig.model_validate(
        {"base": str(tmp_path), "datasets": [{"name": "d", "path": "data/d"}]}
    )
    assert site.dataset_at(tmp_path / "data" / "d").name == "d"
    assert site.dataset_at(str(tmp_path / "data" / "x" / ".." / "d")).name == "d"
    with pytest.raises(
        ConfigError, match=r"serves no dataset at .*elsewhere; it serves d at data/d"
    ):
        site.dataset_at(tmp_path / "elsewhere")
