"""Datasets: a microdata file together with its catalog.

A dataset lives in a folder holding ``catalog.toml`` and the microdata file
the catalog names (Parquet or CSV; ``microdata.parquet`` by default). The
microdata carries one column per source variable, the record key, and
optionally the survey weight and replicate weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from tablesafe._errors import CatalogError, DataError, choice
from tablesafe.catalog._catalog import Catalog

__all__ = ["CATALOG_FILE", "DataFormat", "Dataset"]

#: Name of the catalog file in a dataset folder.
CATALOG_FILE = "catalog.toml"


class DataFormat(StrEnum):
    """The kinds of microdata file a dataset may have (a member equals its text)."""

    PARQUET = "parquet"
    CSV = "csv"


@dataclass(frozen=True)
class Dataset:
    """A microdata file and its catalog.

    Attributes:
        catalog: The validated catalog.
        path: The microdata file.
        format: ``"parquet"`` or ``"csv"`` (a :class:`DataFormat`).
        name: A short name (the folder's name by default).

    Raises:
        DataError: for another format.
    """

    catalog: Catalog
    path: Path
    format: DataFormat
    name: str

    def __post_init__(self) -> None:
        # A text is accepted and held as its member from here on.
        object.__setattr__(self, "format", choice(DataFormat, self.format, "format", DataError))

    @classmethod
    def open(cls, location: str | Path, *, name: str | None = None) -> Dataset:
        """Open a dataset from its folder (or its catalog file).

        Only the catalog is read here; the microdata is checked against it by
        an engine (:meth:`tablesafe.engines.Engine.validate`).

        Args:
            location: A folder holding ``catalog.toml``, or the catalog file itself.
            name: The dataset's name; defaults to the folder's name.

        Raises:
            CatalogError: if there is no catalog or it is invalid.
            DataError: if the microdata file is missing or of an unknown kind.
        """
        location = Path(location)
        if location.is_dir():
            catalog_path = location / CATALOG_FILE
        elif location.suffix.lower() == ".toml":
            catalog_path = location
        else:
            raise CatalogError(f"{location} is neither a dataset folder nor a catalog (.toml) file")
        if not catalog_path.exists():
            raise CatalogError(
                f"no catalog at {catalog_path}; a dataset folder needs a {CATALOG_FILE}"
            )
        catalog = Catalog.from_toml(catalog_path)
        folder = catalog_path.parent
        if catalog.data_file is not None:
            path = catalog.data_file
        else:
            candidates = [folder / "microdata.parquet", folder / "microdata.csv"]
            found = [p for p in candidates if p.exists()]
            if not found:
                raise DataError(
                    f"the catalog names no data file and {folder} has neither "
                    "microdata.parquet nor microdata.csv"
                )
            path = found[0]
        return cls.from_catalog(catalog, path, name=name or folder.resolve().name)

    @classmethod
    def from_catalog(cls, catalog: Catalog, path: str | Path, *, name: str = "data") -> Dataset:
        """Pair a catalog with a microdata file.

        Raises:
            DataError: if the file does not exist or is not Parquet or CSV.
        """
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in (".parquet", ".csv"):
            raise DataError(f"microdata file {path} must be .parquet or .csv, not {suffix!r}")
        if not path.exists():
            raise DataError(f"microdata file {path} does not exist")
        fmt = DataFormat.PARQUET if suffix == ".parquet" else DataFormat.CSV
        return cls(catalog=catalog, path=path, format=fmt, name=name)
