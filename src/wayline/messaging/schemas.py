"""Event types' JSON Schemas from the registry, re-read every few seconds, not per event."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from jsonschema import exceptions, validators
from sqlalchemy import select

from wayline.registry.db import Database
from wayline.registry.models import EventType


class SchemaCatalog:
    def __init__(self, database: Database, max_age_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._database = database
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._validators: dict[str, Any] = {}
        self._read_at: float | None = None

    def problem(self, event_type: str, data: Any) -> str | None:
        validator = self._current().get(event_type)
        if validator is None:
            return None
        error = exceptions.best_match(validator.iter_errors(data))
        if error is None:
            return None
        where = "".join(f"[{part!r}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path)
        return f"data{where}: {error.message}"

    def _current(self) -> dict[str, Any]:
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self._max_age_s:
                with self._database.transaction() as session:
                    rows = session.execute(
                        select(EventType.name, EventType.json_schema).where(EventType.json_schema.is_not(None))
                    ).all()
                # Rows written before the column stored "no schema" as SQL NULL hold JSON null.
                self._validators = {name: validators.validator_for(schema)(schema)
                                    for name, schema in rows if schema is not None}
                self._read_at = now
            return self._validators


__all__ = ["SchemaCatalog"]
