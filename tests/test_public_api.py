"""The public API is pinned: adding or removing a name is a deliberate change."""

from __future__ import annotations

import pytest

import tablesafe
import tablesafe.engines

EXPECTED = {
    "Catalog",
    "CatalogError",
    "Category",
    "CellAggregates",
    "ComputationError",
    "ConfigError",
    "CustomGroup",
    "CustomGrouping",
    "DataError",
    "Dataset",
    "FormatError",
    "InternalError",
    "ParameterError",
    "RefusedError",
    "RequestError",
    "Rounding",
    "TableRequest",
    "TablesafeError",
    "Tabulation",
    "TabulationPlan",
    "UserError",
    "Variable",
    "__version__",
    "cell_key_uniform",
    "cell_keys",
    "draw_record_keys",
    "protection_from_settings",
    "tabulate",
    "ProtectedTable",
    "Protection",
    "ProtectionSettings",
    "SiteConfig",
    "load_site_config",
    "TableBuilder",
    "PTable",
    "PrivacyFigures",
}


def test_top_level_all_is_pinned():
    """The table builder's own names (36): preparation, ptable files and the catalog's
    parts live in the subpackages that own them."""
    assert set(tablesafe.__all__) == EXPECTED
    for name in tablesafe.__all__:
        assert hasattr(tablesafe, name), name


def test_engines_all_is_pinned():
    assert set(tablesafe.engines.__all__) == {
        "CubeCache",
        "DatasetSummary",
        "DimensionPlan",
        "DuckDBEngine",
        "Engine",
        "MemoryEngine",
        "SparkEngine",
    }


def test_error_hierarchy():
    for name in (
        "CatalogError",
        "DataError",
        "RequestError",
        "ParameterError",
        "FormatError",
        "ConfigError",
        "RefusedError",
    ):
        cls = getattr(tablesafe, name)
        assert issubclass(cls, tablesafe.UserError)
        assert issubclass(cls, ValueError)
        assert 400 <= cls.status_code < 600
    assert not issubclass(tablesafe.InternalError, tablesafe.UserError)
    assert not issubclass(tablesafe.ComputationError, tablesafe.UserError)


def test_engines_satisfy_the_protocol():
    from tablesafe.engines import CubeCache, DuckDBEngine, Engine, MemoryEngine

    assert isinstance(DuckDBEngine(), Engine)
    assert isinstance(MemoryEngine(), Engine)
    assert isinstance(CubeCache(MemoryEngine()), Engine)


def test_postprocess_all_is_pinned():
    import tablesafe.postprocess as pp

    assert set(pp.__all__) == {
        "DesignMatrix",
        "all_margins",
        "design_matrix",
        "estimate_suppressed",
        "laplace_margins",
        "least_absolute_deviation",
        "loglinear_refit",
        "method_a",
        "method_b",
        "method_c",
        "multinomial_round",
        "multinomial_sample",
        "stochastic_round",
        "synthetic_microdata",
    }


def test_subpackage_apis_are_pinned():
    import tablesafe.attacks
    import tablesafe.experiments
    import tablesafe.metrics

    assert set(tablesafe.attacks.__all__) == {
        "AveragingCell",
        "AveragingResult",
        "DefinitionResult",
        "ZeroResult",
        "averaging_attack",
        "definition_attack",
        "zero_attack",
        "ReconstructionResult",
        "SliverResult",
        "WeightedAttackResult",
        "all_k_way_requests",
        "mechanism_support",
        "published_intervals",
        "reconstruction_attack",
        "sliver_attack",
        "weighted_attack",
    }
    assert set(tablesafe.experiments.__all__) == {
        "PAPER_TABLE_4",
        "PAPER_TABLE_5",
        "Shlomo2019",
        "run_shlomo2019",
    }
    assert set(tablesafe.metrics.__all__) == {
        "chi_square_independence",
        "ci_overlap",
        "entropy_risk",
        "exact_disclosure_probability",
        "hellinger_distance",
        "hellinger_utility",
        "mean_absolute_deviation",
        "modified_hellinger_distance",
        "percent_perturbed",
        "relative_absolute_difference",
    }


def test_lazy_exports_name_the_defining_modules():
    """Each lazily exported name is found in the module the package names for it."""
    import importlib

    import tablesafe.catalog
    import tablesafe.engines
    import tablesafe.mechanisms
    import tablesafe.postprocess
    import tablesafe.prepare
    import tablesafe.ptable

    for package in (
        tablesafe,
        tablesafe.catalog,
        tablesafe.engines,
        tablesafe.mechanisms,
        tablesafe.postprocess,
        tablesafe.prepare,
        tablesafe.ptable,
    ):
        exports = package._EXPORTS
        assert set(exports) <= set(package.__all__), package.__name__
        for name, module in exports.items():
            assert getattr(importlib.import_module(module), name) is getattr(package, name)
        assert set(package.__all__) <= set(dir(package))
    modules = {"_cellwise", "_cyclic", "_records", "_resampling"}
    names = set()
    for m in modules:
        names |= set(importlib.import_module(f"tablesafe.mechanisms.{m}").__all__)
    assert names == set(tablesafe.mechanisms.__all__)


def test_import_and_help_load_no_heavy_library():
    """``import tablesafe`` and ``tablesafe --help`` stay fast: no scipy, pandas or DuckDB."""
    import subprocess
    import sys

    code = (
        "import sys, tablesafe, tablesafe.engines, tablesafe.mechanisms\n"
        "from tablesafe._cli import get_app\n"
        "get_app()\n"
        "heavy = {'scipy', 'pandas', 'duckdb', 'pyspark', 'fastapi', 'matplotlib', 'pyarrow'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_docs_page_imports_a_private_module():
    # What the docs use is public (issue 27): no example imports tablesafe._x
    # or tablesafe.package._x.
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    private = re.compile(r"^\s*(from|import)\s+tablesafe(\.\w+)*\._\w+", re.MULTILINE)
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    found = [
        f"{p.name}: {m.group(0).strip()}" for p in pages for m in private.finditer(p.read_text())
    ]
    assert found == []


def test_the_servers_old_protection_name_warns():
    import pytest

    import tablesafe.server

    with pytest.warns(DeprecationWarning, match="site_protection"):
        old = tablesafe.server.protection_from_settings
    assert old is tablesafe.server.site_protection


def test_owner_subpackages_are_pinned():
    import tablesafe.catalog
    import tablesafe.prepare
    import tablesafe.ptable

    assert set(tablesafe.prepare.__all__) == {
        "add_record_keys",
        "add_replicates",
        "init_catalog",
        "write_demo_data",
    }
    assert set(tablesafe.ptable.__all__) == {
        "PTable",
        "PrivacyFigures",
        "parse_ptable",
        "ptable_csv",
        "read_ptable",
        "write_ptable",
    }
    assert set(tablesafe.catalog.__all__) == {
        "Catalog",
        "Category",
        "CountingUnit",
        "CustomGroup",
        "CustomGrouping",
        "Dataset",
        "ReplicateDesign",
        "StructuralZero",
        "Unit",
        "Variable",
    }


def test_moved_names_still_work_for_a_release_with_a_warning_naming_their_place():
    import importlib

    for name, home in tablesafe._MOVED.items():
        assert name not in tablesafe.__all__ and name not in dir(tablesafe)
        with pytest.warns(DeprecationWarning, match=rf"import it from {home}"):
            value = getattr(tablesafe, name)
        assert value is getattr(importlib.import_module(home), name)
    with pytest.raises(AttributeError):
        tablesafe.no_such_name  # noqa: B018
