"""What each layer loads, asked of a fresh interpreter, and which way the layers import.

A module's source can look clean while one of its imports drags in Spark or a database
driver through a package ``__init__``; only a new process that imports it and lists
``sys.modules`` says what a process using it really pays for. Each check below starts
one.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import wayline
import wayline.recon as recon
from wayline.core.settings import DEFAULT_HTTP_CLIENT

# The packages are the layers; a module may import from its own layer and those below.
# Side by side, never importing each other: ``delivery``, ``messaging`` and ``recon`` (the services
# over the registry), ``pipelines`` (Spark wiring) and ``stack`` (local processes);
# ``compose`` wires jobs for the commands and the services above it.
LAYERS = {
    "core": 0,
    "rules": 1,
    "registry": 2,
    "delivery": 3,
    "messaging": 3,
    "recon": 3,
    "pipelines": 4,
    "stack": 4,
    "api": 5,
    "console": 5,
    "compose": 6,
    "cli": 7,
}
PEERS_APART = {frozenset({"pipelines", "stack"}), frozenset({"delivery", "messaging"})}
# The delivery modules that talk to the world; the rest are its pure core.
DELIVERY_EDGES = ("wayline.delivery.storage", "wayline.delivery.transports.aiohttp",
                  "wayline.delivery.transports.pyreqwest", "wayline.delivery.transports.factory",
                  "wayline.delivery.operations", "wayline.delivery.runtime",
                  "wayline.delivery.metrics")
SRC = Path(wayline.__file__).parent


def modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(wayline.__path__, "wayline.")
                  if ".migrations" not in m.name)


def loaded_by(*names: str) -> set[str]:
    """The top-level packages in ``sys.modules`` of a new interpreter after importing ``names``."""
    script = (
        "import importlib, json, sys\n"
        f"for name in {list(names)!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


MODULES = set(modules())


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "wayline" else None


DELIVERY_CORE = [m for m in modules() if layer(m) == "delivery" and not m.startswith(DELIVERY_EDGES)]


def test_every_package_has_a_layer() -> None:
    assert {layer(m) for m in modules()} - {None, "__init__"} <= set(LAYERS)


def test_the_admin_api_loads_no_spark_no_http_client_and_no_kafka() -> None:
    loaded = loaded_by("wayline.api.app", "wayline.compose")
    assert "fastapi" in loaded  # the check itself works: the app was imported
    assert not loaded & {"pyspark", "aiohttp", "confluent_kafka"}


def test_the_delivery_core_loads_no_database_http_or_kafka_library() -> None:
    loaded = loaded_by(*DELIVERY_CORE)
    assert "wayline" in loaded and len(DELIVERY_CORE) > 10
    assert not loaded & {"sqlalchemy", "psycopg", "aiohttp", "confluent_kafka", "pyspark"}


def test_the_rules_core_and_the_registry_load_no_spark() -> None:
    pure_rules = [m for m in modules() if layer(m) == "rules"]
    registry = [m for m in modules() if layer(m) == "registry"]
    loaded = loaded_by(*pure_rules, *registry)
    assert "sqlglot" in loaded and "sqlalchemy" in loaded
    assert not loaded & {"pyspark", "aiohttp"}


def test_the_command_line_starts_without_spark() -> None:
    assert "pyspark" not in loaded_by("wayline.cli.main")


def test_the_delivery_runtime_processes_load_no_spark() -> None:
    # The sender, intake and retry processes run beside Spark, not in it: a JVM each would cost a core.
    for module in ("wayline.delivery.runtime.senders", "wayline.delivery.runtime.intake",
                   "wayline.delivery.runtime.retries"):
        assert "pyspark" not in loaded_by(module), module


def test_the_sender_and_retry_processes_load_no_arrow_and_no_pandas() -> None:
    # Some 115 MB of resident memory in each process (docs/benchmarks.md, "Delivery's resident
    # memory (issue 25)"), for work a sender process has as Python values already.
    for module in ("wayline.delivery.runtime.senders", "wayline.delivery.runtime.retries"):
        assert loaded_by("wayline.cli.main", module) & {"pyarrow", "pandas", "numpy"} == set(), module


def test_the_runtime_processes_entry_point_loads_no_database_library() -> None:
    # What `wayline run delivery` starts: an intake process never needs one, a sender
    # process loads it when its command runs.
    loaded = loaded_by("wayline.cli.runtime", "wayline.delivery.runtime.intake")
    assert "typer" in loaded and "confluent_kafka" in loaded
    assert loaded & {"sqlalchemy", "psycopg", "pyspark", "pyarrow"} == set()


def test_the_matching_jobs_driver_loads_no_pandas() -> None:
    # It plans a JVM-only query; the batching query's pandas is its Python workers' to load.
    loaded = loaded_by("wayline.cli.main", "wayline.pipelines.matching_job")
    assert "pyspark" in loaded
    assert "pandas" not in loaded


def test_the_console_loads_no_spark_no_kafka_client_and_no_rich_or_prometheus_client() -> None:
    loaded = loaded_by("wayline.console.app")
    assert "fastapi" in loaded
    assert loaded & {"pyspark", "confluent_kafka", "rich", "prometheus_client"} == set()


def test_the_messaging_client_loads_no_database_driver_and_no_kafka_client() -> None:
    # The typed client is what users install to talk to the messaging API over HTTP.
    loaded = loaded_by("wayline.messaging.client")
    assert "httpx" in loaded
    assert loaded & {"sqlalchemy", "psycopg", "confluent_kafka", "pyspark"} == set()


def test_the_admin_api_loads_no_pandas_numpy_or_pyarrow() -> None:
    loaded = loaded_by("wayline.api.app")
    assert "fastapi" in loaded
    assert loaded & {"pandas", "numpy", "pyarrow"} == set()


def test_the_default_transport_and_the_transport_choice_load_no_aiohttp() -> None:
    loaded = loaded_by(f"wayline.delivery.transports.{DEFAULT_HTTP_CLIENT}", "wayline.delivery.transports.factory")
    assert "pyreqwest" in loaded
    assert "aiohttp" not in loaded


def test_the_recon_package_loads_and_re_exports_nothing() -> None:
    assert loaded_by("wayline.recon") & {"pandas", "numpy", "pyarrow"} == set()
    assert [n for n, v in vars(recon).items() if not n.startswith("_") and not isinstance(v, ModuleType)] == []


def imports_of(module: str) -> set[str]:
    """Every ``wayline`` module named by an import statement in ``module``, at any depth
    (a function-level import is still a dependency of the module); relative imports are
    resolved, and ``from package import module`` names the module, not its package."""
    path = SRC.joinpath(*module.split(".")[1:])
    is_package = path.is_dir()
    source = path / "__init__.py" if is_package else path.with_suffix(".py")
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                # ``.`` is the package a module is in; in a package's ``__init__``, the package itself.
                parts = module.split(".")
                package = ".".join(parts[: len(parts) + int(is_package) - node.level])
                base = f"{package}.{base}" if base else package
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {name for name in found if name.startswith("wayline.")}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = stack[stack.index(node):]
            del stack[stack.index(node):]
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("module", [m for m in modules() if layer(m) in LAYERS])
def test_no_module_imports_from_a_layer_above_its_own(module: str) -> None:
    own = layer(module)
    assert own is not None
    for imported in imports_of(module):
        other = layer(imported)
        assert other in LAYERS, f"{module} imports {imported}, which belongs to no layer"
        assert LAYERS[other] <= LAYERS[own], f"{module} ({own}) imports {imported} ({other}), a layer above"
        assert frozenset({own, other}) not in PEERS_APART, f"{module} imports {imported}"


@pytest.mark.parametrize("module", DELIVERY_CORE)
def test_the_delivery_core_never_imports_its_storage_or_transports(module: str) -> None:
    assert not {i for i in imports_of(module) if i.startswith(DELIVERY_EDGES)}


@pytest.mark.parametrize("module", [m for m in modules() if layer(m) == "console"])
def test_the_console_calls_services_not_route_handlers(module: str) -> None:
    assert {i for i in imports_of(module) if i.startswith("wayline.api.routers")} == set()


TRANSPORTS = ("wayline.delivery.transports.aiohttp", "wayline.delivery.transports.pyreqwest",
              "wayline.delivery.transports.memory")


@pytest.mark.parametrize("module", TRANSPORTS)
def test_each_transport_imports_only_the_transport_interface_from_delivery(module: str) -> None:
    assert {i for i in imports_of(module) if layer(i) == "delivery"} == {"wayline.delivery.transports.base"}


# A cycle still to break, and the change that breaks it; strict, so the mark goes with the cycle.
KNOWN_CYCLES: dict[str, str] = {}


@pytest.mark.parametrize("package", [
    pytest.param(package, marks=pytest.mark.xfail(strict=True, reason=KNOWN_CYCLES[package]))
    if package in KNOWN_CYCLES else package
    for package in sorted(LAYERS)
])
def test_no_modules_of_a_package_import_each_other_in_a_cycle(package: str) -> None:
    inside = {m for m in MODULES if layer(m) == package}
    assert cycles({m: imports_of(m) & inside for m in inside}) == []
