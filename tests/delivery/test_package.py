"""Each delivery module's public names are exactly what it defines.

What the modules may load (no HTTP library outside ``transports``, no database outside
``storage``, never Spark) is checked in a fresh interpreter by ``tests/test_imports.py``.
"""

import ast
import importlib
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import pytest

import wayline.delivery as delivery
import wayline.delivery.transports as transports

MODULES = sorted(m.name.removeprefix("wayline.delivery.")
                 for m in pkgutil.walk_packages(delivery.__path__, "wayline.delivery.") if not m.ispkg)


def source(name: str) -> ast.Module:
    return ast.parse(Path(delivery.__path__[0], *name.split(".")).with_suffix(".py").read_text())


def module(name: str) -> ModuleType:
    return importlib.import_module(f"wayline.delivery.{name}")


def defined_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_") and n != "__all__"}


@pytest.mark.parametrize("name", MODULES)
def test_each_module_exports_exactly_what_it_defines(name: str) -> None:
    assert sorted(module(name).__all__) == sorted(defined_names(source(name)))


def test_the_package_re_exports_nothing() -> None:
    # Callers import the module that defines a name; a package face that loads every
    # module would load SQLAlchemy, aiohttp and Kafka for a retry-policy import.
    assert not hasattr(delivery, "__all__")
    assert [n for n, v in vars(delivery).items() if not n.startswith("_") and not isinstance(v, ModuleType)] == []


@pytest.mark.parametrize("package", [delivery, transports], ids=lambda package: package.__name__)
def test_the_package_docstring_maps_each_of_its_modules(package: ModuleType) -> None:
    # The map is how a reader finds a module; one left out there is one nobody finds.
    mapped = re.findall(r"^- ``(\w+)``", package.__doc__ or "", re.MULTILINE)
    assert sorted(mapped) == sorted(m.name for m in pkgutil.iter_modules(package.__path__))
