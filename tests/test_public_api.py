"""The public API is pinned: adding or removing a name is a deliberate change."""

from __future__ import annotations

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
    "DimensionPlan",
    "FormatError",
    "InternalError",
    "ParameterError",
    "RefusedError",
    "ReplicateDesign",
    "RequestError",
    "Rounding",
    "StructuralZero",
    "TableRequest",
    "TablesafeError",
    "Tabulation",
    "TabulationPlan",
    "UserError",
    "Variable",
    "__version__",
    "add_record_keys",
    "add_replicates",
    "init_catalog",
    "cell_key_uniform",
    "cell_keys",
    "draw_record_keys",
    "protection_from_settings",
    "tabulate",
    "write_demo_data",
    "ProtectedTable",
    "Protection",
    "ProtectionSettings",
    "SiteConfig",
    "load_site_config",
    "TableBuilder",
    "PTable",
    "PrivacyFigures",
    "parse_ptable",
    "ptable_csv",
    "read_ptable",
    "write_ptable",
}


def test_top_level_all_is_pinned():
    assert set(tablesafe.__all__) == EXPECTED
    for name in tablesafe.__all__:
        assert hasattr(tablesafe, name), name


def test_engines_all_is_pinned():
    assert set(tablesafe.engines.__all__) == {
        "CubeCache",
        "DatasetSummary",
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

    import tablesafe.engines
    import tablesafe.mechanisms
    import tablesafe.postprocess

    for package in (tablesafe, tablesafe.engines, tablesafe.mechanisms, tablesafe.postprocess):
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
