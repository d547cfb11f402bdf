"""SDMX-JSON 2.0: a protected table as an SDMX 3.0 data message in JSON.

The same observations as SDMX-CSV (:mod:`tablesafe.output._sdmx`): one per
published cell and statistic, with the measure ``OBS_VALUE`` and the
attributes ``OBS_STATUS``, ``CONF_STATUS`` and ``COMMENT_OBS``, in the flat
layout (``dimensionAtObservation=AllDimensions``) of the SDMX-JSON 2.0.0 data
message (sdmx-twg/sdmx-json, ``data-message``):

- ``meta``: the schema's address, an ``id`` made from the message's content
  (a hash: the same table, the same id), ``prepared`` (the catalog's
  ``updated`` date at midnight UTC, or ``1970-01-01T00:00:00Z`` where it gives
  none: a message holds no clock), ``contentLanguages`` and the ``sender``
  (the dataflow's agency).
- Codes are SDMX ids: a character an id cannot hold is written ``$`` and hex
  (``90+`` is ``90$2B``), as in SDMX-CSV.
- ``data.structures[0]``: a link to the dataflow (its URN), the table's
  dimensions then the statistic's, each with ``keyPosition`` (its place in
  this table), its codes and labels (a code list the catalog declares as a
  ``codelist`` link), the measure, and the attributes: ``TITLE`` and
  ``COMMENT_DSET`` at the data set's level (relationship ``dataflow``), the
  others at the observation's (relationship ``observation``).
- ``data.dataSets[0]``: ``action`` ``Information``, the data set's attribute
  values, and ``observations``: the key ``"i:j:...:s"`` of positions in the
  dimensions' values, then ``[value, OBS_STATUS, CONF_STATUS, COMMENT_OBS]``
  (the attributes as positions in their values; ``null`` for no comment).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from tablesafe.output._render import TOTAL_CODE, TOTAL_LABEL, _plain
from tablesafe.output._sdmx import (
    AGENCY,
    CONF_STATUS,
    OBS_STATUS,
    _rows,
    declared,
    dimension_ids,
    sdmx_code,
    sdmx_codes,
    structure_id,
)

if TYPE_CHECKING:
    from tablesafe.cells._plan import DimensionPlan
    from tablesafe.output._published import Published

__all__ = ["SCHEMA", "sdmx_json", "sdmx_json_bytes"]

#: The SDMX-JSON 2.0.0 data message schema the message names.
SCHEMA = (
    "https://raw.githubusercontent.com/sdmx-twg/sdmx-json/master/data-message/"
    "tools/schemas/2.0.0/sdmx-json-data-schema.json"
)
_URN = "urn:sdmx:org.sdmx.infomodel."
_NO_DATE = "1970-01-01T00:00:00Z"


def _urn(kind: str, reference: str) -> str:
    """An SDMX registry URN: ``urn:sdmx:org.sdmx.infomodel.datastructure.Dataflow=A:ID(1.0)``."""
    return f"{_URN}{kind}={reference}"


def _dimension(
    ident: str, name: str, position: int, values: list[tuple[str, str]], codelist: str | None
) -> dict[str, Any]:
    out: dict[str, Any] = {"id": ident, "name": name, "keyPosition": position}
    if codelist:
        out["links"] = [{"rel": "codelist", "urn": _urn("codelist.Codelist", codelist)}]
    out["values"] = [{"id": code, "name": label} for code, label in values]
    return out


def _coded(ident: str, name: str, codes: dict[str, str]) -> dict[str, Any]:
    """An observation attribute whose values are codes of an SDMX code list."""
    return {
        "id": ident,
        "name": name,
        "relationship": {"observation": {}},
        "values": [{"id": c, "name": n} for c, n in codes.items()],
    }


def _texts(ident: str, name: str, texts: list[str], level: str) -> dict[str, Any]:
    """An attribute whose values are free text."""
    return {
        "id": ident,
        "name": name,
        "relationship": {level: {}},
        "values": [{"value": t} for t in texts],
    }


def _positions(column: np.ndarray, order: list[str]) -> tuple[list[str], np.ndarray]:
    """The values a column uses, in ``order``, and each row's position among them."""
    used = set(column.tolist())
    kept = [c for c in order if c in used]
    index = {c: i for i, c in enumerate(kept)}
    return kept, np.array([index[c] for c in column.tolist()], dtype=np.int64)


def _labels(d: DimensionPlan) -> dict[str, str]:
    """A dimension's codes as SDMX ids (``90$2B`` for ``90+``), with their labels, in order."""
    codes = [sdmx_code(c) for c in [*map(str, d.codes), TOTAL_CODE]]
    return dict(zip(codes, [*d.labels, TOTAL_LABEL], strict=True))


def _dimensions(table: Published, rows: dict[str, np.ndarray]) -> tuple[list[Any], list[Any]]:
    """The observation-level dimensions (the table's, then the statistic) and each row's key."""
    structure = declared(table)
    lists = structure.codelists if structure else {}
    ids, stat_id = dimension_ids(table)
    dims, keys = [], []
    for k, (d, ident) in enumerate(zip(table.dimensions, ids, strict=True)):
        labels = _labels(d)
        kept, pos = _positions(rows[d.name], list(labels))
        values = [(c, labels[c]) for c in kept]
        dims.append(_dimension(ident, d.label, k, values, lists.get(d.name)))
        keys.append(pos)
    labels = table.statistic_labels()
    kept, pos = _positions(rows["STATISTIC"], list(labels))
    values = [(c, labels[c]) for c in kept]
    dims.append(_dimension(stat_id, "Statistic", len(ids), values, lists.get("STATISTIC")))
    keys.append(pos)
    return dims, keys


def _observations(
    rows: dict[str, np.ndarray], keys: list[np.ndarray], comments: list[str]
) -> dict[str, list[Any]]:
    """``"i:j:...:s" -> [value, OBS_STATUS, CONF_STATUS(, COMMENT_OBS)]`` (positions)."""
    obs_at = {c: i for i, c in enumerate(OBS_STATUS)}
    conf_at = {c: i for i, c in enumerate(CONF_STATUS)}
    comment_at = {c: i for i, c in enumerate(comments)}
    key_text = [":".join(map(str, k)) for k in zip(*(p.tolist() for p in keys), strict=True)]
    out: dict[str, list[Any]] = {}
    columns = zip(
        key_text,
        rows["OBS_VALUE"].tolist(),
        rows["OBS_STATUS"].tolist(),
        rows["CONF_STATUS"].tolist(),
        rows["COMMENT_OBS"].tolist(),
        strict=True,
    )
    for key, value, obs, conf, comment in columns:
        out[key] = [value, obs_at[obs], conf_at[conf]]
        if comments:
            out[key].append(comment_at[comment] if comment else None)
    return out


def _attributes(meta: dict[str, Any], comments: list[str]) -> dict[str, Any]:
    """The data set's attributes (title, statement) and the observations'."""
    statement = [f"Universe: {meta['universe_label']}.", *meta["footnotes"]["statement"]]
    observation = [
        _coded("OBS_STATUS", "Observation status", OBS_STATUS),
        _coded("CONF_STATUS", "Confidentiality status", CONF_STATUS),
    ]
    if comments:
        observation.append(_texts("COMMENT_OBS", "Observation comment", comments, "observation"))
    return {
        "dataSet": [
            _texts("TITLE", "Title", [meta["title"]], "dataflow"),
            _texts("COMMENT_DSET", "Dataset comment", [" ".join(statement)], "dataflow"),
        ],
        "observation": observation,
    }


def sdmx_json(table: Published) -> dict[str, Any]:
    """The table as an SDMX-JSON 2.0.0 data message (a dict ready for a JSON writer)."""
    meta = table.public_metadata()
    rows = sdmx_codes(table, _rows(table))
    dims, keys = _dimensions(table, rows)
    comments = sorted({c for c in rows["COMMENT_OBS"].tolist() if c})
    link = [{"rel": "dataflow", "urn": _urn("datastructure.Dataflow", structure_id(table))}]
    structure: dict[str, Any] = {
        "links": link,
        "name": meta["title"],
        "dimensions": {"dataSet": [], "series": [], "observation": dims},
        "measures": {"observation": [{"id": "OBS_VALUE", "name": "Observation value"}]},
        "attributes": _attributes(meta, comments),
        "dataSets": [0],
    }
    data_set = {
        "structure": 0,
        "action": "Information",
        "links": link,
        "attributes": [0, 0],
        "observations": _observations(rows, keys, comments),
    }
    data = {"structures": [structure], "dataSets": [data_set]}
    digest = hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY, default=_plain))
    declared_structure = declared(table)
    updated = meta.get("updated")
    return {
        "meta": {
            "schema": SCHEMA,
            "id": f"TABLESAFE-{digest.hexdigest()[:20]}",
            "test": False,
            "prepared": f"{updated}T00:00:00Z" if updated else _NO_DATE,
            "contentLanguages": ["en"],
            "name": meta["title"],
            "sender": {"id": declared_structure.agency if declared_structure else AGENCY},
        },
        "data": data,
    }


def sdmx_json_bytes(table: Published) -> bytes:
    """The SDMX-JSON message as UTF-8 bytes (the same table, the same bytes)."""
    return orjson.dumps(
        sdmx_json(table),
        option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE,
        default=_plain,
    )
