"""What keeps ``bench/`` one toolkit and many benchmarks: each script there is a
benchmark with its own ``main`` built on ``bench/toolkit``, and none imports another.

Read from the sources with ``ast``: nothing is imported or run.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))
TOOLKIT = sorted((BENCH / "toolkit").glob("*.py"))
# rules_flink.py runs in a virtualenv of PyFlink alone (make bench-flink), and
# delivery_http_clients.py may run in a scratch one: what they take from the toolkit must
# need nothing but the standard library.
STDLIB_ONLY = ("cli", "results", "stats", "waiting")


def imported(path: Path) -> set[str]:
    """The top-level names of the modules ``path`` imports (absolute imports)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_there_are_benchmarks_and_a_toolkit() -> None:
    assert len(SCRIPTS) > 10 and len(TOOLKIT) > 5


@pytest.mark.parametrize("path", SCRIPTS + TOOLKIT, ids=lambda p: str(p.relative_to(BENCH)))
def test_no_benchmark_imports_another(path: Path) -> None:
    benchmarks = {script.stem for script in SCRIPTS}
    assert imported(path) & benchmarks == set(), "shared code belongs in bench/toolkit"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_each_script_is_a_benchmark_on_the_toolkit(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    guarded = any(isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"
                  for node in tree.body)
    assert "main" in functions and guarded, "a script in bench/ is a benchmark; shared code goes in the toolkit"
    assert "toolkit" in imported(path)
    own_parsers = [node.lineno for node in ast.walk(tree)
                   if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("ArgumentParser")]
    assert own_parsers == [], "its parser comes from toolkit.cli.parser, with the shared options and defaults"


@pytest.mark.parametrize("name", STDLIB_ONLY)
def test_the_light_toolkit_modules_need_only_the_standard_library(name: str) -> None:
    outside = imported(BENCH / "toolkit" / f"{name}.py") - sys.stdlib_module_names - {"__future__"}
    assert outside == set()
