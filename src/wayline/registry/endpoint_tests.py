"""The limits on test events (``POST /endpoints/{id}/test``): their size, and how many one
endpoint may be sent per minute, counted in the registry so every API instance agrees."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from wayline.core.errors import TooLarge, TooMany
from wayline.registry.models import Endpoint, TestEventSend

WINDOW = timedelta(minutes=1)


def check_size(data: Any, max_bytes: int) -> None:
    size = len(orjson.dumps(data))
    if size > max_bytes:
        raise TooLarge(f"data: a test event carries at most {max_bytes:,} bytes of JSON, this one {size:,} bytes")


def admit(session: Session, endpoint_id: str, per_minute: int, now: datetime | None = None) -> None:
    """Count one test event for the endpoint, or raise TooMany if it had its share this minute.

    The caller has checked that the endpoint is the caller's own."""
    now = now or datetime.now(timezone.utc)
    # Locking the endpoint's row makes concurrent requests count one after the other.
    session.execute(select(Endpoint.id).where(Endpoint.id == endpoint_id).with_for_update())
    session.execute(delete(TestEventSend).where(TestEventSend.endpoint_id == endpoint_id,
                                                TestEventSend.sent_at <= now - WINDOW))
    recent = session.scalar(select(func.count()).select_from(TestEventSend).where(TestEventSend.endpoint_id == endpoint_id))
    if recent >= per_minute:
        raise TooMany(f"at most {per_minute} test events per endpoint per minute (api.test_events_per_minute); "
                      "send the next one in a minute")
    session.add(TestEventSend(endpoint_id=endpoint_id, sent_at=now))
    session.flush()


__all__ = ["admit", "check_size"]
