"""The reconstruction audit: attack everything a site has served for one dataset.

Answers are deterministic (the same request gives the same table, for
every key, forever), so the audit log's list of answered requests lets the
data owner re-create exactly what has been published, across all keys, and
run the reconstruction attack (:mod:`tablesafe.attacks._reconstruct`) on it
with the site's own protection and small-cell rule. The result, with the
same attack on the unprotected tables for comparison, is stored in the
audit log so the figure can be followed over time (``tablesafe audit
reconstruct``, ``GET/POST /api/admin/datasets/{name}/reconstruction``, the
page's admin section).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tablesafe._errors import RequestError
from tablesafe._protection import Protection, site_protection
from tablesafe._request import TableRequest
from tablesafe._settings import SiteConfig
from tablesafe.attacks._reconstruct import Progress, reconstruction_attack
from tablesafe.catalog._dataset import Dataset
from tablesafe.service._bodies import TableBody
from tablesafe.state import StateStore

__all__ = ["audit_reconstruction", "requests_from_bodies"]


def requests_from_bodies(
    bodies: Sequence[Any], *, where: str = "the request file"
) -> list[TableRequest]:
    """Table requests from request bodies in the HTTP API's format (duplicates dropped).

    Raises:
        RequestError: for something that is not a list of request bodies, an
            empty list, or an invalid body (the message names which one).
    """
    from pydantic import ValidationError

    if not isinstance(bodies, list):
        raise RequestError(
            f"{where} must hold a JSON list of table requests such as "
            '[{"dimensions": ["AGEGRP", "SEX"]}]'
        )
    if not bodies:
        raise RequestError(f"{where} lists no table request; give at least one")
    seen: set[str] = set()
    out = []
    for i, body in enumerate(bodies):
        if not isinstance(body, dict):
            raise RequestError(f"{where}: request {i + 1} is not a JSON object")
        key = json.dumps(body, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        try:
            request = TableBody.model_validate(body).to_request()
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                for e in exc.errors()[:3]
            )
            raise RequestError(f"{where}: request {i + 1} is invalid: {problems}") from None
        out.append(request)
    return out


def audit_reconstruction(
    site: SiteConfig,
    audit: StateStore,
    dataset: str,
    *,
    time_limit: float = 60.0,
    progress: Progress | None = None,
    store: bool = True,
    protection: Protection | None = None,
) -> dict[str, Any]:
    """Attack every table the audit log says was served for ``dataset``.

    Args:
        site: The site configuration (datasets, protection, rules).
        audit: The audit log.
        dataset: The dataset's name in the site configuration.
        time_limit: Seconds for each attack (protected, then unprotected).
        progress: Called with (stage, done, total).
        store: Whether to store the result in the audit log.
        protection: The site's protection for the dataset (read from ``site`` by default).

    Returns:
        The figures (keys of :class:`~tablesafe.attacks.ReconstructionResult`)
        with ``unprotected`` (the same attack on the true tables),
        ``served_until`` (time of the last served request) and ``tables``.

    Raises:
        RequestError: for a dataset the site does not serve or the audit log
            holds no answered table for, or a time limit that is not positive.
    """
    settings = {d.name: d for d in site.datasets}
    if dataset not in settings:
        raise RequestError(
            f"unknown dataset {dataset!r}; this site serves: {', '.join(settings) or 'none'}"
        )
    if not time_limit > 0:
        raise RequestError(f"the time limit must be a positive number of seconds, not {time_limit}")
    served = audit.served_tables(dataset)
    if not served:
        raise RequestError(
            f"the audit log holds no table served for dataset {dataset!r}: nothing to attack yet"
        )
    ds = settings[dataset]
    data = Dataset.open(site.resolve(ds.path), name=ds.name)
    requests = requests_from_bodies([b for _, b in served], where="the audit log")
    prot = protection or site_protection(ds, site)
    rules = ds.rules
    result = reconstruction_attack(
        data,
        requests,
        prot,
        min_cell_size=rules.min_cell_size,
        small_cell_action=rules.small_cell_action,
        time_limit=time_limit,
        progress=progress,
    )
    plain = reconstruction_attack(
        data, requests, Protection(None), time_limit=time_limit, progress=progress, name="none"
    )
    out: dict[str, Any] = {
        **result.as_dict(),
        "unprotected": plain.as_dict(),
        "served_until": served[-1][0],
    }
    if store:
        audit.record_reconstruction(dataset, served[-1][0], len(requests), out)
    return out
