"""[server] concurrent_tables: at most that many table builds at once in one process (issue 31)."""

from __future__ import annotations

import threading
import time

import pytest

from tablesafe._errors import ConfigError
from tablesafe.server import TableBody, TableService
from tablesafe.service import Principal
from test_jobs import make_site

BODIES = [{"dimensions": ["AGEGRP", "SEX"], "universe": {"REGION": [r]}} for r in (1, 2, 3, 4)]


def _service(demo_dir, tmp_path, limit: int) -> TableService:
    site = make_site(demo_dir, tmp_path, server={"concurrent_tables": limit, "cache_tables": 0})
    return TableService(site)


def _watch(service: TableService, inside) -> dict[str, int]:
    """Count the builds under way (``inside`` runs in each); the most seen at once."""
    served = service.served("demo")
    run = served.builder.prepare
    seen = {"now": 0, "most": 0}
    lock = threading.Lock()

    def watched(*args, **kwargs):
        with lock:
            seen["now"] += 1
            seen["most"] = max(seen["most"], seen["now"])
        try:
            inside()
            return run(*args, **kwargs)
        finally:
            with lock:
                seen["now"] -= 1

    served.builder.prepare = watched  # type: ignore[method-assign]
    return seen


def _ask_at_once(service: TableService, users: int) -> list[str]:
    answers: list[str] = [""] * users
    errors: list[BaseException] = []

    def ask(i: int) -> None:
        try:
            body = TableBody(**BODIES[i % len(BODIES)]).to_request()
            answers[i] = service.table(Principal(f"u{i}", "user", 0), "demo", body).to_json()
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    if errors:
        raise errors[0]
    return answers


def test_no_more_builds_at_once_than_the_limit_and_the_same_answers(demo_dir, tmp_path):
    sequential = _service(demo_dir, tmp_path / "seq", 0)
    try:
        expected = [
            sequential.table(Principal(f"u{i}", "user", 0), "demo",
                             TableBody(**BODIES[i % len(BODIES)]).to_request()).to_json()
            for i in range(8)
        ]  # fmt: skip
    finally:
        sequential.close()
    service = _service(demo_dir, tmp_path / "limited", 2)
    try:
        seen = _watch(service, lambda: time.sleep(0.05))
        answers = _ask_at_once(service, 8)
    finally:
        service.close()
    assert seen["most"] <= 2 and seen["now"] == 0
    assert answers == expected


def test_without_a_limit_builds_run_at_once(demo_dir, tmp_path):
    service = _service(demo_dir, tmp_path, 0)
    # Each build waits for 4 builds to be under way: only possible without a limit below 4.
    barrier = threading.Barrier(4, timeout=60)
    try:
        seen = _watch(service, barrier.wait)
        _ask_at_once(service, 4)
    finally:
        service.close()
    assert seen["most"] == 4


def test_a_negative_limit_is_refused(demo_dir, tmp_path):
    with pytest.raises(
        ConfigError, match="server.concurrent_tables: must be a whole number from 0 to"
    ):
        make_site(demo_dir, tmp_path, server={"concurrent_tables": -1})
