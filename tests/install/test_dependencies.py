"""Every package the code imports is declared in pyproject.toml (markupsafe was not)."""

from __future__ import annotations

import ast
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the check needs one run, not every Python
ROOT = Path(__file__).resolve().parents[2]


def _imported_top_level_modules() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "logsleuth").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"logsleuth", "__future__"}


def _normal(name: str) -> str:
    return name.lower().replace("_", "-")


def test_every_third_party_import_is_a_declared_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {_normal(Requirement(r).name) for r in project["dependencies"]}
    for extra in ("live", "cluster"):
        declared |= {_normal(Requirement(r).name) for r in project["optional-dependencies"][extra]}
    owners = packages_distributions()
    missing = {}
    for module in sorted(_imported_top_level_modules()):
        distributions = {_normal(d) for d in owners.get(module, [module])}
        if not distributions & declared:
            missing[module] = sorted(distributions)
    assert missing == {}
    assert "markupsafe" in declared
