"""The benchmarks' one quantile: the value at index floor(q * n) of the ordered values."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import ModuleType

import pytest

from wayline.stack.receiver import _quantile as receiver_quantile

STATS = Path(__file__).resolve().parents[2] / "bench" / "toolkit" / "stats.py"


@pytest.fixture(scope="module")
def stats() -> ModuleType:
    # bench/ is not a package: the toolkit's module is loaded from its file.
    spec = importlib.util.spec_from_file_location("bench_toolkit_stats", STATS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_known_values(stats: ModuleType) -> None:
    hundred = [float(n) for n in range(1, 101)]
    assert stats.quantile(hundred, 0.5) == 51.0
    assert stats.quantile(hundred, 0.99) == 100.0
    assert stats.quantile(hundred, 0.0) == 1.0
    thousand = [float(n) for n in range(1000)]
    assert stats.quantile(thousand, 0.99) == 990.0
    assert stats.quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 3.0  # the upper middle, not 2.5
    assert stats.quantile([1.0, 2.0, 3.0], 0.5) == 2.0
    assert stats.quantile([7.0], 0.99) == 7.0
    assert stats.quantile([], 0.5) is None


def test_weighted_values_count_as_often_as_their_weight(stats: ModuleType) -> None:
    assert stats.weighted_quantile([(1.0, 3), (2.0, 1)], 0.5) == 1.0
    assert stats.weighted_quantile([(1.0, 3), (2.0, 1)], 0.75) == 2.0
    assert stats.weighted_quantile([(1.0, 0), (2.0, 2)], 0.0) == 2.0
    assert stats.weighted_quantile([], 0.99) is None
    rng = random.Random(5)
    for _ in range(200):
        weighted = sorted((rng.random(), rng.randint(1, 5)) for _ in range(rng.randint(1, 40)))
        expanded = [value for value, n in weighted for _ in range(n)]
        for q in (0.5, 0.9, 0.99):
            assert stats.weighted_quantile(weighted, q) == stats.quantile(expanded, q)


def test_the_receiver_reports_latencies_by_the_same_definition(stats: ModuleType) -> None:
    rng = random.Random(7)
    for _ in range(200):
        ordered = sorted(rng.random() for _ in range(rng.randint(1, 500)))
        for q in (0.5, 0.99):
            assert stats.quantile(ordered, q) == receiver_quantile(ordered, q)
