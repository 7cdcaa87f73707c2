"""The messaging API's tables (migration 0015), on the registry's metadata."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ARRAY, DateTime, ForeignKey, Integer, String, Text, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from wayline.registry.models import Base


class TopicGrant(Base):
    """A customer key may publish to / poll the topics matching `pattern` (admin keys need none)."""

    __tablename__ = "topic_grants"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    api_key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    pattern: Mapped[str] = mapped_column(Text, nullable=False)
    actions: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


class PublishRequest(Base):
    """A publish sent with an Idempotency-Key: claimed before writing, its answer kept after."""

    __tablename__ = "publish_requests"
    api_key_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    claimed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)
    status_code: Mapped[int | None] = mapped_column(Integer)  # None: still being written
    body: Mapped[Any] = mapped_column(JSONB)


__all__ = ["PublishRequest", "TopicGrant"]
