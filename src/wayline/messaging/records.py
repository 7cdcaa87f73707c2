"""A publish request's body, read and checked event by event before anything reaches Kafka.

The body is one CloudEvent (a JSON object) or a batch (a JSON array of them). Each event
must pass the envelope rules the pipelines apply (`wayline.core.envelope`), fit the
per-event size limit (the same one past which the pipelines quarantine), and match its
type's JSON Schema when the registry holds one. Wayline's own operational event types are
refused: the delivery job sends those to the customer their tenantid names, signed, so an
API caller could otherwise forge one to any customer. An event that fails is refused with
its reason; the others are written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from wayline.core.envelope import Rejection, parse_record
from wayline.core.errors import RejectedInput
from wayline.core.settings import EnvelopeSettings
from wayline.messaging.errors import NotJson, TooLarge
from wayline.registry.catalog import OPERATIONAL_EVENT_TYPES

SCHEMA_MISMATCH = "schema_mismatch"
RESERVED_TYPE = "reserved_type"


class Schemas(Protocol):
    def problem(self, event_type: str, data: Any) -> str | None:
        """Why `data` does not match the type's schema; None when it does or there is none."""


@dataclass(frozen=True)
class Outgoing:
    """An event ready to write: keyed by tenant, so one tenant's events keep their order."""

    index: int
    key: bytes
    value: bytes


@dataclass(frozen=True)
class Refused:
    index: int
    code: str
    message: str


@dataclass(frozen=True)
class Written:
    index: int
    partition: int
    offset: int


Result = Written | Refused


def read_body(body: bytes, max_events: int) -> tuple[list[Any], bool]:
    """The events in a request body, and whether it was a batch."""
    if not body.strip():
        raise RejectedInput("the body is empty: send one CloudEvent (a JSON object) or a JSON array of them")
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise NotJson(f"the body is not JSON ({exc})") from exc
    if isinstance(decoded, dict):
        return [decoded], False
    if not isinstance(decoded, list):
        raise RejectedInput("the body must be a CloudEvent (a JSON object) or a JSON array of them")
    if not decoded:
        raise RejectedInput("the batch is empty")
    if len(decoded) > max_events:
        raise TooLarge(f"the batch has {len(decoded)} events, over the limit of {max_events} per request")
    return decoded, True


def check(events: Sequence[Any], envelope: EnvelopeSettings, schemas: Schemas) -> list[Outgoing | Refused]:
    """Each event as it will be written, or refused with the reason."""
    return [_check_one(index, event, envelope, schemas) for index, event in enumerate(events)]


def _check_one(index: int, event: Any, envelope: EnvelopeSettings, schemas: Schemas) -> Outgoing | Refused:
    value = orjson.dumps(event)
    name = f"event {index}" + (f" (id {event['id']!r})" if isinstance(event, dict) and "id" in event else "")
    parsed = parse_record(value, max_bytes=envelope.max_bytes, max_future_skew_s=envelope.max_future_skew_s)
    if isinstance(parsed, Rejection):
        return Refused(index, str(parsed.reason), f"{name}: {parsed.detail}")
    if parsed.type in OPERATIONAL_EVENT_TYPES:
        return Refused(index, RESERVED_TYPE, f"{name}: type {parsed.type} is reserved: only Wayline publishes its "
                                             "own operational events")
    problem = schemas.problem(parsed.type, parsed.data)
    if problem is not None:
        return Refused(index, SCHEMA_MISMATCH, f"{name}: data does not match the schema of {parsed.type}: {problem}")
    return Outgoing(index, parsed.tenantid.encode(), value)


def result_body(result: Result) -> dict[str, Any]:
    if isinstance(result, Written):
        return {"index": result.index, "partition": result.partition, "offset": result.offset}
    return {"index": result.index, "error": {"code": result.code, "message": result.message}}


__all__ = [
    "Outgoing", "RESERVED_TYPE", "Refused", "Result", "SCHEMA_MISMATCH", "Schemas", "Written", "check", "read_body", "result_body",
]
