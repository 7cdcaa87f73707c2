"""Poll cursors: opaque to clients, they carry the next offset of every partition of one topic.

The server keeps no state between polls, so any instance can answer any cursor, and a
restart of the service loses nothing: the cursor is the whole position.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime, timezone

import orjson

from wayline.core.errors import RejectedInput

VERSION = 1
MAX_OFFSET = 2**63 - 1  # Kafka's offsets are signed 64-bit integers
# Kafka's timestamps count milliseconds from the Unix epoch; an earlier one names no record.
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Cursor:
    topic: str
    offsets: dict[int, int]  # partition → the next offset to read

    def encode(self) -> str:
        body = {"v": VERSION, "t": self.topic, "o": {str(p): o for p, o in sorted(self.offsets.items())}}
        return base64.urlsafe_b64encode(orjson.dumps(body)).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str, topic: str) -> Cursor:
        try:
            body = orjson.loads(base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True))
            if body.get("v") != VERSION:
                raise ValueError("version")
            cursor = cls(str(body["t"]), {int(p): int(o) for p, o in body["o"].items()})
        except (binascii.Error, orjson.JSONDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RejectedInput("cursor: not a cursor this API returned") from exc
        if cursor.topic != topic:
            raise RejectedInput(f"cursor: it is a cursor of topic {cursor.topic}, not of {topic}")
        if any(not 0 <= o <= MAX_OFFSET for o in cursor.offsets.values()):
            raise RejectedInput("cursor: not a cursor this API returned")
        return cursor


@dataclass(frozen=True)
class Start:
    """Where a poll without a cursor begins: `earliest`, `latest`, or the first record at or after a time."""

    kind: str  # "earliest", "latest" or "time"
    timestamp_ms: int | None = None

    @classmethod
    def parse(cls, text: str) -> Start:
        if text in ("earliest", "latest"):
            return cls(text)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise RejectedInput(
                f"start: {text!r} is not earliest, latest or an RFC 3339 time such as 2026-11-24T10:00:00Z"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        if moment < EPOCH:
            raise RejectedInput(f"start: {text!r} is before 1970-01-01T00:00:00Z, where Kafka's timestamps begin; "
                                "use earliest")
        return cls("time", int(moment.timestamp() * 1000))


__all__ = ["Cursor", "Start"]
