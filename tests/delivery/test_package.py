"""The delivery package's public names, and which of its modules may touch HTTP."""

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

import wayline.delivery as delivery

MODULES = sorted(m.name for m in pkgutil.iter_modules(delivery.__path__))
# The one module allowed to import an HTTP library (STYLE: signing, batching and
# retry policy never do).
# The transports: the only modules that speak HTTP, one per client library.
HTTP_MODULES = ("http_client", "reqwest_transport")


def source(name: str) -> ast.Module:
    return ast.parse(Path(delivery.__path__[0], f"{name}.py").read_text())


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


def test_the_package_exports_every_public_class_and_function() -> None:
    wanted = {
        exported
        for name in MODULES
        for exported in module(name).__all__
        if inspect.isclass(getattr(module(name), exported)) or inspect.isfunction(getattr(module(name), exported))
    }
    # Type aliases and constants stay in their modules unless the package lists them.
    assert wanted - set(delivery.__all__) == set()
    for exported in delivery.__all__:
        owners = [name for name in MODULES if exported in module(name).__all__]
        assert owners, f"wayline.delivery.__all__ names {exported}, which no module exports"
        assert getattr(delivery, exported) is getattr(module(owners[0]), exported)


@pytest.mark.parametrize("name", [m for m in MODULES if m not in HTTP_MODULES])
def test_only_the_http_client_imports_an_http_library_and_nothing_imports_spark(name: str) -> None:
    imported: set[str] = set()
    for node in ast.walk(source(name)):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    forbidden = {"aiohttp", "httpx", "requests", "pyreqwest", "pyspark"}
    forbidden |= {f"wayline.delivery.{m}" for m in HTTP_MODULES}
    assert not {i for i in imported if i.split(".")[0] in forbidden or i in forbidden}
