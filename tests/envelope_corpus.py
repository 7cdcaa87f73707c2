"""Kafka records with the envelope verdict each must get; the Python parser and the Spark
parser are both held to it (tests/core/test_envelope.py, tests/pipelines/test_envelope.py)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

MAX_BYTES = 1024


def event(**overrides: object) -> bytes:
    body: dict[str, object] = {
        "specversion": "1.0", "id": "evt-1", "source": "/billing", "type": "invoice.paid",
        "tenantid": "t-1", "data": {"amount": 12.5, "currency": "EUR"},
    }
    body.update(overrides)
    return orjson.dumps({k: v for k, v in body.items() if v is not None})


@dataclass(frozen=True)
class Case:
    name: str
    value: bytes | None
    reason: str | None  # None: a valid event
    detail: str = ""
    headers: tuple[tuple[str, bytes], ...] = ()


BINARY_HEADERS = (
    ("ce_specversion", b"1.0"), ("ce_id", b"evt-b"), ("ce_source", b"/crm"),
    ("ce_type", b"contact.created"), ("ce_tenantid", b"t-9"), ("ce_subtenantid", b"d-100"),
)

CASES = [
    Case("structured", event(), None),
    Case("with subject, time, subtenant", event(subject="inv/1", time="2026-11-22T07:00:00Z", subtenantid="d-200"), None),
    Case("numeric id read as text", event(id=5), None),
    Case("binary mode", b'{"name":"Ada"}', None, headers=BINARY_HEADERS),
    Case("tombstone", None, "empty", "the record has no value"),
    Case("empty value", b"", "empty", "the record has no value"),
    Case("oversize", event(data={"pad": "x" * 1100}), "oversize"),
    Case("not json", b"hello, world", "not_json", "the value is not valid JSON"),
    Case("truncated json", event()[:-5], "not_json", "the value is not valid JSON"),
    Case("json array", b'[{"id":"a"}]', "not_object", "the value is JSON but not an object"),
    Case("json number", b"42", "not_object", "the value is JSON but not an object"),
    Case("missing id and source", event(id=None, source=None), "missing_attribute",
         "missing CloudEvents attribute(s): id, source"),
    Case("empty type", event(type=""), "missing_attribute", "missing CloudEvents attribute(s): type"),
    Case("object without attributes", b'{"hello":"world"}', "missing_attribute",
         "missing CloudEvents attribute(s): specversion, id, source, type"),
    Case("bad specversion", event(specversion="0.3"), "bad_specversion", "specversion must be 1.0"),
    Case("missing tenant", event(tenantid=None), "missing_tenant", "the tenantid extension attribute is missing"),
    Case("bad time", event(time="yesterday"), "bad_time", "time is not an RFC 3339 timestamp"),
    Case("binary mode, data not json", b"plain text", "not_json", "the value is not valid JSON", headers=BINARY_HEADERS),
    Case("binary mode, no tenant", b"{}", "missing_tenant", "the tenantid extension attribute is missing",
         headers=BINARY_HEADERS[:4]),
]


def expected_detail(case: Case) -> str:
    if case.reason == "oversize":
        assert case.value is not None
        return f"value is {len(case.value)} bytes, over the {MAX_BYTES}-byte limit"
    return case.detail
