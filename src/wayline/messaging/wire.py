"""The messaging API's request and response bodies, shared by the service (its OpenAPI
document) and the typed client. Plain pydantic models: the client imports this module and
nothing of the service's (SQLAlchemy, confluent-kafka)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RecordError(BaseModel):
    code: str = Field(description="the envelope reason (not_json, oversize, missing_attribute, …), schema_mismatch, "
                                  "reserved_type (one of Wayline's own event types), kafka or timeout")
    message: str


class RecordResult(BaseModel):
    index: int = Field(description="position of the event in the request")
    partition: int | None = None
    offset: int | None = None
    error: RecordError | None = None


class PublishOut(BaseModel):
    """200: every event written; 207: some refused (see each result); 422: none written."""

    results: list[RecordResult]


class PolledRecord(BaseModel):
    partition: int
    offset: int
    timestamp_ms: int
    key: str | None
    event: Any = Field(default=None, description="the record's value, when it is JSON")
    value_base64: str | None = Field(default=None, description="the record's value, when it is not JSON")


class PollOut(BaseModel):
    records: list[PolledRecord] = Field(description="in offset order within each partition, partitions in order")
    next_cursor: str = Field(description="pass as `cursor` to read on from here; valid on any instance")


class TransactionOut(BaseModel):
    id: str = Field(description="`<instance>~<slot>~<token>`: requests for it go to that instance")
    state: str = Field(description="open, committed or aborted")
    written: int = Field(description="records written in it so far")
    topics: list[str]
    timeout_s: float = Field(description="aborted if neither committed nor aborted this long after it began")


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    """Every error answer; a refused publish also carries the per-record `results`."""

    error: ErrorDetail
    results: list[RecordResult] | None = None


class TopicList(BaseModel):
    data: list[str]


class PartitionOut(BaseModel):
    partition: int
    earliest_offset: int
    latest_offset: int


class TopicOut(BaseModel):
    name: str
    partitions: list[PartitionOut]
    retention_ms: int | None
    records: int = Field(description="records the partitions span (earliest to latest offset, markers included)")


class GrantOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: str
    api_key_id: str
    pattern: str
    actions: list[str]
    created_at: datetime


def transaction_body(outcome: Any, timeout_s: float) -> dict[str, Any]:
    return {"id": outcome.id, "state": outcome.state, "written": outcome.written, "topics": outcome.topics,
            "timeout_s": timeout_s}


__all__ = [
    "ErrorDetail", "ErrorOut", "GrantOut", "PartitionOut", "PollOut", "PolledRecord", "PublishOut", "RecordError",
    "RecordResult", "TopicList", "TopicOut", "TransactionOut",
    "transaction_body",
]
