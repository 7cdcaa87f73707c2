"""The registry's tables. The pipelines never read them per event: they read a snapshot."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Text,
    func,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


def _now() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


class RegistryVersion(Base):
    """One row; database triggers bump it in the same transaction as any change."""

    __tablename__ = "registry_version"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, nullable=False)
    updated_at: Mapped[datetime] = _now()


class Customer(Base):
    __tablename__ = "customers"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    # The tenants whose events this customer may subscribe to with its own key.
    tenants: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False, server_default="{}")
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class ApiKey(Base):
    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False)
    scope: Mapped[str] = mapped_column(Text, nullable=False)  # "admin" or "customer:<id>"
    customer_id: Mapped[str | None] = mapped_column(ForeignKey("customers.id", ondelete="CASCADE"))
    secret_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    created_at: Mapped[datetime] = _now()
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Tenant(Base):
    __tablename__ = "tenants"
    id: Mapped[str] = mapped_column(Text, primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    subtenants: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False, server_default="{}")
    created_at: Mapped[datetime] = _now()


class EventType(Base):
    __tablename__ = "event_types"
    name: Mapped[str] = mapped_column(Text, primary_key=True)
    description: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    # none_as_null: "no schema" is SQL NULL, not the JSON value null, so `IS NULL` means it.
    json_schema: Mapped[dict[str, Any] | None] = mapped_column(JSONB(none_as_null=True))
    created_at: Mapped[datetime] = _now()


class Endpoint(Base):
    __tablename__ = "endpoints"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    customer_id: Mapped[str] = mapped_column(ForeignKey("customers.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(Text, nullable=False)
    description: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    auth_kind: Mapped[str] = mapped_column(String(16), nullable=False, server_default="none")
    auth_encrypted: Mapped[bytes | None] = mapped_column(LargeBinary)  # JSON credentials, encrypted
    timeout_ms: Mapped[int] = mapped_column(Integer, nullable=False)
    max_in_flight: Mapped[int] = mapped_column(Integer, nullable=False)
    rate_limit_per_s: Mapped[int | None] = mapped_column(Integer)
    # NULL: the deployment's schedule. Seconds before each attempt, the first included.
    retry_schedule_s: Mapped[list[float] | None] = mapped_column(ARRAY(Float))
    # 4xx statuses this endpoint wants retried besides 408/409/425/429.
    retry_statuses: Mapped[list[int]] = mapped_column(ARRAY(SmallInteger), nullable=False, server_default="{}")
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="true")
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class SigningSecret(Base):
    __tablename__ = "signing_secrets"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    endpoint_id: Mapped[str] = mapped_column(ForeignKey("endpoints.id", ondelete="CASCADE"), index=True)
    secret_encrypted: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    created_at: Mapped[datetime] = _now()
    # NULL: active; otherwise it signs until then (the overlap after a rotation).
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Subscription(Base):
    __tablename__ = "subscriptions"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    endpoint_id: Mapped[str] = mapped_column(ForeignKey("endpoints.id", ondelete="CASCADE"), index=True)
    customer_id: Mapped[str] = mapped_column(ForeignKey("customers.id", ondelete="CASCADE"), index=True)
    event_types: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False)
    # "all", "tenants" (tenants) or "subtenants" (subtenants: [[tenant, subtenant], ...])
    tenant_scope: Mapped[str] = mapped_column(String(16), nullable=False)
    tenants: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False, server_default="{}")
    subtenants: Mapped[list[list[str]]] = mapped_column(JSONB, nullable=False, server_default="[]")
    filter: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    mode: Mapped[str] = mapped_column(String(16), nullable=False)  # "streaming" or "batch"
    max_count: Mapped[int | None] = mapped_column(Integer)
    max_wait_ms: Mapped[int | None] = mapped_column(Integer)
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="true")
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class IdempotentResponse(Base):
    """The first answer to a create sent with an Idempotency-Key, replayed for repeats;
    without its secret fields, and deleted once older than api.idempotency_ttl_s."""

    __tablename__ = "idempotent_responses"
    api_key_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    status_code: Mapped[int] = mapped_column(Integer, nullable=False)
    body: Mapped[Any] = mapped_column(JSONB, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False,
                                                 index=True)


class ConsoleSession(Base):
    """A signed-in console session. The cookie carries its token; the row, found by the
    token's SHA-256, says whose it is and until when. Signing out deletes the row, so a
    copy of the cookie stops working at once."""

    __tablename__ = "console_sessions"
    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    api_key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), nullable=False)
    created_at: Mapped[datetime] = _now()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, index=True)


class TestEventSend(Base):
    """One test event sent to an endpoint (POST /endpoints/{id}/test), kept a minute for its rate limit."""

    __tablename__ = "test_event_sends"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    endpoint_id: Mapped[str] = mapped_column(ForeignKey("endpoints.id", ondelete="CASCADE"), nullable=False)
    sent_at: Mapped[datetime] = _now()


class RulesVersion(Base):
    """One row; a trigger bumps it with any change to ``rules``. The rules job polls it."""

    __tablename__ = "rules_version"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, nullable=False)
    updated_at: Mapped[datetime] = _now()


class Rule(Base):
    __tablename__ = "rules"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    sql: Mapped[str] = mapped_column(Text, nullable=False)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)  # "filter", "window", "pattern" or "join"
    partition_key: Mapped[list[str]] = mapped_column(ARRAY(Text), nullable=False, server_default="{}")
    output_topic: Mapped[str] = mapped_column(Text, nullable=False)
    output_type: Mapped[str] = mapped_column(Text, nullable=False)
    state_budget: Mapped[int] = mapped_column(Integer, nullable=False)
    time_budget_ms: Mapped[int] = mapped_column(Integer, nullable=False)
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="true")
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="running")
    error: Mapped[str | None] = mapped_column(Text)
    quarantines: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    revision: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class ReferenceTable(Base):
    """Keyed JSON rows join rules look events up in; ``version`` moves with every change."""

    __tablename__ = "reference_tables"
    name: Mapped[str] = mapped_column(Text, primary_key=True)
    description: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    version: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="1")
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class ReferenceRow(Base):
    __tablename__ = "reference_rows"
    table_name: Mapped[str] = mapped_column(Text, ForeignKey("reference_tables.name", ondelete="CASCADE"),
                                            primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    data: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)


class ReconVersion(Base):
    """One row; a trigger bumps it with any change to ``reconciliations``. The recon job polls it."""

    __tablename__ = "recon_version"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, nullable=False)
    updated_at: Mapped[datetime] = _now()


class Reconciliation(Base):
    __tablename__ = "reconciliations"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    expected: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    actual: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    o_ms: Mapped[int] = mapped_column(BigInteger, nullable=False)
    n_ms: Mapped[int] = mapped_column(BigInteger, nullable=False)
    m_ms: Mapped[int] = mapped_column(BigInteger, nullable=False)
    z_ms: Mapped[int] = mapped_column(BigInteger, nullable=False)
    output_topic: Mapped[str] = mapped_column(Text, nullable=False)
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="true")
    revision: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


# Tables whose changes alter what the pipelines deliver; each bumps the registry version.
VERSIONED_TABLES = ("customers", "tenants", "event_types", "endpoints", "signing_secrets", "subscriptions")

__all__ = [
    "ApiKey", "Base", "ConsoleSession", "Customer", "Endpoint", "EventType", "IdempotentResponse", "Reconciliation",
    "ReconVersion", "RegistryVersion", "Rule",
    "RulesVersion",
    "SigningSecret", "TestEventSend", "Subscription", "Tenant", "VERSIONED_TABLES",
]
