"""The options every benchmark takes, with their defaults, and the list types they share."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def parser(doc: str | None, *, runs: int | None = None, out: tuple[str, ...] | None = ("--out",)
           ) -> argparse.ArgumentParser:
    """A benchmark's parser: described by the first paragraph of ``doc`` (its module's
    docstring); ``--runs`` with its default when ``runs`` is given; the results file under
    the names ``out`` (None: the benchmark writes none), default its own in
    ``bench/results`` (``args.out`` is then None)."""
    made = argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None)
    if runs is not None:
        made.add_argument("--runs", type=int, default=runs, help=f"how many times each measurement runs ({runs})")
    if out:
        made.add_argument(*out, dest="out", type=Path,
                          help="write the results here instead of the benchmark's own file in bench/results")
    return made


def comma(kind: Callable[[str], T]) -> Callable[[str], list[T]]:
    """An option's type: a comma-separated list, each item read by ``kind``."""
    def read(text: str) -> list[T]:
        return [kind(item) for item in text.split(",")]
    return read


def names(*allowed: str) -> Callable[[str], list[str]]:
    """An option's type: a comma-separated list of some of ``allowed``."""
    def read(text: str) -> list[str]:
        given = text.split(",")
        unknown = [name for name in given if name not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}; takes some of {','.join(allowed)}")
        return given
    return read


def delivery_flags(made: argparse.ArgumentParser) -> None:
    """The delivery settings a benchmark may set for the systems it starts
    (``systems.Bench.settings_for`` reads them); unset, the job's own defaults."""
    made.add_argument("--trigger-interval", type=float, help="delivery.trigger_interval_s")
    made.add_argument("--per-trigger", type=int, help="delivery.max_offsets_per_trigger in streaming scenarios")
    made.add_argument("--send-partitions", type=int, help="delivery.send_partitions")
    made.add_argument("--deadline", type=float, help="delivery.stage_deadline_s")
