"""What every benchmark starts and ends with: its own stack in a fresh state folder, the
registry schema migrated; and its results, written with the machine's facts."""

from __future__ import annotations

import json
import os
import platform
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wayline.core.settings import Settings
from wayline.registry.db import Database, make_engine, migrate
from wayline.stack import local


@contextmanager
def fresh_stack(state: Path, **overrides: Any) -> Iterator[tuple[Settings, Database]]:
    """Kafka and PostgreSQL under ``state`` (emptied first), stopped on the way out."""
    shutil.rmtree(state, ignore_errors=True)
    settings = Settings(state_dir=state, **overrides)
    local.up(settings)
    engine = make_engine(settings.postgres_dsn())
    try:
        migrate(engine)
        yield settings, Database(engine)
    finally:
        engine.dispose()
        local.down(settings)


RESULTS = Path(__file__).resolve().parent / "results"
"""Benchmarks' raw results and state folders (git-ignored)."""


def record_results(name: str, summary: dict[str, Any]) -> None:
    """``summary`` and the machine's facts now, in ``bench/results/<name>.json``."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({**machine(), **summary}, indent=2))


def machine() -> dict[str, Any]:
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.platform()}, {os.cpu_count()} cores",
        "load_average": os.getloadavg(),
    }
