"""The SDMX structure of a table: an SDMX-ML 2.1 structure message (``format=sdmx-structure``).

SDMX-CSV and SDMX-JSON data messages name a dataflow (``STRUCTURE_ID``);
an SDMX client reads their observations against that dataflow's data
structure definition (DSD). Where the catalog declares no dataflow of a
registry (``[dataset.sdmx]``), the dataflow is the table's own
(:func:`~tablesafe.output._sdmx.table_dataflow`) and this message defines
it, with everything it refers to:

- code lists: one per dimension (the table's categories and ``_T``, the
  total), one of the statistics (``n``, ``weighted``, ``se``,
  ``percent_row``...), and ``CL_OBS_STATUS`` and ``CL_CONF_STATUS`` with the
  codes and names tablesafe uses from SDMX's cross-domain code lists of
  those names;
- a concept scheme: one concept per dimension and per component;
- the data structure definition: the dimensions in the data messages'
  order, the statistic last; the measure ``OBS_VALUE``; the attributes
  ``OBS_STATUS``, ``CONF_STATUS`` (coded), ``COMMENT_OBS`` (text) at the
  observation's level, ``TITLE`` and ``COMMENT_DSET`` at the data set's;
- the dataflow, the one the data messages name, referring to the DSD.

Every artefact's id ends with the dataflow's digest and its version is
``1.0``, so a structure is never redefined under one id. The message is
built from the table's public structure only (labels, codes, statistic
names): the same request gives the same bytes. A client such as ``sdmx1``
reads it, then the table's SDMX-CSV with it
(``tests/test_sdmx_structure.py``). A catalog that declares a registry's
dataflow has its structure in that registry: the format is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree as ET

from tablesafe._errors import RequestError
from tablesafe.output._sdmx import (
    AGENCY,
    CONF_STATUS,
    OBS_STATUS,
    VERSION,
    declared,
    table_codelists,
    table_dataflow,
)

if TYPE_CHECKING:
    from tablesafe.output._published import Published

__all__ = ["MEDIA_TYPE", "sdmx_structure"]

#: The SDMX-ML 2.1 structure message's media type.
MEDIA_TYPE = "application/vnd.sdmx.structure+xml; version=2.1"

_MES = "http://www.sdmx.org/resources/sdmxml/schemas/v2_1/message"
_STR = "http://www.sdmx.org/resources/sdmxml/schemas/v2_1/structure"
_COM = "http://www.sdmx.org/resources/sdmxml/schemas/v2_1/common"
_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
_NO_DATE = "1970-01-01T00:00:00Z"
#: The components beside the dimensions: (id, name, code list or None, level).
_COMPONENTS = (
    ("OBS_STATUS", "Observation status", OBS_STATUS, "observation"),
    ("CONF_STATUS", "Confidentiality status", CONF_STATUS, "observation"),
    ("COMMENT_OBS", "Observation comment", None, "observation"),
    ("TITLE", "Title", None, "dataset"),
    ("COMMENT_DSET", "Dataset comment", None, "dataset"),
)


def _el(parent: ET.Element, ns: str, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    child = ET.SubElement(parent, f"{{{ns}}}{tag}", attrs)
    if text is not None:
        child.text = text
    return child


def _named(parent: ET.Element, ns: str, tag: str, name: str, **attrs: str) -> ET.Element:
    """An element with its ``com:Name`` in English."""
    child = _el(parent, ns, tag, **attrs)
    ET.SubElement(child, f"{{{_COM}}}Name", {_LANG: "en"}).text = name
    return child


def _ref(parent: ET.Element, **attrs: str) -> None:
    """A reference (``Ref``, unqualified in SDMX-ML 2.1)."""
    ET.SubElement(parent, "Ref", attrs)


class _Ids:
    """The ids of one table's artefacts: each ends with the dataflow's digest."""

    def __init__(self, dataflow: str) -> None:
        self.flow = dataflow.split(":", 1)[1].split("(")[0]  # DF_demo_3FA9C2...
        self.digest = self.flow.rsplit("_", 1)[1]
        self.scheme = f"CS_{self.flow.removeprefix('DF_')}"
        self.dsd = f"DSD_{self.flow.removeprefix('DF_')}"

    def codelist(self, component: str) -> str:
        return f"CL_{component}_{self.digest}"

    def concept(self, parent: ET.Element, component: str) -> None:
        identity = _el(parent, _STR, "ConceptIdentity")
        _ref(
            identity,
            id=component,
            maintainableParentID=self.scheme,
            maintainableParentVersion=VERSION,
            agencyID=AGENCY,
            package="conceptscheme",
            **{"class": "Concept"},
        )

    def enumeration(self, parent: ET.Element, component: str) -> None:
        representation = _el(parent, _STR, "LocalRepresentation")
        _ref(
            _el(representation, _STR, "Enumeration"),
            id=self.codelist(component),
            agencyID=AGENCY,
            version=VERSION,
            package="codelist",
            **{"class": "Codelist"},
        )


def _maintained(ident: str) -> dict[str, str]:
    return {"id": ident, "agencyID": AGENCY, "version": VERSION, "isFinal": "true"}


def _codelists(
    root: ET.Element, ids: _Ids, coded: list[tuple[str, str, list[tuple[str, str]]]]
) -> None:
    lists = _el(root, _STR, "Codelists")
    status = [(c, n, list(codes.items())) for c, n, codes, _ in _COMPONENTS if codes]
    for component, name, codes in [*coded, *status]:
        codelist = _named(lists, _STR, "Codelist", name, **_maintained(ids.codelist(component)))
        for code, label in codes:
            _named(codelist, _STR, "Code", label, id=code)


def _concepts(root: ET.Element, ids: _Ids, coded: list[tuple[str, str, list[Any]]]) -> None:
    scheme = _named(
        _el(root, _STR, "Concepts"),
        _STR,
        "ConceptScheme",
        "Concepts of a tablesafe table",
        **_maintained(ids.scheme),
    )
    components = [(c, n) for c, n, _ in coded]
    components += [("OBS_VALUE", "Observation value")]
    components += [(c, n) for c, n, _, _ in _COMPONENTS]
    for component, name in components:
        _named(scheme, _STR, "Concept", name, id=component)


def _data_structure(
    root: ET.Element, ids: _Ids, coded: list[tuple[str, str, list[Any]]], title: str
) -> None:
    dsd = _named(
        _el(root, _STR, "DataStructures"), _STR, "DataStructure", title, **_maintained(ids.dsd)
    )
    parts = _el(dsd, _STR, "DataStructureComponents")
    dimensions = _el(parts, _STR, "DimensionList", id="DimensionDescriptor")
    for position, (component, _, _) in enumerate(coded, start=1):
        dimension = _el(dimensions, _STR, "Dimension", id=component, position=str(position))
        ids.concept(dimension, component)
        ids.enumeration(dimension, component)
    attributes = _el(parts, _STR, "AttributeList", id="AttributeDescriptor")
    for component, _, codes, level in _COMPONENTS:
        attribute = _el(attributes, _STR, "Attribute", id=component, assignmentStatus="Conditional")
        ids.concept(attribute, component)
        if codes:
            ids.enumeration(attribute, component)
        else:
            text = _el(attribute, _STR, "LocalRepresentation")
            _el(text, _STR, "TextFormat", textType="String")
        relation = _el(attribute, _STR, "AttributeRelationship")
        if level == "dataset":
            _el(relation, _STR, "None")
        else:
            _ref(_el(relation, _STR, "PrimaryMeasure"), id="OBS_VALUE")
    measures = _el(parts, _STR, "MeasureList", id="MeasureDescriptor")
    measure = _el(measures, _STR, "PrimaryMeasure", id="OBS_VALUE")
    ids.concept(measure, "OBS_VALUE")


def sdmx_structure(table: Published) -> bytes:
    """The table's SDMX-ML 2.1 structure message (UTF-8 bytes; the same table, the same bytes).

    Raises:
        RequestError: for a table whose catalog declares a registry's dataflow
            (``[dataset.sdmx]``): its structure is the registry's.
    """
    structure = declared(table)
    if structure is not None:
        raise RequestError(
            f"this dataset's SDMX messages name the dataflow {structure.reference}, whose "
            "structure is in its SDMX registry; format 'sdmx-structure' serves the structures "
            "tablesafe names itself (a dataset without [dataset.sdmx] in its catalog)"
        )
    flow = table_dataflow(table)
    ids = _Ids(flow)
    coded = table_codelists(table)
    title = table.title
    message = ET.Element(f"{{{_MES}}}Structure")
    header = _el(message, _MES, "Header")
    _el(header, _MES, "ID", f"TABLESAFE-{ids.digest}")
    _el(header, _MES, "Test", "false")
    updated = table.metadata.get("updated")
    _el(header, _MES, "Prepared", f"{updated}T00:00:00Z" if updated else _NO_DATE)
    _el(header, _MES, "Sender", id=AGENCY)
    root = _el(message, _MES, "Structures")
    # The schema's order: dataflows, code lists, concepts, data structures.
    dataflow = _named(
        _el(root, _STR, "Dataflows"), _STR, "Dataflow", title, **_maintained(ids.flow)
    )
    _ref(
        _el(dataflow, _STR, "Structure"),
        id=ids.dsd,
        agencyID=AGENCY,
        version=VERSION,
        package="datastructure",
        **{"class": "DataStructure"},
    )
    _codelists(root, ids, coded)
    _concepts(root, ids, coded)
    _data_structure(root, ids, coded, title)
    for prefix, ns in (("mes", _MES), ("str", _STR), ("com", _COM)):
        ET.register_namespace(prefix, ns)
    ET.indent(message, space=" ")
    out: bytes = ET.tostring(message, encoding="utf-8", xml_declaration=True)
    return out + b"\n"
