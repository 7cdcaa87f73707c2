"""Event types' JSON Schemas from the registry, re-read every few seconds, not per event.

Each is compiled as registration checks it (``wayline.registry.event_schema``). One stored
before that check that does not compile refuses the events of its type with the reason,
and leaves every other type alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from wayline.core.errors import RejectedInput
from wayline.registry.db import Database
from wayline.registry.event_schema import Validator, compile_schema, first_problem
from wayline.registry.models import EventType


class SchemaCatalog:
    def __init__(self, database: Database, max_age_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._database = database
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._validators: dict[str, Validator | RejectedInput] = {}
        self._read_at: float | None = None

    def problem(self, event_type: str, data: Any) -> str | None:
        validator = self._current().get(event_type)
        if validator is None:
            return None
        if isinstance(validator, RejectedInput):
            return f"{validator}; an admin can replace it with PATCH /event-types/{event_type}"
        return first_problem(validator, data)

    def _current(self) -> dict[str, Any]:
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self._max_age_s:
                with self._database.transaction() as session:
                    rows = session.execute(
                        select(EventType.name, EventType.json_schema).where(EventType.json_schema.is_not(None))
                    ).all()
                # Rows written before the column stored "no schema" as SQL NULL hold JSON null.
                self._validators = {name: _compiled(schema) for name, schema in rows if schema is not None}
                self._read_at = now
            return self._validators


def _compiled(schema: dict[str, Any]) -> Validator | RejectedInput:
    try:
        return compile_schema(schema)
    except RejectedInput as exc:
        return exc


__all__ = ["SchemaCatalog"]
