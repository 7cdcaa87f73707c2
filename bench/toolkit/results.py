"""What a benchmark reports: its results file, with the machine's facts, and a markdown table."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"
"""Benchmarks' raw results and state folders (git-ignored)."""


def machine() -> dict[str, Any]:
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.platform()}, {os.cpu_count()} cores",
        "load_average": os.getloadavg(),
    }


def record_results(name: str, summary: dict[str, Any], out: Path | None = None) -> Path:
    """``summary`` and the machine's facts now, in ``out`` (default:
    ``bench/results/<name>.json``); the file written."""
    path = out or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    # default=str: a date or a path among the figures is written as text, not refused.
    path.write_text(json.dumps({**machine(), **summary}, indent=2, default=str))
    return path


def record_medians(name: str, args: argparse.Namespace, runs: list[dict[str, float]]) -> dict[str, float]:
    """The runs' figures (the same names in each), their medians and the arguments, in the
    results file (``args.out``, default ``bench/results/<name>.json``); the medians."""
    medians = {figure: statistics.median(run[figure] for run in runs) for figure in runs[0]}
    record_results(name, {"args": vars(args), "runs": runs, "medians": medians}, args.out)
    return medians


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
